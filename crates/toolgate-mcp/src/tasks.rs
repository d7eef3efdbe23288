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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use toolgate_policy::RunId;

use crate::message;

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

/// Where a task stands.
#[derive(Debug, Clone)]
pub(crate) enum State {
    /// The approval is pending.
    Waiting {
        approval: String,
    },
    /// The approval was decided; the call is being decided again.
    Deciding,
    /// Approved and decided again; the call went to the server.
    Forwarded,
    /// The server's result.
    Completed(Value),
    /// A JSON-RPC error object: the denial, or the server's error.
    Failed(Value),
    Cancelled,
}

impl State {
    fn is_terminal(&self) -> bool {
        matches!(self, Self::Completed(_) | Self::Failed(_) | Self::Cancelled)
    }
}

#[derive(Debug)]
struct Task {
    run_id: RunId,
    session: Option<String>,
    created_at: String,
    updated_at: String,
    deadline: Instant,
    state: State,
}

impl Task {
    fn belongs_to(&self, run_id: &RunId, session: Option<&str>) -> bool {
        &self.run_id == run_id && self.session.as_deref() == session
    }

    /// The task as the extension spells it (`Task`, with its result or
    /// error when it has ended).
    fn view(&self, id: &str) -> Value {
        let (status, message) = match &self.state {
            State::Waiting { approval } => (
                "working",
                format!(
                    "waiting for approval {approval}: a human approves or denies it (kubectl \
                     toolgate approve, or the console); the call is made once it is approved"
                ),
            ),
            State::Deciding => (
                "working",
                "the approval was decided; the call is being decided again".to_owned(),
            ),
            State::Forwarded => (
                "working",
                "approved; the call was sent to the server".to_owned(),
            ),
            State::Completed(_) => ("completed", "the server answered".to_owned()),
            State::Failed(_) => ("failed", "the call was not completed".to_owned()),
            State::Cancelled => ("cancelled", "cancelled by the client".to_owned()),
        };
        let mut task = json!({
            "taskId": id,
            "status": status,
            "statusMessage": message,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttlMs": TASK_TTL.as_millis() as u64,
            "pollIntervalMs": POLL_INTERVAL.as_millis() as u64,
        });
        match &self.state {
            State::Completed(result) => task["result"] = result.clone(),
            State::Failed(error) => task["error"] = error.clone(),
            _ => {}
        }
        task
    }
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// A task read back from where it was kept.
pub(crate) struct Restored {
    pub(crate) run_id: RunId,
    pub(crate) session: Option<String>,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    pub(crate) deadline: Instant,
    pub(crate) state: State,
}

/// The tasks one server's gateway holds.
pub(crate) struct TaskBook {
    tasks: Mutex<HashMap<String, Task>>,
    /// Set when the gateway shuts down: held calls stop waiting.
    closed: tokio::sync::watch::Sender<bool>,
    observer: OnceLock<TaskObserver>,
    /// Where tasks are kept across restarts, once set (see [`crate::kept`]).
    pub(crate) keeper: OnceLock<crate::kept::Keeper>,
}

impl Default for TaskBook {
    fn default() -> Self {
        Self {
            tasks: Mutex::default(),
            closed: tokio::sync::watch::Sender::new(false),
            observer: OnceLock::new(),
            keeper: OnceLock::new(),
        }
    }
}

impl TaskBook {
    /// Tells `observer` of every event from now on (once; later calls are
    /// ignored).
    pub(crate) fn observe(&self, observer: TaskObserver) {
        let _ = self.observer.set(observer);
    }

    fn emit(&self, event: TaskEvent, times: usize) {
        if let Some(observer) = self.observer.get() {
            for _ in 0..times {
                observer(event);
            }
        }
    }

    fn swept(&self, tasks: &mut HashMap<String, Task>) {
        let expired = sweep(tasks);
        self.emit(TaskEvent::Failed, expired);
    }

