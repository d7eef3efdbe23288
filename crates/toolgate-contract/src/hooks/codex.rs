//! OpenAI Codex CLI hooks (`.codex/hooks.json`, `PreToolUse`):
//! <https://developers.openai.com/codex/hooks>.
//!
//! Input is Claude-Code-compatible: `session_id`, `turn_id`, `tool_name`
//! (`Bash`, `apply_patch` with the patch in `tool_input.command`, MCP tools
//! as `mcp__SERVER__TOOL`), `tool_input`, `tool_use_id`.
//!
//! Output: only a deny is honoured (`hookSpecificOutput.permissionDecision:
//! "deny"`, or exit 2 with the reason on stderr); `allow` and `ask` are
//! documented as unsupported, and Codex runs the call when it meets them.
//! So an allow is an empty object, and an escalation denies with the
//! approval hint: once a human approves, the retried call (a new
//! `tool_use_id` and `turn_id`, the same run, tool and arguments) passes.
//! A deny does both: the JSON and exit 2.

use serde_json::{Map, Value, json};

use super::{Answer, Event, HookCall, HookError, Rendered, Verdict};

pub(super) fn parse(obj: &Map<String, Value>) -> Result<HookCall, HookError> {
    match super::opt_text(obj, "hook_event_name")? {
        None | Some("PreToolUse") => {}
        Some(other) => return Err(HookError::UnsupportedEvent(other.to_owned())),
    }
    super::claude_like(obj, Event::PreToolUse)
}

pub(super) fn render(answer: &Answer) -> Rendered {
    let body = match answer.verdict {
        Verdict::Allow => json!({}),
        Verdict::Deny | Verdict::Escalated => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": answer.reason,
        }}),
    };
    Rendered {
        exit_code: u8::from(answer.verdict != Verdict::Allow) * 2,
        body,
        stderr: super::claude_code::stderr(answer),
    }
}

pub(super) fn read(body: &Value) -> Option<Answer> {
    let obj = body.as_object()?;
    if obj.is_empty() {
        return Some(Answer {
            verdict: Verdict::Allow,
            reason: String::new(),
            warning: None,
        });
    }
    let out = obj.get("hookSpecificOutput")?;
    (out.get("permissionDecision")?.as_str()? == "deny")
        .then(|| Answer::deny(super::reason_of(out, "permissionDecisionReason")))
}
