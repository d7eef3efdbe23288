//! JSON-RPC messages of the MCP gateway, as pure functions.

use std::collections::HashSet;

use serde_json::{Value, json};

/// JSON-RPC: invalid params (also "unknown tool" in MCP).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: invalid request (batches, non-objects).
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: internal error (an answer the gateway could not read).
pub const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC (implementation-defined range): the policy refused a request
/// that is not a `tools/call` (`resources/read`, `prompts/get`, a server's
/// `sampling/createMessage`, …). The verdict, when there is one, is the
/// error's `data`.
pub const POLICY_REFUSED: i64 = -32001;
/// Key under `_meta` carrying toolgate's verdict on a refused call.
pub const VERDICT_META: &str = "toolgate.dev/verdict";
/// Requests of the client other than `tools/call` that read through the
/// server and are decided like a tool named `SERVER.METHOD`, with the
/// parameter that names what is read as the call's one argument.
pub const GOVERNED_CLIENT_REQUESTS: [(&str, &str); 5] = [
    ("resources/read", "uri"),
    ("resources/subscribe", "uri"),
    ("resources/unsubscribe", "uri"),
    ("prompts/get", "name"),
    ("completion/complete", "ref"),
];
/// The only server-to-client request that passes undecided; every other
/// one (sampling, elicitation, roots, anything new) is decided like a tool
/// named `SERVER.METHOD` and refused unless the profile declares it.
pub const UNGOVERNED_SERVER_REQUESTS: [&str; 1] = ["ping"];

/// The policy tool of MCP tool `tool` on server `server`: `server.tool`.
pub fn policy_tool(server: &str, tool: &str) -> String {
    format!("{server}.{tool}")
}

/// A member of a request's `params`: its name and value.
pub type Member = (&'static str, Value);

/// What one line from the agent is, as far as the gateway cares.
#[derive(Debug, Clone, PartialEq)]
pub enum FromClient {
    /// `tools/call` request: id, tool name and arguments.
    CallTool {
        /// Request id.
        id: Value,
        /// MCP tool name (not yet prefixed).
        name: String,
        /// Arguments (an object; empty when absent).
        arguments: serde_json::Map<String, Value>,
    },
    /// `tools/call` that cannot be decided (no name, arguments not an object).
    BadRequest {
        /// Request id.
        id: Value,
        /// Why.
        reason: String,
    },
    /// `tools/list` request: its result must be filtered.
    ListTools {
        /// Request id.
        id: Value,
    },
    /// A request in [`GOVERNED_CLIENT_REQUESTS`]: decided before it is sent.
    Governed {
        /// Request id.
        id: Value,
        /// Its method (`resources/read`, …).
        method: &'static str,
        /// The one argument the decision sees (`{"uri": …}`, …).
        arguments: serde_json::Map<String, Value>,
        /// The member of `params` the server gets in place of the client's
        /// (the resolved URI, the completion's one reference), so what was
        /// decided is what is read.
        canonical: Option<Member>,
    },
    /// Any other request: forwarded, its answer relayed back.
    OtherRequest {
        /// Request id.
        id: Value,
    },
    /// A notification or a response to a server's request.
    Other,
}

/// Classifies a parsed message from the client.
pub fn classify(message: &Value) -> FromClient {
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").cloned();
    match (method, id) {
        (Some("tools/list"), Some(id)) => FromClient::ListTools { id },
        (Some("tools/call"), Some(id)) => {
            let params = message.get("params");
            let Some(name) = params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            else {
                return FromClient::BadRequest {
                    id,
                    reason: "tools/call needs params.name".into(),
                };
            };
            let arguments = match params.and_then(|p| p.get("arguments")) {
                None | Some(Value::Null) => serde_json::Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(_) => {
                    return FromClient::BadRequest {
                        id,
                        reason: "tools/call params.arguments must be an object".into(),
                    };
                }
            };
            FromClient::CallTool {
                id,
                name: name.to_owned(),
                arguments,
            }
        }
        (Some(m), Some(id)) => match GOVERNED_CLIENT_REQUESTS.iter().find(|(g, _)| *g == m) {
            Some(&(method, key)) => match governed_subject(method, message.get("params")) {
                Ok((subject, canonical)) => {
                    let mut arguments = serde_json::Map::new();
                    arguments.insert(key.to_owned(), Value::String(subject));
                    FromClient::Governed {
                        id,
                        method,
                        arguments,
                        canonical,
                    }
                }
                Err(reason) => FromClient::BadRequest {
                    id,
                    reason: format!("{method}: {reason}"),
                },
            },
            None => FromClient::OtherRequest { id },
        },
        // Only a notification may come without an id: anything else would
        // reach the server undecided.
        (Some(m), None) if !m.starts_with("notifications/") => FromClient::BadRequest {
            id: Value::Null,
            reason: format!("`{m}` without an id: only notifications/* may omit it"),
        },
        _ => FromClient::Other,
    }
}

/// What a governed request names, as the policy sees it, and the member of
/// `params` the server gets in its place (`None`: `params` pass as they are).
fn governed_subject(
    method: &str,
    params: Option<&Value>,
) -> Result<(String, Option<Member>), String> {
    let text = |v: Option<&Value>, what: &str| {
        v.and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("needs {what}"))
    };
    match method {
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            let uri = canonical_uri(&text(params.and_then(|p| p.get("uri")), "params.uri")?)?;
            Ok((uri.clone(), Some(("uri", Value::String(uri)))))
        }
        "completion/complete" => {
            // Decided on the member the server reads, chosen by the type.
            let reference = params.and_then(|p| p.get("ref"));
            let kind = text(reference.and_then(|r| r.get("type")), "params.ref.type")?;
            let (member, subject) = match kind.as_str() {
                "ref/prompt" => (
                    "name",
                    text(reference.and_then(|r| r.get("name")), "params.ref.name")?,
                ),
                // A resource template (`file:///{path}`), not a URI: decided
                // and forwarded as written.
                "ref/resource" => (
                    "uri",
                    text(reference.and_then(|r| r.get("uri")), "params.ref.uri")?,
                ),
                other => return Err(format!("unknown params.ref.type `{other}`")),
            };
            let only = json!({"type": kind, member: subject});
            Ok((subject, Some(("ref", only))))
        }
        _ => Ok((
            text(params.and_then(|p| p.get("name")), "params.name")?,
            None,
        )),
    }
}

