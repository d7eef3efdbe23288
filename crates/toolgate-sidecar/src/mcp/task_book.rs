//! The gateway's held tasks kept in this sidecar's database
//! (`Store::mcp_tasks`), as its tenant's: the [`TaskStore`] the MCP
//! gateway is handed, so `toolgate-mcp` needs no database crate.

use jiff::Timestamp;
use toolgate_mcp::kept::{KeptState, KeptTask, NewTask, TaskFuture, TaskStore, TaskStoreError};
use toolgate_store::{McpTask, McpTaskState, NewMcpTask, Store, StoreError};

/// One tenant's MCP tasks in the store.
pub(crate) struct StoreTasks {
    store: Store,
    tenant: String,
}

impl StoreTasks {
    /// The tasks of `tenant` in `store`.
    pub(crate) fn new(store: Store, tenant: String) -> Self {
        Self { store, tenant }
    }
}

fn error(e: StoreError) -> TaskStoreError {
    TaskStoreError {
        code: e.code(),
        message: e.to_string(),
    }
}

fn state(state: McpTaskState) -> KeptState {
    match state {
        McpTaskState::Held => KeptState::Held,
        McpTaskState::Forwarding => KeptState::Forwarding,
        McpTaskState::Completed => KeptState::Completed,
        McpTaskState::Failed => KeptState::Failed,
        McpTaskState::Cancelled => KeptState::Cancelled,
    }
}

fn kept(task: McpTask) -> KeptTask {
    KeptTask {
        task_id: task.task_id,
        server: task.server,
        run_id: task.run_id,
        session: task.session,
        approval_id: task.approval_id,
        request: task.request,
        state: state(task.state),
        outcome: task.outcome,
        created_at: task.created_at,
        updated_at: task.updated_at,
        expires_at: task.expires_at,
    }
}

impl TaskStore for StoreTasks {
    fn hold<'a>(&'a self, task: &'a NewTask<'a>) -> TaskFuture<'a, ()> {
        Box::pin(async move {
            let task = NewMcpTask {
                tenant: &self.tenant,
                task_id: task.task_id,
                server: task.server,
                run_id: task.run_id,
                session: task.session,
                approval_id: task.approval_id,
                call_digest: None,
                request: task.request,
                at: task.at,
                expires_at: task.expires_at,
            };
            self.store.mcp_tasks().hold(&task).await.map_err(error)
        })
    }

    fn get<'a>(&'a self, task_id: &'a str) -> TaskFuture<'a, Option<KeptTask>> {
        Box::pin(async move {
            let task = self.store.mcp_tasks().get(&self.tenant, task_id).await;
            task.map(|t| t.map(kept)).map_err(error)
        })
    }

    fn list_open<'a>(&'a self, server: &'a str) -> TaskFuture<'a, Vec<KeptTask>> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            let open = tasks.list_open(&self.tenant, Some(server)).await;
            open.map(|all| all.into_iter().map(kept).collect())
                .map_err(error)
        })
    }

    fn claim_forward<'a>(&'a self, task_id: &'a str, at: Timestamp) -> TaskFuture<'a, bool> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            tasks
                .claim_forward(&self.tenant, task_id, at)
                .await
                .map_err(error)
        })
    }

    fn complete<'a>(
        &'a self,
        task_id: &'a str,
        result: &'a str,
        at: Timestamp,
    ) -> TaskFuture<'a, ()> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            let done = tasks.complete(&self.tenant, task_id, result, at).await;
            done.map(drop).map_err(error)
        })
    }

    fn fail<'a>(&'a self, task_id: &'a str, failure: &'a str, at: Timestamp) -> TaskFuture<'a, ()> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            let done = tasks.fail(&self.tenant, task_id, failure, at).await;
            done.map(drop).map_err(error)
        })
    }

    fn cancel<'a>(&'a self, task_id: &'a str, at: Timestamp) -> TaskFuture<'a, ()> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            let done = tasks.cancel(&self.tenant, task_id, at).await;
            done.map(drop).map_err(error)
        })
    }

    fn fail_interrupted<'a>(
        &'a self,
        server: &'a str,
        failure: &'a str,
        at: Timestamp,
    ) -> TaskFuture<'a, Vec<String>> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            tasks
                .fail_interrupted(&self.tenant, server, failure, at)
                .await
                .map_err(error)
        })
    }

    fn purge_expired(&self, before: Timestamp) -> TaskFuture<'_, ()> {
        Box::pin(async move {
            let tasks = self.store.mcp_tasks();
            let purged = tasks.purge_expired(&self.tenant, before).await;
            purged.map(drop).map_err(error)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_gateway_and_the_store_say_the_same_about_an_interrupted_task() {
        assert_eq!(
            toolgate_mcp::kept::FORWARD_INTERRUPTED,
            toolgate_store::FORWARD_INTERRUPTED
        );
    }
}
