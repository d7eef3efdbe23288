//! Every message between the client and the server, judged in one place for
//! both transports (`toolgate mcp wrap` and the sidecar's `/mcp/NAME`).
//!
//! - **Ids are the gateway's.** Each request of the client is forwarded
//!   under an id the gateway made (`toolgate-` and a random UUID) and answered under the
//!   client's own id again. An answer is matched by that exact string, so
//!   no spelling of an id (`1` against `1.0`, say) can pass an answer
//!   around the gateway, and an answer to no request the gateway forwarded
//!   (a forged one, guessing the client's id) is dropped.
//! - **What cannot be read is not passed on.** A message the gateway cannot
//!   parse (`1e400`, a truncated object, more than [`MAX_MESSAGE_BYTES`])
//!   never reaches the client; if it was the answer to a request, the client
//!   gets a JSON-RPC error for that request instead, and an unreadable
//!   `tools/list` answer makes the gateway forget the tools it knew.
//! - **Server requests are decided.** A request the server sends the client
//!   (`sampling/createMessage`, `elicitation/create`, `roots/list`, …) other
//!   than `ping` is decided as the tool `SERVER.METHOD`; refused, the server
//!   gets the error and the client never sees it.

use std::sync::atomic::Ordering;

use serde::Deserialize;
use serde_json::{Map, Value};

use toolgate_policy::{Reason, RunId};

use crate::edges::EdgeRefusal;
use crate::gateway::{CallOutcome, Decider, Gateway};
use crate::in_flight::Awaiting;
use crate::message::{self, FromClient};
use crate::protocol;
use crate::tasks::{self, DeferredCall};

/// Largest message the gateway reads (parses) from either side, in bytes.
/// A larger answer to a request is replaced by a JSON-RPC error.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// JSON-RPC error code of an answer that asks the client to open a URL
/// (protocol 2025-11-25's URL elicitation).
const URL_ELICITATION_REQUIRED: i64 = -32042;

/// Where a message of the client travels.
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// The run its decisions are recorded under.
    pub run_id: &'a RunId,
    /// The MCP session it belongs to (HTTP: `Mcp-Session-Id`), so one
    /// session's cancellation never names another session's request.
    pub session: Option<&'a str>,
    /// The client speaks protocol 2026-07-28.
    pub modern: bool,
}

/// Which answers a stream of the server may carry.
#[derive(Debug, Clone, Copy)]
pub enum Answers<'a> {
    /// Answers to any request forwarded on this connection (stdio).
    Any,
    /// Only the answer to this one request (the stream of an HTTP POST):
    /// the client takes any answer on it as the answer to its request.
    Only(&'a str),
    /// None (an HTTP GET stream).
    None,
}

/// What the gateway does with one message of the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientStep {
    /// Answer the client with this; the server never sees the message.
    Answer(Value),
    /// Neither answered nor forwarded (a cancellation of no request the
    /// gateway forwarded in this session).
    Nothing,
    /// Send `message` to the server. A request carries the gateway's own
    /// id, `request`, under which its answer is awaited.
    Forward {
        /// The message as the server gets it.
        message: Value,
        /// The gateway's id of a forwarded request.
        request: Option<String>,
    },
    /// Answer the client with `answer` (a task) now, and run `call` apart:
    /// [`Gateway::run_deferred`] waits on its approval and gives the
    /// message to send the server, if it is to be sent.
    Defer {
        /// The task's creation result.
        answer: Value,
        /// The held call.
        call: DeferredCall,
    },
}

/// What the gateway does with one message of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerStep {
    /// Pass this on to the client.
    ToClient(Value),
    /// Answer the server with this (a refused server request).
    ToServer(Value),
    /// Nothing reaches the client; why, for the log.
    Drop(&'static str),
    /// The answer to a deferred call: kept for its task, which the client
    /// reads with `tasks/get`.
    Kept,
}

/// The part of a message read when the whole of it cannot be: to whom an
/// unreadable answer was addressed. Other members are skipped unparsed.
#[derive(Deserialize)]
struct Head {
    id: Option<Value>,
}

impl<D: Decider> Gateway<D> {
    /// Whether the server answered `server/discover` (stdio: the client
    /// then gets protocol 2026-07-28 refusals).
    pub fn server_is_modern(&self) -> bool {
        self.modern_server.load(Ordering::Relaxed)
    }