/// A resource URI as the policy sees it and the server gets it. Parsed and
/// written back by the WHATWG rules (scheme and host lower-cased, `.` and
/// `..` segments resolved), with the path's percent-escapes decoded and the
/// result resolved again, so no spelling (`%2e%2e`, `.%65nv`) matches a rule
/// its decoded form would not; a `file:` path loses repeated and trailing
/// separators. Refused: what is not a URI, an escaped `/`,
/// `\` or NUL, and a query or fragment on a `file:` URI (readers drop them).
pub fn canonical_uri(text: &str) -> Result<String, String> {
    let mut url = url::Url::parse(text).map_err(|e| format!("params.uri is not a URI ({e})"))?;
    let lower = url.path().to_ascii_lowercase();
    if ["%2f", "%5c", "%00"].iter().any(|e| lower.contains(e)) {
        return Err("params.uri escapes a separator or NUL in its path".into());
    }
    if url.scheme() == "file" && (url.query().is_some() || url.fragment().is_some()) {
        return Err("a file: URI with a query or fragment".into());
    }
    // Decoding can make new dot segments (`.%2e`): resolve until stable.
    for _ in 0..4 {
        let before = url.path().to_owned();
        let decoded = percent_decode(&before)
            .ok_or_else(|| "params.uri's path is not UTF-8 once decoded".to_owned())?;
        url.set_path(&decoded);
        url = url::Url::parse(url.as_str()).map_err(|e| format!("params.uri: {e}"))?;
        if url.path() == before {
            if url.scheme() == "file" {
                // A file is named the same with repeated or trailing
                // separators: `**/.env` must see `/x/.env` in `/x//.env/`.
                let mut path = url.path().to_owned();
                while path.contains("//") {
                    path = path.replace("//", "/");
                }
                if path.len() > 1 && path.ends_with('/') {
                    path.pop();
                }
                url.set_path(&path);
            }
            return Ok(url.into());
        }
    }
    Err("params.uri is escaped too many times over".into())
}

/// `%XX` escapes decoded (`None` when the result is not UTF-8 or an escape
/// is malformed).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A JSON-RPC error refusing a request on the policy's behalf, the verdict
/// (when there is one) as its `data`.
pub fn policy_error(id: &Value, text: &str, verdict: Option<&Value>) -> Value {
    respond_error(id, policy_error_object(text, verdict))
}

/// The error object of [`policy_error`], for answers held elsewhere (a
/// task's).
pub fn policy_error_object(text: &str, verdict: Option<&Value>) -> Value {
    let mut e = error_object(POLICY_REFUSED, text);
    if let Some(v) = verdict {
        e["data"] = json!({ VERDICT_META: v });
    }
    e
}

