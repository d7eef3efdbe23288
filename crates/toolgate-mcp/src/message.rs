//! JSON-RPC messages of the MCP gateway, as pure functions.

use std::collections::HashSet;

use serde_json::{Value, json};

/// JSON-RPC: invalid params (also "unknown tool" in MCP).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: invalid request (batches, non-objects).
pub const INVALID_REQUEST: i64 = -32600;
/// Key under `_meta` carrying toolgate's verdict on a refused call.
pub const VERDICT_META: &str = "toolgate.dev/verdict";

/// The policy tool of MCP tool `tool` on server `server`: `server.tool`.
pub fn policy_tool(server: &str, tool: &str) -> String {
    format!("{server}.{tool}")
}

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
    BadCallTool {
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
    /// Anything else: passed through unchanged.
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
                return FromClient::BadCallTool {
                    id,
                    reason: "tools/call needs params.name".into(),
                };
            };
            let arguments = match params.and_then(|p| p.get("arguments")) {
                None | Some(Value::Null) => serde_json::Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(_) => {
                    return FromClient::BadCallTool {
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
        _ => FromClient::Other,
    }
}

/// A JSON-RPC error response.
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
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
mod tests {
    use super::*;

    #[test]
    fn calls_are_classified_strictly() {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": "read_file", "arguments": {"path": "/a"}}});
        assert_eq!(
            classify(&call),
            FromClient::CallTool {
                id: json!(7),
                name: "read_file".into(),
                arguments: json!({"path": "/a"}).as_object().unwrap().clone(),
            }
        );
        for bad in [
            json!({"id": 1, "method": "tools/call", "params": {}}),
            json!({"id": 1, "method": "tools/call", "params": {"name": ""}}),
            json!({"id": 1, "method": "tools/call", "params": {"name": "x", "arguments": [1]}}),
        ] {
            assert!(
                matches!(classify(&bad), FromClient::BadCallTool { .. }),
                "{bad}"
            );
        }
        assert_eq!(
            classify(&json!({"id": "a", "method": "tools/list"})),
            FromClient::ListTools { id: json!("a") }
        );
        // A notification (no id) is not a request to decide.
        assert_eq!(
            classify(&json!({"method": "notifications/tools/list_changed"})),
            FromClient::Other
        );
    }

    #[test]
    fn lists_are_filtered_by_policy_name() {
        let mut response = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "tools": [{"name": "read_file"}, {"name": "write_file"}, {"name": "move_file"}],
            "nextCursor": "c2"}});
        assert_eq!(
            listed_tools(&response),
            ["read_file", "write_file", "move_file"]
        );
        let visible: HashSet<String> =
            ["fs.read_file".to_owned(), "fs.move_file".to_owned()].into();
        filter_tools(&mut response, "fs", &visible);
        assert_eq!(listed_tools(&response), ["read_file", "move_file"]);
        assert_eq!(response["result"]["nextCursor"], "c2");
    }

    #[test]
    fn refusals_have_the_call_tool_result_shape() {
        let v = json!({"verdict": "deny", "reason": "hardline_path"});
        let r = refusal(&json!(3), "toolgate: deny", Some(&v), false);
        assert_eq!(r["id"], 3);
        assert_eq!(r["result"]["isError"], true);
        assert_eq!(r["result"]["content"][0]["type"], "text");
        assert_eq!(
            r["result"]["_meta"][VERDICT_META]["reason"],
            "hardline_path"
        );
        assert!(r["result"].get("resultType").is_none());
        assert_eq!(
            refusal(&json!(3), "x", None, true)["result"]["resultType"],
            "complete"
        );
        assert!(is_failure(&r));
        assert!(is_failure(&error(&json!(1), INVALID_PARAMS, "no")));
        assert!(!is_failure(&json!({"id": 1, "result": {"content": []}})));
        assert_eq!(step_id(&json!(12)), "12");
        // The digest ignores key order and extra members, and sees every
        // change to the name, description or schema.
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "required": ["x"]}});
        let b = json!({"inputSchema": {"required": ["x"], "type": "object"}, "title": "T", "description": "d", "name": "t"});
        assert_eq!(definition_digest(&a), definition_digest(&b));
        assert!(definition_digest(&a).starts_with("sha256:"));
        let mut c = a.clone();
        c["description"] = json!("d, and also delete everything");
        assert_ne!(definition_digest(&a), definition_digest(&c));
        assert_eq!(step_id(&json!("r-1")), "r-1");
    }
}