    /// Decides one message of the client (a JSON object) on `route`.
    pub async fn from_client(&self, mut message: Value, route: Route<'_>) -> ClientStep {
        let Route { run_id, modern, .. } = route;
        if let Some((method, task)) = tasks::own_task_request(&message) {
            self.load_kept(task).await;
            return ClientStep::Answer(self.tasks.answer(
                &message["id"],
                method,
                task,
                run_id,
                route.session,
            ));
        }
        // The protocol's methods with their own parameters only; any other
        // method is a tool the profile must declare.
        if let protocol::Admission::Unknown(method) = protocol::admit(&mut message) {
            let id = message.get("id").cloned();
            let args = protocol::decided_params(&message);
            let refusal = self
                .decide_request(id.as_ref().unwrap_or(&Value::Null), &method, &args, run_id)
                .await;
            match (refusal, id) {
                (Some(refusal), Some(_)) => return ClientStep::Answer(refusal),
                (Some(_), None) => return ClientStep::Nothing,
                (None, _) => {}
            }
        }
        if let Some(cursor) = message.pointer("/params/cursor") {
            let known = cursor
                .as_str()
                .is_some_and(|c| self.cursors.knows(run_id, route.session, c));
            if !known {
                let id = message.get("id").cloned().unwrap_or(Value::Null);
                let tool = self.method_tool(message.get("method").and_then(Value::as_str));
                let refused = EdgeRefusal::new(&tool, run_id, Reason::RequestMalformed);
                self.record_refusal(refused).await;
                return ClientStep::Answer(message::error(
                    &id,
                    message::INVALID_PARAMS,
                    "toolgate: params.cursor is not one this server returned in this session",
                ));
            }
        }
        // Any other message is a channel to the server too: the run's flow
        // rules see its text.
        if let Some(text) = self.screen(&message, run_id).await {
            return match message.get("id") {
                Some(id) if message.get("method").is_some() => {
                    ClientStep::Answer(message::policy_error(id, &text, None))
                }
                _ => ClientStep::Nothing,
            };
        }
        let deferrable = modern && tasks::client_declares_tasks(&message);
        let awaiting = match message::classify(&message) {
            FromClient::CallTool {
                id,
                name,
                arguments,
            } => match self
                .decide_call(&id, &name, &arguments, run_id, modern, deferrable)
                .await
            {
                CallOutcome::Respond(answer) => return ClientStep::Answer(answer),
                CallOutcome::Forward { intent } => {
                    if intent.is_some() {
                        // The intent closes from this answer: the server
                        // answers it, rather than starting a task of its own.
                        tasks::strip_declaration(&mut message);
                    }
                    Awaiting::Call { intent }
                }
                CallOutcome::Defer {
                    approval,
                    definition_digest,
                    refusal,
                } => {
                    let Some((task, created)) = self.tasks.open(run_id, route.session, &approval)
                    else {
                        return ClientStep::Answer(refusal);
                    };
                    let mut created = created;
                    if let Some(meta) = refusal.pointer("/result/_meta") {
                        created["_meta"] = meta.clone();
                    }
                    return ClientStep::Defer {
                        answer: serde_json::json!({"jsonrpc": "2.0", "id": id, "result": created}),
                        call: DeferredCall {
                            task,
                            name: name.clone(),
                            message,
                            tool: message::policy_tool(self.server(), &name),
                            arguments,
                            run_id: run_id.clone(),
                            definition_digest: Some(definition_digest),
                            approval,
                        },
                    };
                }
            },
            FromClient::BadRequest { id, reason } => {
                let tool = self.method_tool(message.get("method").and_then(Value::as_str));
                let refused = EdgeRefusal::new(&tool, run_id, Reason::RequestMalformed);
                self.record_refusal(refused).await;
                return ClientStep::Answer(message::error(&id, message::INVALID_PARAMS, &reason));
            }
            FromClient::ListTools { .. } => Awaiting::List {
                first_page: message.pointer("/params/cursor").is_none(),
            },
            FromClient::Governed {
                id,
                method,
                arguments,
                canonical,
            } => match self.decide_request(&id, method, &arguments, run_id).await {
                Some(refusal) => return ClientStep::Answer(refusal),
                None => {
                    // The server reads what the policy decided on.
                    if let (Some((key, value)), Some(params)) = (
                        canonical,
                        message.get_mut("params").and_then(Value::as_object_mut),
                    ) {
                        params.insert(key.into(), value);
                    }
                    Awaiting::Plain
                }
            },
            FromClient::OtherRequest { .. } => {
                if message.get("method").and_then(Value::as_str) == Some("server/discover") {
                    Awaiting::Discover
                } else {
                    Awaiting::Plain
                }
            }
            FromClient::Other => {
                if !self.rewrite_cancellation(&mut message, route) {
                    return ClientStep::Nothing;
                }
                return ClientStep::Forward {
                    message,
                    request: None,
                };
            }
        };
        let ours = self
            .in_flight
            .forward(&mut message, awaiting, run_id, route.session);
        ClientStep::Forward {
            message,
            request: Some(ours),
        }
    }

