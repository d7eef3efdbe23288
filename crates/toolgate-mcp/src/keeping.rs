//! A gateway's held tasks where they are kept (see [`crate::kept`]): each
//! written when held, claimed there before its call is sent, its end
//! written as it happens, and the tenant's held tasks read back when the
//! gateway starts.

use std::sync::Arc;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};
use toolgate_policy::RunId;

use crate::McpError;
use crate::gateway::{Decider, Gateway};
use crate::kept::{
    FORWARD_INTERRUPTED, Keeper, KeptState, KeptTask, NewTask, ResumedTask, TaskStore,
    TaskStoreError,
};
use crate::message;
use crate::tasks::{DeferredCall, Restored, State, TASK_TTL};

fn store_error(e: TaskStoreError) -> McpError {
    McpError::TaskStore(format!("{} ({})", e, e.code))
}

fn ttl() -> SignedDuration {
    SignedDuration::try_from(TASK_TTL).unwrap_or(SignedDuration::from_hours(1))
}

impl<D: Decider> Gateway<D> {
    /// Keeps this gateway's tasks in `tasks` (once; later calls are
    /// ignored).
    pub fn keep_tasks(&self, tasks: Arc<dyn TaskStore>) {
        let keeper = Keeper {
            tasks,
            server: self.server().to_owned(),
        };
        if self.kept.set(keeper.clone()).is_ok() {
            self.tasks
                .on_end(Box::new(move |id, state| keeper.ended(id, state)));
        }
    }

    /// Writes a task just held (`call`, of `session`) where it is kept,
    /// with `context`, what the transport needs to send it after a restart.
    /// `false` when that failed: the task has failed, and its call is not
    /// to be made. `true` when tasks are not kept.
    pub async fn hold_task(
        &self,
        call: &DeferredCall,
        session: Option<&str>,
        context: Value,
    ) -> bool {
        let Some(k) = self.kept.get() else {
            return true;
        };
        let request = json!({
            "name": call.name,
            "message": call.message,
            "tool": call.tool,
            "arguments": call.arguments,
            "definition_digest": call.definition_digest,
            "context": context,
        })
        .to_string();
        let at = Timestamp::now();
        let task = NewTask {
            task_id: &call.task,
            server: &k.server,
            run_id: call.run_id.as_str(),
            session,
            approval_id: &call.approval,
            request: &request,
            at,
            expires_at: at.saturating_add(ttl()).unwrap_or(at),
        };
        match k.tasks.hold(&task).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(task = %call.task, error = %e, "could not keep a held task");
                let why = format!(
                    "toolgate: the task could not be kept ({}); the call will not be made",
                    e.code
                );
                self.tasks.fail(
                    &call.task,
                    message::error_object(message::INTERNAL_ERROR, &why),
                );
                false
            }
        }
    }

    /// Reads back the tasks this gateway's tenant and server kept: those
    /// left `forwarding` fail (never sent again), those `held` are put back
    /// and returned, to be run again. Called once, when the gateway starts.
    pub async fn resume_tasks(&self) -> Result<Vec<ResumedTask>, McpError> {
        let Some(k) = self.kept.get() else {
            return Ok(Vec::new());
        };
        let tasks = &k.tasks;
        let interrupted = message::error_object(
            message::INTERNAL_ERROR,
            &format!("toolgate: {FORWARD_INTERRUPTED}; whether the call took effect is unknown"),
        )
        .to_string();
        let now = Timestamp::now();
        let failed = tasks
            .fail_interrupted(&k.server, &interrupted, now)
            .await
            .map_err(store_error)?;
        for id in &failed {
            // Read back already (asked about before this ran): it ends too.
            let error = serde_json::from_str(&interrupted).unwrap_or_default();
            self.tasks.fail(id, error);
            tracing::warn!(server = %k.server, task = %id, "a task was being forwarded when the sidecar stopped: it failed, its outcome unknown");
        }
        // Tasks past their time for as long again are read by no one.
        if let Ok(before) = now.checked_sub(ttl()) {
            tasks.purge_expired(before).await.map_err(store_error)?;
        }
        let mut resumed = Vec::new();
        for task in tasks.list_open(&k.server).await.map_err(store_error)? {
            match resumed_task(&task) {
                Ok(r) => {
                    self.tasks.restore(&task.task_id, restored(&task)?);
                    if task.expires_at > now {
                        resumed.push(r);
                    }
                }
                Err(why) => {
                    tracing::error!(task = %task.task_id, %why, "a kept task is unreadable");
                    let error = message::error_object(
                        message::INTERNAL_ERROR,
                        &format!("toolgate: the kept task is unreadable ({why})"),
                    );
                    tasks
                        .fail(&task.task_id, &error.to_string(), now)
                        .await
                        .map_err(store_error)?;
                }
            }
        }
        Ok(resumed)
    }

    /// Puts back task `task_id` from where it was kept, when it is not in
    /// memory (asked about after a restart).
    pub(crate) async fn load_kept(&self, task_id: &str) {
        let Some(k) = self.kept.get() else {
            return;
        };
        if self.tasks.knows(task_id) {
            return;
        }
        match k.tasks.get(task_id).await {
            Ok(Some(task)) if task.server == k.server => match restored(&task) {
                Ok(r) => self.tasks.restore(task_id, r),
                Err(e) => tracing::error!(task = %task_id, error = %e, "a kept task is unreadable"),
            },
            Ok(_) => {}
            Err(e) => tracing::warn!(task = %task_id, error = %e, "could not read a kept task"),
        }
    }

    /// Moves task `task` to `forwarding` where it is kept, before its call
    /// is sent; `Err` with why when the call must not be sent.
    pub(crate) async fn claim_kept(&self, task: &str) -> Result<(), String> {
        let Some(k) = self.kept.get() else {
            return Ok(());
        };
        match k.tasks.claim_forward(task, Timestamp::now()).await {
            Ok(true) => Ok(()),
            Ok(false) => Err("the kept task was no longer held (it ended, or expired)".into()),
            Err(e) => Err(format!(
                "the task's forwarding could not be recorded ({})",
                e.code
            )),
        }
    }
}

