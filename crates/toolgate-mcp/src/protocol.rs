//! What of a client's message may reach a server at all.
//!
//! The gateway decides `tools/call` and a few reads, but every other
//! message is a channel too: a secret can ride in a custom method, an
//! unknown parameter, a `_meta` member, a pagination cursor or a
//! notification. So the client's side of the protocol is closed:
//!
//! - a request or notification whose method is not one the protocol
//!   defines ([`CLIENT_REQUESTS`], [`CLIENT_NOTIFICATIONS`]) is decided as
//!   the tool `SERVER.METHOD` with its parameters as arguments: refused
//!   (`unknown_tool`) unless the profile declares it;
//! - a method the protocol defines keeps only the parameters it defines;
//!   `_meta` keeps a well-formed `progressToken` and `traceparent` and the
//!   shape (names and flags, no text) of the client's capabilities;
//! - a `cursor` is passed back only when this server returned it, in the
//!   same run and session ([`CursorBook`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{Map, Value};
use toolgate_policy::RunId;

/// Client requests of the protocol (2025-06-18 to 2026-07-28), each with the
/// parameters it defines besides `_meta`.
pub const CLIENT_REQUESTS: [(&str, &[&str]); 19] = [
    (
        "initialize",
        &["protocolVersion", "capabilities", "clientInfo"],
    ),
    ("ping", &[]),
    ("server/discover", &[]),
    ("tools/list", &["cursor"]),
    ("tools/call", &["name", "arguments", "task"]),
    ("resources/list", &["cursor"]),
    ("resources/templates/list", &["cursor"]),
    ("resources/read", &["uri"]),
    ("resources/subscribe", &["uri"]),
    ("resources/unsubscribe", &["uri"]),
    ("subscriptions/listen", &["notifications"]),
    ("prompts/list", &["cursor"]),
    ("prompts/get", &["name", "arguments"]),
    ("completion/complete", &["ref", "argument", "context"]),
    ("logging/setLevel", &["level"]),
    ("tasks/get", &["taskId"]),
    ("tasks/result", &["taskId"]),
    ("tasks/list", &["cursor"]),
    ("tasks/cancel", &["taskId"]),
];

/// Client notifications of the protocol, with the parameters each defines.
pub const CLIENT_NOTIFICATIONS: [(&str, &[&str]); 4] = [
    ("notifications/initialized", &[]),
    ("notifications/cancelled", &["requestId", "reason"]),
    (
        "notifications/progress",
        &["progressToken", "progress", "total", "message"],
    ),
    ("notifications/roots/list_changed", &[]),
];

/// `_meta` members of protocol 2026-07-28 requests.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The protocol version of one request (HTTP: equal to `MCP-Protocol-Version`).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// Longest progress token, task id or client name passed on.
const MAX_TOKEN_CHARS: usize = 128;
/// The log levels of `logging/setLevel` and `_meta` `logLevel`.
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// What the gateway does with a client message's method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// A method of the protocol; its parameters are now the defined ones.
    Known,
    /// Not a method of the protocol: decided as `SERVER.METHOD`.
    Unknown(String),
}