    /// Fails every task not yet ended and releases every held call: the
    /// gateway is shutting down, and no approval will be waited on.
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
        let mut tasks = self.lock();
        let mut failed = 0;
        for t in tasks.values_mut() {
            let why = match t.state {
                State::Forwarded => {
                    "toolgate: the gateway shut down before the server answered; whether the \
                     call took effect is unknown"
                }
                _ if t.state.is_terminal() => continue,
                _ => "toolgate: the gateway shut down before the call was made",
            };
            t.state = State::Failed(message::error_object(message::INTERNAL_ERROR, why));
            t.updated_at = now();
            failed += 1;
        }
        self.emit(TaskEvent::Failed, failed);
    }

    /// Resolves once the gateway shuts down.
    pub(crate) async fn closing(&self) {
        let mut closed = self.closed.subscribe();
        let _ = closed.wait_for(|c| *c).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Task>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new task of `run_id` waiting on `approval`: its id and its
    /// creation result. `None` when [`MAX_OPEN_TASKS`] already wait.
    pub(crate) fn open(
        &self,
        run_id: &RunId,
        session: Option<&str>,
        approval: &str,
    ) -> Option<(String, Value)> {
        if *self.closed.borrow() {
            return None;
        }
        let mut tasks = self.lock();
        self.swept(&mut tasks);
        let open = tasks.values().filter(|t| !t.state.is_terminal());
        let (all, of_run) = open.fold((0, 0), |(all, of_run), t| {
            (all + 1, of_run + usize::from(&t.run_id == run_id))
        });
        if all >= MAX_OPEN_TASKS || of_run >= MAX_OPEN_TASKS_PER_RUN {
            self.emit(TaskEvent::NoRoom, 1);
            return None;
        }
        if tasks.len() >= MAX_TASKS {
            // Room is made from the ended tasks, oldest first.
            let mut ended: Vec<(Instant, String)> = tasks
                .iter()
                .filter(|(_, t)| t.state.is_terminal())
                .map(|(id, t)| (t.deadline, id.clone()))
                .collect();
            ended.sort();
            for (_, id) in ended.into_iter().take(tasks.len() + 1 - MAX_TASKS) {
                tasks.remove(&id);
            }
        }
        let id = format!("{TASK_ID_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let at = now();
        let task = Task {
            run_id: run_id.clone(),
            session: session.map(str::to_owned),
            created_at: at.clone(),
            updated_at: at,
            deadline: Instant::now() + TASK_TTL,
            state: State::Waiting {
                approval: approval.to_owned(),
            },
        };
        let mut created = task.view(&id);
        created["resultType"] = json!("task");
        tasks.insert(id.clone(), task);
        self.emit(TaskEvent::Created, 1);
        Some((id, created))
    }

    /// Whether task `id` still waits on its approval (neither cancelled nor
    /// expired).
    pub(crate) fn is_waiting(&self, id: &str) -> bool {
        let mut tasks = self.lock();
        self.swept(&mut tasks);
        tasks
            .get(id)
            .is_some_and(|t| matches!(t.state, State::Waiting { .. }))
    }

    /// Moves a waiting task on to `Deciding`; `false` when it no longer
    /// waits (a cancellation won, it expired, the gateway is closing).
    pub(crate) fn begin_deciding(&self, id: &str) -> bool {
        self.advance(id, |s| matches!(s, State::Waiting { .. }), State::Deciding)
    }

    /// Moves a task being decided on to `Forwarded`, just before its call
    /// is sent; `false` when that must not happen any more (closing,
    /// expired).
    pub(crate) fn mark_sent(&self, id: &str) -> bool {
        self.advance(id, |s| matches!(s, State::Deciding), State::Forwarded)
    }

    fn advance(&self, id: &str, from: impl Fn(&State) -> bool, to: State) -> bool {
        if *self.closed.borrow() {
            return false;
        }
        let mut tasks = self.lock();
        self.swept(&mut tasks);
        match tasks.get_mut(id) {
            Some(t) if from(&t.state) => {
                t.state = to;
                t.updated_at = now();
                true
            }
            _ => false,
        }
    }

    /// Ends task `id` with the server's answer (a result or an error);
    /// returns the error it failed with, if it did.
    pub(crate) fn settle(&self, id: &str, answer: &Value) -> Option<Value> {
        let state = answer_state(answer);
        let failed = match &state {
            State::Failed(e) => Some(e.clone()),
            _ => None,
        };
        self.end(id, state);
        failed
    }

    /// Ends task `id` as failed with `error` (a JSON-RPC error object).
    pub(crate) fn fail(&self, id: &str, error: Value) {
        self.end(id, State::Failed(error));
    }

    fn end(&self, id: &str, state: State) {
        let event = match state {
            State::Completed(_) => TaskEvent::Completed,
            State::Cancelled => TaskEvent::Cancelled,
            _ => TaskEvent::Failed,
        };
        if let Some(t) = self.lock().get_mut(id)
            && !t.state.is_terminal()
        {
            if let Some(keeper) = self.keeper.get() {
                keeper.ended(id, &state);
            }
            t.state = state;
            t.updated_at = now();
            self.emit(event, 1);
        }
    }

    /// Whether task `id` is in memory.
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Puts back task `id`, read from where it was kept (a restarted
    /// gateway's, or one it is asked about); a task in memory stays as it is.
    pub(crate) fn restore(&self, id: &str, restored: Restored) {
        let mut tasks = self.lock();
        if tasks.contains_key(id) {
            return;
        }
        let task = Task {
            run_id: restored.run_id,
            session: restored.session,
            created_at: restored.created_at,
            updated_at: restored.updated_at,
            deadline: restored.deadline,
            state: restored.state,
        };
        tasks.insert(id.to_owned(), task);
    }

    /// Answers a `tasks/*` request (`method`) naming one of the gateway's
    /// tasks, for `run_id` / `session`; `id` is the request's id.
    pub(crate) fn answer(
        &self,
        id: &Value,
        method: &str,
        task_id: &str,
        run_id: &RunId,
        session: Option<&str>,
    ) -> Value {
        let mut tasks = self.lock();
        self.swept(&mut tasks);
        let Some(task) = tasks
            .get_mut(task_id)
            .filter(|t| t.belongs_to(run_id, session))
        else {
            return message::error(
                id,
                message::INVALID_PARAMS,
                &format!("toolgate: no task {task_id} of this run"),
            );
        };
        let mut result = match method {
            "tasks/get" => task.view(task_id),
            "tasks/cancel" => match task.state {
                State::Waiting { .. } => {
                    if let Some(keeper) = self.keeper.get() {
                        keeper.ended(task_id, &State::Cancelled);
                    }
                    task.state = State::Cancelled;
                    task.updated_at = now();
                    self.emit(TaskEvent::Cancelled, 1);
                    json!({})
                }
                _ => {
                    return message::error(
                        id,
                        message::INVALID_PARAMS,
                        &format!(
                            "toolgate: task {task_id} can no longer be cancelled: its call was \
                             already sent to the server, or it has ended"
                        ),
                    );
                }
            },
            "tasks/update" => {
                return message::error(
                    id,
                    message::INVALID_PARAMS,
                    &format!(
                        "toolgate: task {task_id} takes no input: it waits on a human's \
                         approval, given in Kubernetes"
                    ),
                );
            }
            other => {
                return message::error(
                    id,
                    message::METHOD_NOT_FOUND,
                    &format!("toolgate: {other} is not a method of the tasks extension"),
                );
            }
        };
        result["resultType"] = json!("complete");
        json!({"jsonrpc": "2.0", "id": id, "result": result})
    }
}

/// What the server's answer to a deferred call makes of its task. Only a
/// plain result completes it: there is no client to take a request for
/// input, or to follow a task of the server's own, and a request to open a
/// URL was never decided.
fn answer_state(answer: &Value) -> State {
    let unusable = |why: &str| State::Failed(message::error_object(message::INTERNAL_ERROR, why));
    match (answer.get("result"), answer.get("error")) {
        (Some(Value::Object(result)), _) => {
            let kind = result.get("resultType").and_then(Value::as_str);
            if !matches!(kind, None | Some("complete")) || result.contains_key("inputRequests") {
                return unusable(
                    "toolgate: the server answered the approved call with something other than \
                     its result (a request for input, or a task of its own); the gateway made \
                     the call on the client's behalf and has no one to pass that to",
                );
            }
            // A 2026-07-28 client rejects a task result without it.
            let mut result = result.clone();
            result.insert("resultType".into(), json!("complete"));
            State::Completed(Value::Object(result))
        }
        (Some(_), _) => unusable("toolgate: the server's result is not an object"),
        (None, Some(error)) => match (
            error.get("code").and_then(Value::as_i64),
            error.get("message").and_then(Value::as_str),
        ) {
            (Some(URL_ELICITATION_REQUIRED), _) => unusable(
                "toolgate: the server asked for a URL to be opened during the approved call; \
                 that request was not passed on",
            ),
            (Some(code), Some(text)) => {
                let mut e = message::error_object(code, text);
                if let Some(data) = error.get("data") {
                    e["data"] = data.clone();
                }
                State::Failed(e)
            }
            _ => unusable("toolgate: the server's error is not a JSON-RPC error object"),
        },
        (None, None) => {
            unusable("toolgate: the server's answer held neither a result nor an error")
        }
    }
}

/// Drops tasks past their time; one still waiting or forwarded then fails
/// first, so a client polling at the edge reads why. Returns how many
/// failed so.
fn sweep(tasks: &mut HashMap<String, Task>) -> usize {
    let now_instant = Instant::now();
    let mut expired = 0;
    tasks.retain(|_, t| {
        let keep = now_instant < t.deadline + TASK_TTL / 4;
        expired += usize::from(!keep && !t.state.is_terminal());
        keep
    });
    for t in tasks.values_mut() {
        if now_instant >= t.deadline && !t.state.is_terminal() {
            t.state = State::Failed(message::error_object(
                message::INTERNAL_ERROR,
                "toolgate: the task expired before its call completed",
            ));
            t.updated_at = now();
            expired += 1;
        }
    }
    expired
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
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::parse("run-tasks").unwrap()
    }

    #[test]
    fn a_declaration_is_read_only_where_the_extension_puts_it() {
        let declared = json!({"params": {"_meta": {CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: {}}}}}});
        assert!(client_declares_tasks(&declared));
        for other in [
            json!({"params": {"_meta": {"extensions": {EXTENSION: {}}}}}),
            json!({"params": {"_meta": {CLIENT_CAPABILITIES_META: {"extensions": {EXTENSION: true}}}}}),
            json!({"params": {"task": {"ttl": 1000}}}),
        ] {
            assert!(!client_declares_tasks(&other), "{other}");
        }
        let mut stripped = declared.clone();
        strip_declaration(&mut stripped);
        assert!(!client_declares_tasks(&stripped));
    }

