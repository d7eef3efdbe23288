//! Gemini CLI hooks (`BeforeTool`):
//! <https://geminicli.com/docs/hooks/reference>.
//!
//! Input: `session_id`, `hook_event_name`, `tool_name` (`run_shell_command`,
//! `write_file`, `replace`, `web_fetch`, …; MCP tools `mcp__SERVER__TOOL`),
//! `tool_input`, and for MCP tools `mcp_context` with `server_name` and
//! the server's own `tool_name`.
//!
//! Output: `decision` `allow` | `deny` with `reason`; exit 2 blocks with
//! stderr as the reason, other non-zero codes are only warnings. The docs
//! name no `ask` for `BeforeTool`, so an escalation denies with the
//! approval hint; a deny prints the JSON and exits 2.

use serde_json::{Map, Value, json};

use super::{Answer, Event, HookCall, HookError, Rendered, Verdict};

pub(super) fn parse(obj: &Map<String, Value>) -> Result<HookCall, HookError> {
    match super::opt_text(obj, "hook_event_name")? {
        None | Some("BeforeTool") => {}
        Some(other) => return Err(HookError::UnsupportedEvent(other.to_owned())),
    }
    let mut call = super::claude_like(obj, Event::PreToolUse)?;
    // The MCP context names the server and the tool as the server does:
    // the same `SERVER.TOOL` the MCP gateway decides.
    match obj.get("mcp_context") {
        None | Some(Value::Null) => {}
        Some(Value::Object(ctx)) => {
            let server = super::text(ctx, "server_name");
            let tool = super::text(ctx, "tool_name");
            match (server, tool) {
                (Some(server), Some(tool)) => call.tool = format!("{server}.{tool}"),
                _ => return Err(HookError::Missing("mcp_context.server_name/tool_name")),
            }
        }
        Some(_) => {
            return Err(HookError::WrongType {
                field: "mcp_context",
                expected: "a JSON object",
            });
        }
    }
    Ok(call)
}

pub(super) fn render(answer: &Answer) -> Rendered {
    let body = match answer.verdict {
        Verdict::Allow => json!({"decision": "allow", "reason": answer.reason}),
        Verdict::Deny | Verdict::Escalated => json!({"decision": "deny", "reason": answer.reason}),
    };
    Rendered {
        exit_code: u8::from(answer.verdict != Verdict::Allow) * 2,
        body,
        stderr: super::claude_code::stderr(answer),
    }
}

pub(super) fn read(body: &Value) -> Option<Answer> {
    let reason = super::reason_of(body, "reason");
    match body.get("decision")?.as_str()? {
        "allow" => Some(Answer {
            verdict: Verdict::Allow,
            reason,
            warning: None,
        }),
        "deny" | "block" => Some(Answer::deny(reason)),
        _ => None,
    }
}