    /// A cancellation names the request by the id the server knows: the
    /// request of this run and session the client named. `false` when it
    /// names none (not forwarded: it could only be about another run's or
    /// session's request, or a deferred call, which no client's id names).
    fn rewrite_cancellation(&self, message: &mut Value, route: Route<'_>) -> bool {
        if message.get("method").and_then(Value::as_str) != Some("notifications/cancelled") {
            return true;
        }
        let Some(named) = message.pointer("/params/requestId") else {
            return false;
        };
        match self.in_flight.named_by(named, route.run_id, route.session) {
            Some(ours) => {
                message["params"]["requestId"] = Value::String(ours);
                true
            }
            None => false,
        }
    }

    /// Gives up on the answer to the forwarded request `ours` (its stream
    /// ended, the upstream failed); returns the client's id for it, to
    /// answer with an error, or `None` when it was already answered.
    pub fn abandon(&self, ours: &str) -> Option<Value> {
        let f = self.in_flight.take(ours)?;
        match f.awaiting {
            Awaiting::List { .. } => self.forget_definitions(),
            Awaiting::Task { task, .. } => {
                // No client waits on this request: its task reads why.
                self.tasks.fail(
                    &task,
                    message::error_object(
                        message::INTERNAL_ERROR,
                        "toolgate: the server's answer to the approved call was not received; \
                         whether it took effect is unknown",
                    ),
                );
                return None;
            }
            _ => {}
        }
        Some(f.original)
    }

    /// Judges one message of the server (`raw`, its JSON text) on a stream
    /// of run `run_id` that may carry `answers`.
    pub async fn from_server(
        &self,
        raw: &[u8],
        run_id: &RunId,
        answers: Answers<'_>,
    ) -> ServerStep {
        let message = match (raw.len() <= MAX_MESSAGE_BYTES)
            .then(|| serde_json::from_slice::<Value>(raw))
        {
            Some(Ok(m @ Value::Object(_))) => m,
            Some(Err(e)) => return self.unreadable(raw, &e.to_string(), answers),
            Some(Ok(_)) => return self.unreadable(raw, "not a single JSON-RPC object", answers),
            None => {
                let why = format!("larger than {MAX_MESSAGE_BYTES} bytes");
                return self.unreadable(raw, &why, answers);
            }
        };
        let method = message.get("method").and_then(Value::as_str);
        match (method, message.get("id")) {
            (Some(method), Some(id)) => {
                if message::UNGOVERNED_SERVER_REQUESTS.contains(&method) {
                    return ServerStep::ToClient(message);
                }
                match self.decide_request(id, method, &Map::new(), run_id).await {
                    Some(refusal) => ServerStep::ToServer(refusal),
                    None => ServerStep::ToClient(message),
                }
            }
            (Some(method), None) if method == tasks::STATUS_NOTIFICATION => {
                self.task_notification(message, run_id).await
            }
            (Some(_), None) => ServerStep::ToClient(message),
            (None, Some(id))
                if message.get("result").is_some() || message.get("error").is_some() =>
            {
                let id = id.clone();
                self.answer(message, &id, run_id, answers).await
            }
            _ => ServerStep::Drop("neither a request, a notification nor an answer"),
        }
    }

    /// A task status notification of the server: dropped when it names one
    /// of the gateway's own tasks (only the gateway speaks for those), or
    /// embeds a request for input the policy does not let through.
    async fn task_notification(&self, message: Value, run_id: &RunId) -> ServerStep {
        let named = message.pointer("/params/taskId").and_then(Value::as_str);
        if named.is_none_or(|t| t.starts_with(tasks::TASK_ID_PREFIX)) {
            return ServerStep::Drop(
                "a task notification naming none or one of the gateway's tasks",
            );
        }
        if let Some(embedded) = message.pointer("/params/inputRequests") {
            let Value::Object(requests) = embedded else {
                return ServerStep::Drop(
                    "a task notification whose inputRequests are not an object",
                );
            };
            for request in requests.values() {
                let Some(method) = request.get("method").and_then(Value::as_str) else {
                    return ServerStep::Drop(
                        "a task notification embedding a request without a method",
                    );
                };
                if message::UNGOVERNED_SERVER_REQUESTS.contains(&method) {
                    continue;
                }
                if self
                    .decide_request(&Value::Null, method, &Map::new(), run_id)
                    .await
                    .is_some()
                {
                    return ServerStep::Drop("a task notification embedding a refused request");
                }
            }
        }
        ServerStep::ToClient(message)
    }

