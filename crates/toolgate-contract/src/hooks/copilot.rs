//! GitHub Copilot CLI hooks (`.github/hooks/*.json`, `preToolUse`):
//! <https://docs.github.com/en/copilot/reference/hooks-configuration>.
//!
//! Input: `timestamp`, `cwd`, `toolName` (`bash`, `edit`, `create`, `view`,
//! `web_fetch`, MCP tools by their Copilot name), `toolArgs` — the
//! arguments as JSON text (an object is read too). The docs name no
//! session id; a `sessionId` is read when present, else every call is the
//! run `hook`. MCP names are kept as Copilot sends them (the docs do not
//! say how to split one): a profile aliases them.
//!
//! Output: `permissionDecision` `deny` with `permissionDecisionReason` is
//! the only answer processed. A hook that exits non-zero is *skipped* (the
//! call runs), so every answer — a deny included — is JSON on stdout with
//! exit 0; an escalation denies with the approval hint.

use serde_json::{Map, Value, json};

use super::{Answer, Event, HookCall, HookError, Rendered, Verdict};

pub(super) fn parse(obj: &Map<String, Value>) -> Result<HookCall, HookError> {
    let tool = super::text(obj, "toolName").ok_or(HookError::Missing("toolName"))?;
    Ok(HookCall {
        event: Event::PreToolUse,
        tool: super::mcp_policy_name(tool),
        arguments: super::arguments(obj, "toolArgs", true)?,
        run_id: super::opt_text(obj, "sessionId")?.map(str::to_owned),
        run_field: "sessionId",
        step_id: None,
    })
}

pub(super) fn render(answer: &Answer) -> Rendered {
    let decision = match answer.verdict {
        Verdict::Allow => "allow",
        Verdict::Deny | Verdict::Escalated => "deny",
    };
    Rendered {
        body: json!({
            "permissionDecision": decision,
            "permissionDecisionReason": answer.reason,
        }),
        exit_code: 0,
        stderr: super::claude_code::stderr(answer),
    }
}

pub(super) fn read(body: &Value) -> Option<Answer> {
    let reason = super::reason_of(body, "permissionDecisionReason");
    match body.get("permissionDecision")?.as_str()? {
        "allow" => Some(Answer {
            verdict: Verdict::Allow,
            reason,
            warning: None,
        }),
        "deny" => Some(Answer::deny(reason)),
        _ => None,
    }
}
