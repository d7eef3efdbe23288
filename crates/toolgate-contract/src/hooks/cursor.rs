//! Cursor hooks (`.cursor/hooks.json`): <https://cursor.com/docs/agent/hooks>.
//!
//! Inputs, with `conversation_id` (the run), `generation_id` and
//! `hook_event_name`:
//! - `beforeShellExecution`: `command`, `cwd` — decided as the tool
//!   `Shell` (Cursor's own name for it in `preToolUse`) with both;
//! - `beforeMCPExecution`: `tool_name`, `tool_input` (an object, or the
//!   object as JSON text), and the server's `url` or `command`. The docs
//!   give no server *name*, so the tool is `mcp.TOOL` (a profile aliases
//!   it to the gateway's `SERVER.TOOL`); never the bare name, which could
//!   pass for one of Cursor's own tools;
//! - `preToolUse`: `tool_name` (`Shell`, `Read`, `Write`, `Edit`, …),
//!   `tool_input`, `tool_use_id`.
//!
//! Output: `permission` `allow` | `deny` | `ask`, `user_message`,
//! `agent_message`, exit 0. The docs do not say how an exit code other than
//! 0 is taken, so toolgate only ever answers in the JSON, and exits 0. An
//! escalation denies with the approval hint: a local `ask` would let the
//! call run without the approval toolgate records.

use serde_json::{Map, Value, json};

use super::{Answer, Event, HookCall, HookError, Rendered, Verdict};

pub(super) fn parse(obj: &Map<String, Value>) -> Result<HookCall, HookError> {
    let event = super::text(obj, "hook_event_name").ok_or(HookError::Missing("hook_event_name"))?;
    let (tool, arguments, step_id) = match event {
        "beforeShellExecution" => {
            let command = super::text(obj, "command").ok_or(HookError::Missing("command"))?;
            let mut arguments = Map::new();
            arguments.insert("command".into(), command.into());
            if let Some(cwd) = super::opt_text(obj, "cwd")? {
                arguments.insert("cwd".into(), cwd.into());
            }
            ("Shell".to_owned(), arguments, None)
        }
        "beforeMCPExecution" => {
            let tool = super::text(obj, "tool_name").ok_or(HookError::Missing("tool_name"))?;
            let arguments = super::arguments(obj, "tool_input", true)?;
            (format!("mcp.{tool}"), arguments, None)
        }
        "preToolUse" => {
            let tool = super::text(obj, "tool_name").ok_or(HookError::Missing("tool_name"))?;
            let arguments = super::arguments(obj, "tool_input", true)?;
            let step = super::opt_text(obj, "tool_use_id")?.map(str::to_owned);
            (super::mcp_policy_name(tool), arguments, step)
        }
        other => return Err(HookError::UnsupportedEvent(other.to_owned())),
    };
    Ok(HookCall {
        event: Event::PreToolUse,
        tool,
        arguments,
        run_id: super::opt_text(obj, "conversation_id")?.map(str::to_owned),
        run_field: "conversation_id",
        step_id: step_id.or(super::opt_text(obj, "generation_id")?.map(str::to_owned)),
    })
}

pub(super) fn render(answer: &Answer) -> Rendered {
    let permission = match answer.verdict {
        Verdict::Allow => "allow",
        Verdict::Deny | Verdict::Escalated => "deny",
    };
    Rendered {
        body: json!({
            "permission": permission,
            "user_message": answer.reason,
            "agent_message": answer.reason,
        }),
        exit_code: 0,
        stderr: super::claude_code::stderr(answer),
    }
}

pub(super) fn read(body: &Value) -> Option<Answer> {
    let reason = super::reason_of(body, "agent_message");
    match body.get("permission")?.as_str()? {
        "allow" => Some(Answer {
            verdict: Verdict::Allow,
            reason,
            warning: None,
        }),
        "deny" => Some(Answer::deny(reason)),
        _ => None,
    }
}