    #[test]
    fn a_task_is_seen_only_by_its_run_and_session_and_cancelled_only_while_waiting() {
        let book = TaskBook::default();
        let (task, created) = book.open(&run(), Some("s1"), "appr-1").unwrap();
        assert_eq!(created["resultType"], "task");
        assert_eq!(created["status"], "working");
        let id = json!(7);
        let other_run = RunId::parse("run-other").unwrap();
        for (run_id, session) in [
            (&other_run, Some("s1")),
            (&run(), Some("s2")),
            (&run(), None),
        ] {
            let answer = book.answer(&id, "tasks/get", &task, run_id, session);
            assert_eq!(answer["error"]["code"], message::INVALID_PARAMS, "{answer}");
        }
        let seen = book.answer(&id, "tasks/get", &task, &run(), Some("s1"));
        assert_eq!(seen["result"]["status"], "working");
        assert!(
            seen["result"]["statusMessage"]
                .as_str()
                .unwrap()
                .contains("appr-1")
        );
        assert!(book.begin_deciding(&task));
        assert!(book.mark_sent(&task));
        let late = book.answer(&id, "tasks/cancel", &task, &run(), Some("s1"));
        assert!(late.get("error").is_some(), "{late}");
        book.settle(&task, &json!({"result": {"content": []}}));
        let done = book.answer(&id, "tasks/get", &task, &run(), Some("s1"));
        assert_eq!(done["result"]["status"], "completed");
        assert_eq!(
            done["result"]["result"],
            json!({"content": [], "resultType": "complete"}),
            "a 2026-07-28 result is always marked complete"
        );

        let (second, _) = book.open(&run(), None, "appr-2").unwrap();
        let cancelled = book.answer(&id, "tasks/cancel", &second, &run(), None);
        assert_eq!(cancelled["result"]["resultType"], "complete");
        assert!(!book.is_waiting(&second));
        assert!(
            !book.begin_deciding(&second),
            "a cancelled task is never forwarded"
        );
    }

