//! Claude Code hooks: <https://code.claude.com/docs/en/hooks>.
//!
//! Input (`PreToolUse`, `PermissionRequest`): `session_id`, `tool_name`,
//! `tool_input`, `tool_use_id`, plus fields toolgate ignores (`cwd`,
//! `transcript_path`, `permission_mode`, …). MCP tools are named
//! `mcp__SERVER__TOOL`.
//!
//! Output, `PreToolUse`: `hookSpecificOutput.permissionDecision` `allow` |
//! `deny` | `ask` with `permissionDecisionReason`. An escalation is `ask`:
//! the user is shown the reason, which names the approval. A deny also
//! exits 2, the code Claude Code documents as blocking (stderr goes to
//! the model); any other non-zero code is a non-blocking error.
//!
//! Output, `PermissionRequest`: `hookSpecificOutput.decision.behavior`
//! `allow` | `deny` (with `message`). The event has no `ask`, so an
//! escalation denies, naming the approval.

use serde_json::{Map, Value, json};

use super::{Answer, Event, HookCall, HookError, Rendered, Verdict};

pub(super) fn parse(obj: &Map<String, Value>) -> Result<HookCall, HookError> {
    let event = match super::opt_text(obj, "hook_event_name")? {
        None | Some("PreToolUse") => Event::PreToolUse,
        Some("PermissionRequest") => Event::PermissionRequest,
        Some(other) => return Err(HookError::UnsupportedEvent(other.to_owned())),
    };
    super::claude_like(obj, event)
}

pub(super) fn render(event: Event, answer: &Answer) -> Rendered {
    let reason = answer.reason.clone();
    let (body, exit_code) = match event {
        Event::PreToolUse => {
            let decision = match answer.verdict {
                Verdict::Allow => "allow",
                Verdict::Deny => "deny",
                Verdict::Escalated => "ask",
            };
            let body = json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                "permissionDecisionReason": reason,
            }});
            (body, u8::from(answer.verdict == Verdict::Deny) * 2)
        }
        Event::PermissionRequest => {
            let decision = match answer.verdict {
                Verdict::Allow => json!({"behavior": "allow"}),
                Verdict::Deny | Verdict::Escalated => {
                    json!({"behavior": "deny", "message": reason})
                }
            };
            let body = json!({"hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": decision,
            }});
            (body, u8::from(answer.verdict != Verdict::Allow) * 2)
        }
    };
    Rendered {
        body,
        exit_code,
        stderr: stderr(answer),
    }
}

/// What a command hook prints on stderr: the reason of what did not pass,
/// and a warn-mode notice of what did.
pub(super) fn stderr(answer: &Answer) -> Option<String> {
    match answer.verdict {
        Verdict::Allow => answer.warning.as_ref().map(|_| answer.reason.clone()),
        Verdict::Deny | Verdict::Escalated => Some(answer.reason.clone()),
    }
}

/// The event a rendered body answers.
pub(super) fn event_of_output(body: &Value) -> Event {
    match body["hookSpecificOutput"]["hookEventName"].as_str() {
        Some("PermissionRequest") => Event::PermissionRequest,
        _ => Event::PreToolUse,
    }
}

pub(super) fn read(body: &Value) -> Option<Answer> {
    let out = body.get("hookSpecificOutput")?;
    let (verdict, reason) = match event_of_output(body) {
        Event::PreToolUse => {
            let verdict = match out.get("permissionDecision")?.as_str()? {
                "allow" => Verdict::Allow,
                "ask" => Verdict::Escalated,
                "deny" => Verdict::Deny,
                _ => return None,
            };
            (verdict, super::reason_of(out, "permissionDecisionReason"))
        }
        Event::PermissionRequest => {
            let decision = out.get("decision")?;
            let verdict = match decision.get("behavior")?.as_str()? {
                "allow" => Verdict::Allow,
                "deny" => Verdict::Deny,
                _ => return None,
            };
            (verdict, super::reason_of(decision, "message"))
        }
    };
    Some(Answer {
        verdict,
        reason,
        warning: None,
    })
}
