//! Held tasks kept where they outlive the process (a [`TaskStore`]: the
//! sidecar's is its database, `Store::mcp_tasks`), so that a restarted
//! sidecar still answers `tasks/get` and still makes the call once its
//! approval is granted.
//!
//! - A task is written when it is held, before the client is given its
//!   id; its end (completed, failed, cancelled) is written as it happens.
//! - At most once: the move to `forwarding` is committed in the store
//!   before the call is sent, and only one process wins it. A task found
//!   `forwarding` when a gateway starts was being sent when the last one
//!   stopped: it is never sent again, it fails with its outcome unknown
//!   ([`FORWARD_INTERRUPTED`]).
//! - A gateway started on the store resumes the held tasks of its tenant
//!   and server ([`Gateway::resume_tasks`]): they wait for their approval
//!   again and are decided again when it comes, as before the restart.
//! - One sidecar serves a tenant's server at a time: a task left
//!   `forwarding` by another live sidecar of the same tenant and server
//!   would be failed by this one's start.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};
use toolgate_policy::RunId;

use crate::McpError;
use crate::gateway::{Decider, Gateway};
use crate::message;
use crate::tasks::{DeferredCall, Restored, State, TASK_TTL};

/// The error text of a task interrupted while forwarding (the store keeps
/// the same words, `toolgate_store::FORWARD_INTERRUPTED`).
pub const FORWARD_INTERRUPTED: &str = "outcome unknown: the sidecar stopped while forwarding";

/// What a [`TaskStore`] operation answers.
pub type TaskFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TaskStoreError>> + Send + 'a>>;

/// Why a [`TaskStore`] could not do what it was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct TaskStoreError {
    /// The stable error code (`store_unavailable`, …).
    pub code: &'static str,
    /// What happened.
    pub message: String,
}

/// Where a kept task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptState {
    /// Waiting on its approval.
    Held,
    /// Claimed and being sent upstream (or sent, its answer awaited).
    Forwarding,
    /// The server's result is in `outcome`.
    Completed,
    /// The error is in `outcome`.
    Failed,
    /// Cancelled by its client while held.
    Cancelled,
}

/// A task to keep, as it is held.
#[derive(Debug, Clone)]
pub struct NewTask<'a> {
    /// The task id the client was given.
    pub task_id: &'a str,
    /// The MCP server (upstream) name.
    pub server: &'a str,
    /// The run that made the call.
    pub run_id: &'a str,
    /// The MCP session it belongs to, if any.
    pub session: Option<&'a str>,
    /// The approval it waits on.
    pub approval_id: &'a str,
    /// What the gateway needs to forward the call (JSON text).
    pub request: &'a str,
    /// When it was held.
    pub at: Timestamp,
    /// When it is given up.
    pub expires_at: Timestamp,
}

/// A task as kept.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptTask {
    /// The task id.
    pub task_id: String,
    /// The MCP server name.
    pub server: String,
    /// The run.
    pub run_id: String,
    /// The MCP session.
    pub session: Option<String>,
    /// The approval waited on.
    pub approval_id: String,
    /// What the gateway forwards (JSON text, as held).
    pub request: String,
    /// Where it stands.
    pub state: KeptState,
    /// The result or error (JSON text) once ended.
    pub outcome: Option<String>,
    /// When it was held.
    pub created_at: Timestamp,
    /// Its last change.
    pub updated_at: Timestamp,
    /// When it is given up.
    pub expires_at: Timestamp,
}

/// Where one tenant's held tasks are kept: what a gateway needs of a store
/// ([`Gateway::keep_tasks`]). Every operation is the tenant's own.
pub trait TaskStore: Send + Sync + 'static {
    /// Keeps a task just held.
    fn hold<'a>(&'a self, task: &'a NewTask<'a>) -> TaskFuture<'a, ()>;
    /// Task `task_id`, if kept.
    fn get<'a>(&'a self, task_id: &'a str) -> TaskFuture<'a, Option<KeptTask>>;
    /// The tasks of `server` that have not ended.
    fn list_open<'a>(&'a self, server: &'a str) -> TaskFuture<'a, Vec<KeptTask>>;
    /// Moves task `task_id` from held to forwarding; `false` when it was no
    /// longer held (only one caller ever wins).
    fn claim_forward<'a>(&'a self, task_id: &'a str, at: Timestamp) -> TaskFuture<'a, bool>;
    /// Ends task `task_id` with the server's `result` (JSON text).
    fn complete<'a>(
        &'a self,
        task_id: &'a str,
        result: &'a str,
        at: Timestamp,
    ) -> TaskFuture<'a, ()>;
    /// Ends task `task_id` with `error` (JSON text).
    fn fail<'a>(&'a self, task_id: &'a str, error: &'a str, at: Timestamp) -> TaskFuture<'a, ()>;
    /// Ends task `task_id` as cancelled.
    fn cancel<'a>(&'a self, task_id: &'a str, at: Timestamp) -> TaskFuture<'a, ()>;
    /// Fails, with `error`, every task of `server` left forwarding; their ids.
    fn fail_interrupted<'a>(
        &'a self,
        server: &'a str,
        error: &'a str,
        at: Timestamp,
    ) -> TaskFuture<'a, Vec<String>>;
    /// Forgets the tasks that expired before `before`.
    fn purge_expired(&self, before: Timestamp) -> TaskFuture<'_, ()>;
}

/// Where one gateway keeps its tasks.
pub(crate) struct Keeper {
    tasks: Arc<dyn TaskStore>,
    server: String,
}

impl Keeper {
    /// Writes task `id`'s end, in the background: the task has ended in
    /// memory already, and a restarted gateway only needs the end to
    /// answer `tasks/get`.
    pub(crate) fn ended(&self, id: &str, state: &State) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tasks, id) = (self.tasks.clone(), id.to_owned());
        let state = state.clone();
        runtime.spawn(async move {
            let at = Timestamp::now();
            let written = match &state {
                State::Completed(result) => tasks.complete(&id, &result.to_string(), at).await,
                State::Failed(error) => tasks.fail(&id, &error.to_string(), at).await,
                State::Cancelled => tasks.cancel(&id, at).await,
                _ => return,
            };
            if let Err(e) = written {
                tracing::warn!(task = %id, error = %e, "could not record the end of a task");
            }
        });
    }
}

/// A held task read back when its gateway started: run it again with
/// [`Gateway::run_deferred`].
#[derive(Debug, Clone)]
pub struct ResumedTask {
    /// The held call.
    pub call: DeferredCall,
    /// The MCP session it belongs to.
    pub session: Option<String>,
    /// What the transport kept with it (see [`Gateway::hold_task`]).
    pub context: Value,
}

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
        let _ = self.tasks.keeper.set(Keeper {
            tasks,
            server: self.server().to_owned(),
        });
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
        let Some(k) = self.tasks.keeper.get() else {
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
        let Some(k) = self.tasks.keeper.get() else {
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
        let Some(k) = self.tasks.keeper.get() else {
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
        let Some(k) = self.tasks.keeper.get() else {
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