/// Checks `message`'s method and trims its parameters to what the method
/// defines (see the module docs). A message without a method (an answer
/// to a server's request) is `Known` and left as it is.
pub fn admit(message: &mut Value) -> Admission {
    // MCP's params are an object; any other (an array) is text no rule
    // would read.
    if message.get("params").is_some_and(|p| !p.is_object())
        && let Some(m) = message.as_object_mut()
    {
        m.remove("params");
    }
    if let Some(meta) = message.pointer_mut("/params/_meta") {
        *meta = Value::Object(trimmed_meta(meta));
    }
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Admission::Known;
    };
    let table: &[(&str, &[&str])] = if message.get("id").is_some() {
        &CLIENT_REQUESTS
    } else if method.starts_with("notifications/") {
        &CLIENT_NOTIFICATIONS
    } else {
        // A request without an id: refused as such by `message::classify`.
        return Admission::Known;
    };
    let Some(&(method, defined)) = table.iter().find(|(m, _)| *m == method) else {
        return Admission::Unknown(method.to_owned());
    };
    if let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) {
        params.retain(|k, _| k == "_meta" || defined.contains(&k.as_str()));
        // A call's arguments are decided; nothing else it carries may be
        // text of the agent's: its `_meta` keeps only what has a fixed
        // form, and its task only a time to live.
        if method == "tools/call"
            && let Some(Value::Object(meta)) = params.get_mut("_meta")
        {
            meta.retain(|k, v| match k.as_str() {
                "progressToken" => v.is_i64(),
                CLIENT_INFO | RELATED_TASK => false,
                _ => true,
            });
            if let Some(caps) = meta.get_mut(CLIENT_CAPABILITIES) {
                *caps = declared_extensions(caps);
            }
        }
        if let Some(task) = params.get_mut("task") {
            let ttl = task.get("ttl").filter(|t| t.is_u64()).cloned();
            *task = ttl.map_or_else(|| serde_json::json!({}), |t| serde_json::json!({"ttl": t}));
        }
        // What a client says of itself is names and flags, not text to carry.
        if method == "initialize" {
            let version = params.get("protocolVersion").and_then(Value::as_str);
            if !version.is_some_and(is_version) {
                params.remove("protocolVersion");
            }
            if let Some(caps) = params.get_mut("capabilities") {
                *caps = shape(caps, 3);
            }
            if let Some(info) = params.get_mut("clientInfo") {
                *info = client_info(info);
            }
        }
    }
    Admission::Known
}

/// The parameters of an unknown method as the decision sees them (all but
/// `_meta`).
pub fn decided_params(message: &Value) -> Map<String, Value> {
    let mut params = message
        .get("params")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    params.remove("_meta");
    params
}

/// What of a client's `_meta` passes: a progress token (an integer or a
/// short string of visible ASCII), a W3C `traceparent`, the 2026-07-28
/// members in their defined shapes (a protocol version, a log level, a
/// related task id, the client's name and version as short text), and the
/// client's capabilities reduced to their shape.
fn trimmed_meta(meta: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(meta) = meta.as_object() else {
        return out;
    };
    let mut keep = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            out.insert(key.to_owned(), value);
        }
    };
    let token = |v: &Value| short_text(v, false).map(Value::String);
    keep(
        "progressToken",
        meta.get("progressToken").and_then(|t| {
            if t.is_i64() {
                Some(t.clone())
            } else {
                token(t)
            }
        }),
    );
    keep(
        "traceparent",
        meta.get("traceparent")
            .and_then(Value::as_str)
            .filter(|t| is_traceparent(t))
            .map(Value::from),
    );
    keep(
        PROTOCOL_VERSION,
        meta.get(PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .filter(|v| is_version(v))
            .map(Value::from),
    );
    keep(
        LOG_LEVEL,
        meta.get(LOG_LEVEL)
            .and_then(Value::as_str)
            .filter(|l| LOG_LEVELS.contains(l))
            .map(Value::from),
    );
    keep(
        RELATED_TASK,
        meta.get(RELATED_TASK)
            .and_then(|t| t.get("taskId"))
            .and_then(token)
            .map(|id| serde_json::json!({"taskId": id})),
    );
    keep(CLIENT_INFO, meta.get(CLIENT_INFO).map(client_info));
    keep(
        CLIENT_CAPABILITIES,
        meta.get(CLIENT_CAPABILITIES).map(|c| shape(c, 3)),
    );
    out
}

/// The extensions a call declares, by the names the gateway knows (the
/// tasks extension): no other name is passed on.
fn declared_extensions(caps: &Value) -> Value {
    let known = ["io.modelcontextprotocol/tasks"];
    let declared: Map<String, Value> = known
        .iter()
        .filter(|name| {
            caps.pointer("/extensions")
                .and_then(|e| e.get(**name))
                .is_some()
        })
        .map(|name| ((*name).to_owned(), serde_json::json!({})))
        .collect();
    if declared.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::json!({"extensions": declared})
    }
}

