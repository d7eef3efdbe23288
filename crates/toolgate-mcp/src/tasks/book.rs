//! The tasks one server's gateway holds: where each stands, who may see
//! it, the bounds on how many wait, and what the server's answer makes of
//! it. The extension's wire shapes are the parent module's.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde_json::{Value, json};
use toolgate_policy::RunId;

use super::{
    MAX_OPEN_TASKS, MAX_OPEN_TASKS_PER_RUN, MAX_TASKS, POLL_INTERVAL, TASK_ID_PREFIX, TASK_TTL,
    TaskEvent, TaskObserver, URL_ELICITATION_REQUIRED,
};
use crate::message;

/// Told of every task that ends (its id and end state), once, as it ends:
/// how the gateway writes ends where tasks are kept (see [`crate::kept`]).
pub(crate) type EndHook = Box<dyn Fn(&str, &State) + Send + Sync>;

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
    /// Told of each end, once set.
    on_end: OnceLock<EndHook>,
}

impl Default for TaskBook {
    fn default() -> Self {
        Self {
            tasks: Mutex::default(),
            closed: tokio::sync::watch::Sender::new(false),
            observer: OnceLock::new(),
            on_end: OnceLock::new(),
        }
    }
}

impl TaskBook {
    /// Tells `observer` of every event from now on (once; later calls are
    /// ignored).
    pub(crate) fn observe(&self, observer: TaskObserver) {
        let _ = self.observer.set(observer);
    }

    /// Tells `hook` of every task that ends from now on (once; later calls
    /// are ignored).
    pub(crate) fn on_end(&self, hook: EndHook) {
        let _ = self.on_end.set(hook);
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

    /// How many tasks are kept, ended ones included.
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.lock().len()
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

    /// Ends task `id` with the server's answer (a result or an error).
    pub(crate) fn settle(&self, id: &str, answer: &Value) {
        self.end(id, answer_state(answer));
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
            if let Some(hook) = self.on_end.get() {
                hook(id, &state);
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
                    if let Some(hook) = self.on_end.get() {
                        hook(task_id, &State::Cancelled);
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

/// The error a task ends with for the server's `answer`, if it fails.
pub(crate) fn failure_of(answer: &Value) -> Option<Value> {
    match answer_state(answer) {
        State::Failed(error) => Some(error),
        _ => None,
    }
}

/// What the server's answer to a deferred call makes of its task. Only a
/// plain result completes it: there is no client to take a request for
/// input, or to follow a task of the server's own, and a request to open a
/// URL was never decided.
pub(super) fn answer_state(answer: &Value) -> State {
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