    /// The answer `message` to the request the gateway forwarded as `id`.
    async fn answer(
        &self,
        mut message: Value,
        id: &Value,
        run_id: &RunId,
        answers: Answers<'_>,
    ) -> ServerStep {
        let Some(ours) = id.as_str().filter(|k| expected(answers, k)) else {
            return ServerStep::Drop("an answer to no request forwarded on this stream");
        };
        let Some(f) = self.in_flight.take(ours) else {
            return ServerStep::Drop("an answer to no request the gateway forwarded");
        };
        if let Awaiting::Task { task, intent } = &f.awaiting {
            self.settle_task(task, intent.as_deref(), &message).await;
            return ServerStep::Kept;
        }
        if let Some(cursor) = message
            .pointer("/result/nextCursor")
            .and_then(Value::as_str)
        {
            self.cursors
                .remember(&f.run_id, f.session.as_deref(), cursor);
        }
        // Protocol 2026-07-28 carries server requests inside a result too.
        if let Some(refusal) = self
            .decide_input_requests(&message, &f.original, run_id)
            .await
        {
            if matches!(f.awaiting, Awaiting::List { .. }) {
                self.forget_definitions();
            }
            return ServerStep::ToClient(refusal);
        }
        match &f.awaiting {
            Awaiting::List { first_page } => self.filter_list(&mut message, *first_page).await,
            Awaiting::Call {
                intent: Some(intent),
            } => self.finish_call(intent, &message).await,
            Awaiting::Discover if message.get("result").is_some() => {
                self.modern_server.store(true, Ordering::Relaxed);
                tasks::advertise(&mut message);
            }
            _ => {}
        }
        message["id"] = f.original;
        ServerStep::ToClient(message)
    }

    /// The refusal of an `input_required` result (protocol 2026-07-28) one
    /// of whose embedded requests the policy does not let through; `None`
    /// when every one passes, or the result embeds none.
    async fn decide_input_requests(
        &self,
        message: &Value,
        client_id: &Value,
        run_id: &RunId,
    ) -> Option<Value> {
        // An error asking for a URL elicitation (-32042) asks the user too.
        if message.pointer("/error/code").and_then(Value::as_i64) == Some(URL_ELICITATION_REQUIRED)
        {
            return self
                .decide_request(client_id, "elicitation/create", &Map::new(), run_id)
                .await;
        }
        let result = message.get("result")?;
        let embedded = result.get("inputRequests");
        if result.get("resultType").and_then(Value::as_str) != Some("input_required")
            && embedded.is_none()
        {
            return None;
        }
        let Some(Value::Object(requests)) = embedded else {
            return embedded.map(|_| {
                message::error(
                    client_id,
                    message::INTERNAL_ERROR,
                    "toolgate: the server's inputRequests are not an object; not passed on",
                )
            });
        };
        for request in requests.values() {
            let Some(method) = request.get("method").and_then(Value::as_str) else {
                return Some(message::error(
                    client_id,
                    message::INTERNAL_ERROR,
                    "toolgate: an embedded input request names no method; not passed on",
                ));
            };
            if message::UNGOVERNED_SERVER_REQUESTS.contains(&method) {
                continue;
            }
            if let Some(refusal) = self
                .decide_request(client_id, method, &Map::new(), run_id)
                .await
            {
                return Some(refusal);
            }
        }
        None
    }

    /// A message that could not be read: an error for the request it
    /// answered, when its id can still be made out; dropped otherwise.
    fn unreadable(&self, raw: &[u8], why: &str, answers: Answers<'_>) -> ServerStep {
        tracing::warn!(server = %self.server(), %why, "unreadable message from the server withheld");
        let ours = (raw.len() <= MAX_MESSAGE_BYTES)
            .then(|| serde_json::from_slice::<Head>(raw).ok())
            .flatten()
            .and_then(|h| h.id)
            .and_then(|id| id.as_str().map(str::to_owned))
            .filter(|k| expected(answers, k));
        match ours.and_then(|k| self.abandon(&k)) {
            Some(original) => ServerStep::ToClient(unreadable_answer(&original, why)),
            None => ServerStep::Drop("an unreadable message"),
        }
    }
}

/// Whether an answer to the gateway's request `ours` may come on a stream
/// that carries `answers`.
fn expected(answers: Answers<'_>, ours: &str) -> bool {
    match answers {
        Answers::Any => true,
        Answers::Only(awaited) => awaited == ours,
        Answers::None => false,
    }
}

/// The JSON-RPC error that stands in for an answer the gateway could not
/// read or did not get.
pub fn unreadable_answer(client_id: &Value, why: &str) -> Value {
    message::error(
        client_id,
        message::INTERNAL_ERROR,
        &format!("toolgate: the server's answer could not be read ({why}); it was not passed on"),
    )
}