/// A client's name, version and title, each short visible text.
fn client_info(info: &Value) -> Value {
    ["name", "version", "title"]
        .into_iter()
        .filter_map(|k| Some((k.to_owned(), Value::String(short_text(info.get(k)?, true)?))))
        .collect::<Map<String, Value>>()
        .into()
}

/// A string of at most [`MAX_TOKEN_CHARS`] visible ASCII characters
/// (`spaces` lets inner spaces through).
fn short_text(value: &Value, spaces: bool) -> Option<String> {
    let text = value.as_str()?;
    let ok = text.len() <= MAX_TOKEN_CHARS
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() || (spaces && b == b' '));
    ok.then(|| text.to_owned())
}

/// `YYYY-MM-DD`, the form of every protocol version.
pub fn is_version(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// `00-<32 hex>-<16 hex>-<2 hex>`, lowercase.
fn is_traceparent(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
}

/// `value` with no text left in it: objects keep members whose names look
/// like capability names (at most 32), booleans and numbers stay, strings
/// and arrays go; `depth` levels at most.
fn shape(value: &Value, depth: usize) -> Value {
    let mut budget = MAX_SHAPE_KEYS;
    shape_within(value, depth, &mut budget)
}

/// Most capability names one shape keeps, in all.
const MAX_SHAPE_KEYS: usize = 64;

fn shape_within(value: &Value, depth: usize, budget: &mut usize) -> Value {
    let mut out = Map::new();
    if let Value::Object(members) = value
        && depth > 0
    {
        for (k, v) in members.iter().filter(|(k, _)| is_capability_name(k)) {
            if *budget == 0 {
                break;
            }
            let kept = match v {
                Value::Object(_) => shape_within(v, depth - 1, budget),
                Value::Bool(_) | Value::Number(_) => v.clone(),
                _ => continue,
            };
            *budget = budget.saturating_sub(1);
            out.insert(k.clone(), kept);
        }
    }
    Value::Object(out)
}

fn is_capability_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

/// Longest cursor remembered.
const MAX_CURSOR_CHARS: usize = 1024;
/// Most cursors remembered for one run and session, and sessions in all.
const CURSORS_PER_SESSION: usize = 64;
const SESSIONS: usize = 1024;

/// The pagination cursors a server returned, per run and MCP session: the
/// only cursors a client may send back (a cursor is the server's opaque
/// text, so one the client made up is a message to the server).
#[derive(Debug, Default)]
pub struct CursorBook {
    by_session: Mutex<Cursors>,
}

/// A run and MCP session.
type SessionKey = (String, Option<String>);

/// Cursors by session, and the sessions oldest first (to forget).
#[derive(Debug, Default)]
struct Cursors {
    map: HashMap<SessionKey, VecDeque<String>>,
    order: VecDeque<SessionKey>,
}

impl CursorBook {
    /// Remembers `cursor`, returned to `run_id`'s `session`.
    pub fn remember(&self, run_id: &RunId, session: Option<&str>, cursor: &str) {
        // A longer one is not kept (nor then accepted back): a server must
        // not make the gateway hold its text.
        if cursor.len() > MAX_CURSOR_CHARS {
            return;
        }
        let mut guard = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        let Cursors { map, order } = &mut *guard;
        let key = (run_id.as_str().to_owned(), session.map(str::to_owned));
        if !map.contains_key(&key) {
            if order.len() >= SESSIONS
                && let Some(oldest) = order.pop_front()
            {
                map.remove(&oldest);
            }
            order.push_back(key.clone());
        }
        let cursors = map.entry(key).or_default();
        if cursors.len() >= CURSORS_PER_SESSION {
            cursors.pop_front();
        }
        cursors.push_back(cursor.to_owned());
    }

    /// Whether `cursor` was returned to `run_id`'s `session`.
    pub fn knows(&self, run_id: &RunId, session: Option<&str>, cursor: &str) -> bool {
        let guard = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        let key = (run_id.as_str().to_owned(), session.map(str::to_owned));
        guard
            .map
            .get(&key)
            .is_some_and(|c| c.iter().any(|k| k == cursor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECRET_TEXT: &str = "secret";

    #[test]
    fn unknown_methods_and_notifications_are_named() {
        for m in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "x/anything", "params": {"a": "secret"}}),
            json!({"jsonrpc": "2.0", "method": "notifications/leak", "params": {"a": "secret"}}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/update", "params": {}}),
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list"}),
        ] {
            let mut message = m.clone();
            assert!(matches!(admit(&mut message), Admission::Unknown(_)), "{m}");
            assert_eq!(message, m, "left untouched for the decision");
        }
    }

    #[test]
    fn known_methods_keep_only_what_they_define() {
        let mut m = json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {
            "name": "greeting", "arguments": {"who": "x"}, "leak": "secret",
            "_meta": {"progressToken": "t1", "leak": "secret", "tracestate": "k=secret",
                      "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                      CLIENT_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {"note": "secret"}}}}}});
        assert_eq!(admit(&mut m), Admission::Known);
        assert_eq!(
            m["params"],
            json!({"name": "greeting", "arguments": {"who": "x"}, "_meta": {
                "progressToken": "t1",
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                CLIENT_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}})
        );
        let mut modern = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            PROTOCOL_VERSION: "2026-07-28", LOG_LEVEL: "info", CLIENT_INFO: {"name": "agent x", "version": "1", "extra": SECRET_TEXT},
            RELATED_TASK: {"taskId": "t-1", "note": SECRET_TEXT}}}});
        admit(&mut modern);
        assert_eq!(
            modern["params"]["_meta"],
            json!({PROTOCOL_VERSION: "2026-07-28", LOG_LEVEL: "info",
            CLIENT_INFO: {"name": "agent x", "version": "1"}, RELATED_TASK: {"taskId": "t-1"}})
        );
        let mut bad_token = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {
            "_meta": {"progressToken": "a secret with spaces"}}});
        admit(&mut bad_token);
        assert_eq!(bad_token["params"], json!({"_meta": {}}));
    }

    #[test]
    fn a_call_carries_no_text_but_its_arguments() {
        let mut call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "kept"}, "task": {"ttl": 60, "note": SECRET_TEXT},
            "_meta": {"progressToken": "sk-live-secret", PROTOCOL_VERSION: "2026-07-28",
                      CLIENT_INFO: {"name": "x", "title": SECRET_TEXT}, RELATED_TASK: {"taskId": SECRET_TEXT},
                      CLIENT_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {},
                                                           "secret-name": {}}}}}});
        admit(&mut call);
        assert_eq!(
            call["params"],
            json!({"name": "echo", "arguments": {"text": "kept"},
            "task": {"ttl": 60}, "_meta": {PROTOCOL_VERSION: "2026-07-28",
            CLIENT_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}})
        );
        let mut listed =
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": [SECRET_TEXT]});
        admit(&mut listed);
        assert!(listed.get("params").is_none());
    }

    #[test]
    fn cursors_are_known_per_run_and_session_and_bounded() {
        let book = CursorBook::default();
        let run = RunId::parse("r1").unwrap();
        let other = RunId::parse("r2").unwrap();
        book.remember(&run, Some("s"), "c1");
        assert!(book.knows(&run, Some("s"), "c1"));
        assert!(!book.knows(&run, None, "c1"));
        assert!(!book.knows(&other, Some("s"), "c1"));
        assert!(!book.knows(&run, Some("s"), "c2"));
        for i in 0..CURSORS_PER_SESSION {
            book.remember(&run, Some("s"), &format!("n{i}"));
        }
        assert!(
            !book.knows(&run, Some("s"), "c1"),
            "the oldest is forgotten"
        );
    }
}