    #[test]
    fn tasks_are_bounded_per_run_per_server_and_in_all() {
        let book = TaskBook::default();
        for i in 0..MAX_OPEN_TASKS_PER_RUN {
            assert!(book.open(&run(), None, &format!("a{i}")).is_some());
        }
        assert!(book.open(&run(), None, "one-too-many").is_none());
        let runs: Vec<RunId> = (0..MAX_OPEN_TASKS)
            .map(|i| RunId::parse(&format!("run-{i}")).unwrap())
            .collect();
        let opened = runs
            .iter()
            .filter(|r| book.open(r, None, "b").is_some())
            .count();
        assert_eq!(opened, MAX_OPEN_TASKS - MAX_OPEN_TASKS_PER_RUN);

        // Opened and cancelled in a loop: ended tasks make room, the book
        // never holds more than its bound.
        let book = TaskBook::default();
        let id = json!(1);
        for i in 0..(MAX_TASKS * 2) {
            let (task, _) = book
                .open(&run(), None, "c")
                .unwrap_or_else(|| panic!("open {i}"));
            book.answer(&id, "tasks/cancel", &task, &run(), None);
        }
        assert!(book.lock().len() <= MAX_TASKS);

        book.close();
        assert!(book.open(&run(), None, "after-close").is_none());
    }