fn resumed_task(task: &KeptTask) -> Result<ResumedTask, String> {
    let request: Value = serde_json::from_str(&task.request).map_err(|e| e.to_string())?;
    let text = |name: &str| {
        request
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("no {name}"))
    };
    let arguments: Map<String, Value> = match request.get("arguments") {
        Some(Value::Object(a)) => a.clone(),
        _ => return Err("no arguments".into()),
    };
    let call = DeferredCall {
        task: task.task_id.clone(),
        name: text("name")?,
        message: request.get("message").cloned().ok_or("no message")?,
        tool: text("tool")?,
        arguments,
        run_id: RunId::parse(&task.run_id).map_err(|e| e.to_string())?,
        definition_digest: request
            .get("definition_digest")
            .and_then(Value::as_str)
            .map(str::to_owned),
        approval: task.approval_id.clone(),
    };
    Ok(ResumedTask {
        call,
        session: task.session.clone(),
        context: request.get("context").cloned().unwrap_or(Value::Null),
    })
}

fn restored(task: &KeptTask) -> Result<Restored, McpError> {
    let outcome = || -> Value {
        task.outcome
            .as_deref()
            .and_then(|o| serde_json::from_str(o).ok())
            .unwrap_or_else(|| {
                message::error_object(
                    message::INTERNAL_ERROR,
                    "toolgate: the kept outcome is unreadable",
                )
            })
    };
    let state = match task.state {
        KeptState::Held => State::Waiting {
            approval: task.approval_id.clone(),
        },
        KeptState::Forwarding => State::Forwarded,
        KeptState::Completed => State::Completed(outcome()),
        KeptState::Failed => State::Failed(outcome()),
        KeptState::Cancelled => State::Cancelled,
    };
    let left = task.expires_at.duration_since(Timestamp::now());
    let deadline = Instant::now() + left.try_into().unwrap_or_default();
    Ok(Restored {
        run_id: RunId::parse(&task.run_id)
            .map_err(|e| McpError::TaskStore(format!("kept run id: {e}")))?,
        session: task.session.clone(),
        created_at: task.created_at.to_string(),
        updated_at: task.updated_at.to_string(),
        deadline,
        state,
    })
}
