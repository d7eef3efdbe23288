//! Escalated calls that do not block the client: the tasks extension of
//! protocol 2026-07-28 (`io.modelcontextprotocol/tasks`).
//!
//! A client that declares the extension on a `tools/call` (in
//! `_meta["io.modelcontextprotocol/clientCapabilities"]`) and whose call
//! escalates gets a task instead of a refusal. The gateway holds the task:
//! `tasks/get` reports it `working` while the approval is pending; the call
//! is forwarded once, through the same decision (and approval binding) as a
//! retried call, the moment the approval is granted; the task then
//! completes with the server's answer, or fails with the denial.
//!
//! - A task belongs to the run (and, over HTTP, the MCP session) that made
//!   it: asked from anywhere else it does not exist. Its id is random.
//! - Task ids the gateway made start with [`TASK_ID_PREFIX`]; `tasks/*`
//!   requests naming any other id are the server's and pass through.
//! - At most [`MAX_OPEN_TASKS`] wait at once per server and
//!   [`MAX_OPEN_TASKS_PER_RUN`] per run, and [`MAX_TASKS`] are kept in all
//!   (the oldest ended ones make room); past that, an escalation is refused
//!   as it is for clients without the extension.
//! - A task's answer is read strictly: a result that asks for input, is a
//!   task of the server's own, or is not an object, fails the task, and so
//!   does an error asking to open a URL (it was never decided).
//! - The deferred call reaches the server without the client's tasks
//!   capability, so the server answers it directly.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate_policy::RunId;

mod book;

pub(crate) use book::{Restored, State, TaskBook, failure_of};

/// The extension's identifier, in capabilities and request `_meta`.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The `_meta` member in which a 2026-07-28 request carries the client's
/// capabilities.
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
/// The server's notification of a task's status.
pub const STATUS_NOTIFICATION: &str = "notifications/tasks";
/// Prefix of the ids of tasks the gateway holds.
pub const TASK_ID_PREFIX: &str = "toolgate-task-";
/// How long a task is kept, waiting or done.
pub const TASK_TTL: Duration = Duration::from_secs(3600);
/// How often a client is asked to poll.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Most tasks that wait on an approval at once, per server.
pub const MAX_OPEN_TASKS: usize = 256;
/// Most tasks of one run that wait at once.
pub const MAX_OPEN_TASKS_PER_RUN: usize = 32;
/// Most tasks kept per server, ended ones included.
pub const MAX_TASKS: usize = 1024;
/// JSON-RPC error of an answer that asks the client to open a URL.
const URL_ELICITATION_REQUIRED: i64 = -32042;

/// What happens to the gateway's tasks, as counted
/// (`toolgate_mcp_tasks_total{outcome}` in the sidecar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEvent {
    /// An escalated call was held as a task.
    Created,
    /// An escalated call of a client that takes tasks was refused: too many
    /// tasks wait (of the server, or of the run).
    NoRoom,
    /// A task ended with the server's result.
    Completed,
    /// A task ended failed: denied, expired, changed, or the server's error.
    Failed,
    /// A task was cancelled by its client.
    Cancelled,
}

impl TaskEvent {
    /// Every event, for series created at 0.
    pub const ALL: [TaskEvent; 5] = [
        Self::Created,
        Self::NoRoom,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::NoRoom => "no_room",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Told of every [`TaskEvent`] of one gateway.
pub type TaskObserver = Arc<dyn Fn(TaskEvent) + Send + Sync>;

/// Whether a client message (a `tools/call`) declares the extension.
pub fn client_declares_tasks(message: &Value) -> bool {
    message
        .pointer("/params/_meta")
        .and_then(|m| m.get(CLIENT_CAPABILITIES_META))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(EXTENSION))
        .is_some_and(Value::is_object)
}

/// Removes the client's declaration of the extension from a request, so
/// the server answers a deferred call directly.
pub fn strip_declaration(message: &mut Value) {
    if let Some(Value::Object(extensions)) = message
        .pointer_mut("/params/_meta")
        .and_then(|m| m.get_mut(CLIENT_CAPABILITIES_META))
        .and_then(|c| c.get_mut("extensions"))
    {
        extensions.remove(EXTENSION);
    }
}

/// Adds the extension to a `server/discover` result's capabilities: the
/// gateway serves it, whatever the server does.
pub(crate) fn advertise(answer: &mut Value) {
    let Some(Value::Object(capabilities)) = answer.pointer_mut("/result/capabilities") else {
        return;
    };
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(extensions) = extensions {
        extensions.insert(EXTENSION.to_owned(), json!({}));
    }
}

/// The task-naming requests the gateway answers itself: `(method, task id)`
/// when `message` is a `tasks/*` request naming one of its tasks.
pub(crate) fn own_task_request(message: &Value) -> Option<(&str, &str)> {
    message.get("id")?;
    let method = message.get("method")?.as_str()?;
    if !method.starts_with("tasks/") {
        return None;
    }
    let task = message.pointer("/params/taskId")?.as_str()?;
    task.starts_with(TASK_ID_PREFIX).then_some((method, task))
}

/// A `tools/call` deferred under a task until its approval is decided.
#[derive(Debug, Clone, PartialEq)]
pub struct DeferredCall {
    pub(crate) task: String,
    /// The MCP tool name, whose definition is read again before sending.
    pub(crate) name: String,
    /// The client's request as it came, its own id included.
    pub(crate) message: Value,
    pub(crate) tool: String,
    pub(crate) arguments: Map<String, Value>,
    pub(crate) run_id: RunId,
    pub(crate) definition_digest: Option<String>,
    pub(crate) approval: String,
}

impl DeferredCall {
    /// The id of the task it runs under.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// The client's request as it came.
    pub fn message(&self) -> &Value {
        &self.message
    }

    /// The run that made it.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }
}

#[cfg(test)]
mod tests;