    #[test]
    fn every_end_of_a_task_is_counted_once() {
        let counted = Arc::new(Mutex::new(Vec::new()));
        let book = TaskBook::default();
        let seen = counted.clone();
        book.observe(Arc::new(move |e| seen.lock().unwrap().push(e)));
        let id = json!(1);
        let (done, _) = book.open(&run(), None, "a").unwrap();
        let (cancelled, _) = book.open(&run(), None, "b").unwrap();
        let (_, _) = book.open(&run(), None, "c").unwrap();
        book.settle(&done, &json!({"result": {"content": []}}));
        book.settle(&done, &json!({"error": {"code": 1, "message": "late"}}));
        book.answer(&id, "tasks/cancel", &cancelled, &run(), None);
        book.close();
        use TaskEvent::*;
        assert_eq!(
            *counted.lock().unwrap(),
            [Created, Created, Created, Completed, Cancelled, Failed]
        );
    }

    #[test]
    fn only_a_plain_result_completes_a_task() {
        for (answer, completes) in [
            (json!({"result": {"content": []}}), true),
            (
                json!({"result": {"resultType": "complete", "content": []}}),
                true,
            ),
            (
                json!({"result": {"resultType": "input_required", "inputRequests": {}}}),
                false,
            ),
            (
                json!({"result": {"content": [], "inputRequests": {"a": {}}}}),
                false,
            ),
            (
                json!({"result": {"resultType": "task", "taskId": "x"}}),
                false,
            ),
            (json!({"result": "text"}), false),
            (
                json!({"error": {"code": -32042, "message": "open", "data": {"url": "https://x"}}}),
                false,
            ),
            (json!({"error": {"code": "bad"}}), false),
            (json!({"error": {"code": -32000, "message": "boom"}}), false),
        ] {
            let state = answer_state(&answer);
            assert_eq!(matches!(state, State::Completed(_)), completes, "{answer}");
            if let State::Failed(e) = state {
                assert!(e["code"].is_i64() && e["message"].is_string(), "{e}");
                assert!(
                    e.get("data").is_none() || answer["error"]["code"] != -32042,
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn only_the_gateways_task_ids_are_answered_here() {
        let ours = json!({"id": 1, "method": "tasks/get", "params": {"taskId": format!("{TASK_ID_PREFIX}x")}});
        assert!(own_task_request(&ours).is_some());
        let theirs = json!({"id": 1, "method": "tasks/get", "params": {"taskId": "server-task"}});
        assert!(own_task_request(&theirs).is_none());
        let notification =
            json!({"method": "tasks/get", "params": {"taskId": format!("{TASK_ID_PREFIX}x")}});
        assert!(own_task_request(&notification).is_none());
    }
}
