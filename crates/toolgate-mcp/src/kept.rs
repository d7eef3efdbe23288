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
//!   and server ([`Gateway::resume_tasks`](crate::gateway::Gateway::resume_tasks)): they wait for their approval
//!   again and are decided again when it comes, as before the restart.
//! - One sidecar serves a tenant's server at a time: a task left
//!   `forwarding` by another live sidecar of the same tenant and server
//!   would be failed by this one's start.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;

use crate::tasks::{DeferredCall, State};

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
/// ([`Gateway::keep_tasks`](crate::gateway::Gateway::keep_tasks)). Every operation is the tenant's own.
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

/// Where one gateway keeps its tasks: the store and the server's name.
#[derive(Clone)]
pub(crate) struct Keeper {
    pub(crate) tasks: Arc<dyn TaskStore>,
    pub(crate) server: String,
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
/// [`Gateway::run_deferred`](crate::gateway::Gateway::run_deferred).
#[derive(Debug, Clone)]
pub struct ResumedTask {
    /// The held call.
    pub call: DeferredCall,
    /// The MCP session it belongs to.
    pub session: Option<String>,
    /// What the transport kept with it (see [`Gateway::hold_task`](crate::gateway::Gateway::hold_task)).
    pub context: Value,
}