/// Whether a client message waits on a decision (and maybe on a human)
/// before it is forwarded: such messages are handled concurrently.
/// Read from the method alone: [`classify`] runs once, when the message is
/// decided.
pub fn waits_on_a_decision(message: &Value) -> bool {
    message.get("id").is_some()
        && message
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| {
                m == "tools/call" || GOVERNED_CLIENT_REQUESTS.iter().any(|(g, _)| *g == m)
            })
}

/// A JSON-RPC error response.
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    respond_error(id, error_object(code, message))
}

/// A JSON-RPC error object (`code`, `message`).
pub fn error_object(code: i64, message: &str) -> Value {
    json!({"code": code, "message": message})
}

fn respond_error(id: &Value, error: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// The `CallToolResult` of a call toolgate refused: `isError`, a text the
/// model can read (reason code and decision id), and the verdict under
/// `_meta["toolgate.dev/verdict"]`. `modern` (protocol 2026-07-28) adds
/// `resultType: "complete"`, without which such clients reject the result.
pub fn refusal(id: &Value, text: &str, verdict: Option<&Value>, modern: bool) -> Value {
    let mut result = json!({
        "content": [{"type": "text", "text": text}],
        "isError": true,
    });
    if let Some(v) = verdict {
        result["_meta"] = json!({ VERDICT_META: v });
    }
    if modern {
        result["resultType"] = json!("complete");
    }
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// The `Mcp-Method` and `Mcp-Name` headers of a 2026-07-28 request over
/// HTTP, made from the message the server gets (so they agree with it
/// whatever the gateway rewrote). A name that is not visible ASCII is sent
/// as `=?base64?…?=`.
pub fn routing_headers(message: &Value) -> Vec<(&'static str, String)> {
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Vec::new();
    };
    let mut headers = vec![("mcp-method", method.to_owned())];
    if let Some(name) = routed_name(message) {
        headers.push(("mcp-name", header_text(name)));
    }
    headers
}

/// `text` as the value of an `Mcp-Name` or `Mcp-Param-*` header: as it is
/// when it is visible ASCII without edge spaces (HTTP trims those), else
/// `=?base64?…?=`.
pub fn header_text(text: &str) -> String {
    let plain =
        !text.is_empty() && text.trim() == text && text.bytes().all(|b| (0x20..0x7f).contains(&b));
    if plain && !text.starts_with("=?base64?") {
        text.to_owned()
    } else {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    }
}

/// What a 2026-07-28 request's `Mcp-Name` header names: the member of its
/// params its method routes on (`name`, `uri`, `taskId`), if any.
pub fn routed_name(message: &Value) -> Option<&str> {
    let member = match message.get("method")?.as_str()? {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        m if m.starts_with("tasks/") => "taskId",
        _ => return None,
    };
    message.get("params")?.get(member)?.as_str()
}

/// The text of an `Mcp-Name` header: `=?base64?…?=` decoded; `None` when
/// that encoding does not decode to UTF-8.
pub fn header_name(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

/// `sha256:` digest of a tool's canonical `{name, description, inputSchema}`
/// (RFC 8785; an absent member counts as `null`): what a profile pins.
pub fn definition_digest(tool: &Value) -> String {
    let member = |k: &str| tool.get(k).cloned().unwrap_or(Value::Null);
    let definition = json!({
        "name": member("name"),
        "description": member("description"),
        "inputSchema": member("inputSchema"),
    });
    format!(
        "sha256:{}",
        toolgate_policy::digest::sha256_hex(&toolgate_policy::digest::canonical_json(&definition))
    )
}

/// The tool objects of a `tools/list` response.
pub fn listed_definitions(response: &Value) -> &[Value] {
    response
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The names of the tools in a `tools/list` response.
pub fn listed_tools(response: &Value) -> Vec<String> {
    response
        .pointer("/result/tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Keeps only the tools of a `tools/list` response whose policy names are
/// in `visible` (everything else, pagination included, is left as it is).
pub fn filter_tools(response: &mut Value, server: &str, visible: &HashSet<String>) {
    if let Some(tools) = response
        .pointer_mut("/result/tools")
        .and_then(Value::as_array_mut)
    {
        tools.retain(|t| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|name| visible.contains(&policy_tool(server, name)))
        });
    }
}

/// Whether a tool result reports failure (`isError: true`) or the response
/// is a JSON-RPC error: the intent of the call completes as `error`.
pub fn is_failure(response: &Value) -> bool {
    response.get("error").is_some()
        || response
            .pointer("/result/isError")
            .and_then(Value::as_bool)
            .unwrap_or(false)
}

/// The id of a message as a step id: strings as they are, numbers in
/// decimal, anything else as its JSON.
pub fn step_id(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
