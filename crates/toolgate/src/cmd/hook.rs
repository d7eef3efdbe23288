//! `toolgate hook pre-tool-use`: a Claude-Code-style `PreToolUse` hook.
//!
//! The hook runner pipes one JSON object on stdin (`tool_name`,
//! `tool_input`, `session_id`, …) and reads a decision back. The call is
//! asked of the sidecar at `$TOOLGATE_URL` exactly as `/v1/authorize` would
//! be asked by hand: `tool_name` is the policy tool (the profile's aliases
//! map e.g. `Bash` to `bash`), `tool_input` its arguments, `session_id` the
//! run id (in its canonical spelling: ASCII letters lowercased; a session
//! id outside the run-id alphabet blocks the call, `invalid_run_id`; calls
//! without one are all the run `hook`) and `tool_use_id` the step id.
//!
//! Exit codes follow the hook protocol: 0 lets the call run; 2 blocks it
//! (stderr is shown to the agent). Everything that is not a clear allow —
//! deny, an unanswered escalation, an unreachable or misbehaving sidecar,
//! unreadable hook input — exits 2: hook runners treat any other failure
//! as non-blocking, which would fail open.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use toolgate_client::{AuthorizeRequest, Client, Outcome};
use toolgate_policy::RunId;

use crate::cli_error::CliError;

/// Largest hook input read from stdin.
const MAX_INPUT_BYTES: u64 = 4 << 20;

/// The run of hook calls that carry no `session_id`.
const SESSIONLESS_RUN: &str = "hook";

/// Arguments of `toolgate hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    #[command(subcommand)]
    command: HookCommand,
}

#[derive(Debug, Subcommand)]
enum HookCommand {
    /// Decide one tool call before it runs (Claude-Code-style PreToolUse).
    PreToolUse(PreToolUseArgs),
}

#[derive(Debug, Args)]
struct PreToolUseArgs {
    /// The sidecar's agent API.
    #[arg(long, env = toolgate_contract::env::URL)]
    url: Option<String>,
    /// Seconds to wait for a human to answer an escalation before blocking
    /// the call (0: block at once, naming the approval to answer).
    #[arg(long, default_value_t = 0)]
    approval_wait: u64,
    /// Seconds one request to the sidecar may take.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// The hook's answer: what is printed, and whether the call may run.
#[derive(Debug, PartialEq)]
struct Answer {
    allow: bool,
    /// An allow carrying a warn-mode notice (also printed to stderr).
    warned: bool,
    reason: String,
}

impl Answer {
    fn deny(reason: impl Into<String>) -> Self {
        Self {
            allow: false,
            warned: false,
            reason: reason.into(),
        }
    }

    /// The decision JSON hook runners read from stdout.
    fn to_json(&self) -> Value {
        json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": if self.allow { "allow" } else { "deny" },
                "permissionDecisionReason": self.reason,
            }
        })
    }
}

/// Runs `toolgate hook …`.
pub fn run(args: HookArgs) -> Result<ExitCode, CliError> {
    match args.command {
        HookCommand::PreToolUse(args) => {
            // A hook that fails any other way than exit 2 lets the tool run
            // (runners treat other codes as non-blocking errors): a panic
            // blocks too.
            let answer = std::panic::catch_unwind(|| pre_tool_use(&args)).unwrap_or_else(|_| {
                Answer::deny("toolgate hook failed unexpectedly; blocking the call")
            });
            let _ = writeln!(std::io::stdout().lock(), "{}", answer.to_json());
            if answer.allow {
                if answer.warned {
                    let _ = writeln!(std::io::stderr(), "{}", answer.reason);
                }
                Ok(ExitCode::SUCCESS)
            } else {
                let _ = writeln!(std::io::stderr(), "{}", answer.reason);
                Ok(ExitCode::from(2))
            }
        }
    }
}

fn pre_tool_use(args: &PreToolUseArgs) -> Answer {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut input)
    {
        return Answer::deny(format!("toolgate: cannot read the hook input: {e}"));
    }
    if input.len() as u64 > MAX_INPUT_BYTES {
        return Answer::deny("toolgate: hook input larger than 4 MiB");
    }
    let call = match HookCall::parse(&input) {
        Ok(call) => call,
        Err(reason) => return Answer::deny(format!("toolgate: {reason}")),
    };
    let Some(url) = args.url.as_deref().filter(|u| !u.is_empty()) else {
        return Answer::deny(
            "toolgate: TOOLGATE_URL is not set; no sidecar to ask, so the call is blocked",
        );
    };
    let runtime = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => return Answer::deny(format!("toolgate: {e}")),
    };
    runtime.block_on(ask(url.trim_end_matches('/'), &call, args))
}

/// The tool as toolgate names it. Claude Code calls an MCP server's tool
/// `mcp__SERVER__TOOL`; toolgate's MCP gateway calls it `SERVER.TOOL`, so
/// the hook does too, and one profile governs a server the same way
/// whichever way its calls come. Every other name is kept as it is.
fn policy_tool_name(name: &str) -> String {
    match name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        Some((server, tool)) if !server.is_empty() && !tool.is_empty() => {
            toolgate_mcp::message::policy_tool(server, tool)
        }
        _ => name.to_owned(),
    }
}

/// What the hook input names.
#[derive(Debug, PartialEq)]
struct HookCall {
    tool: String,
    arguments: Map<String, Value>,
    run_id: RunId,
    step_id: Option<String>,
}

impl HookCall {
    /// Reads the fields toolgate needs; every other field of the hook
    /// protocol (transcript path, cwd, permission mode, …) is ignored, so
    /// runners that add fields keep working.
    fn parse(input: &[u8]) -> Result<Self, String> {
        let value: Value =
            serde_json::from_slice(input).map_err(|e| format!("hook input is not JSON: {e}"))?;
        let obj = value.as_object().ok_or("hook input is not a JSON object")?;
        let text = |key: &str| {
            obj.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let tool = text("tool_name").ok_or("hook input has no tool_name")?;
        let arguments = match obj.get("tool_input") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err("tool_input must be a JSON object".into()),
        };
        // The session is the run; without one, every such call is one run
        // (each call is its own process, so only a fixed name groups them).
        let run_id = match text("session_id") {
            Some(session) => {
                RunId::parse(session).map_err(|e| format!("{}: session_id: {e}", e.code()))?
            }
            None => RunId::fixed(SESSIONLESS_RUN),
        };
        Ok(Self {
            tool: policy_tool_name(tool),
            arguments,
            run_id,
            step_id: text("tool_use_id").map(str::to_owned),
        })
    }
}

/// The agent's trace context, when it handed the hook one in the
/// environment (`TRACEPARENT`, `TRACESTATE`): the sidecar's spans of this
/// call then join the agent's trace. A value that is not a header value is
/// left out.
fn trace_headers() -> reqwest::header::HeaderMap {
    use toolgate_contract::env::otel;
    let mut headers = reqwest::header::HeaderMap::new();
    let names = toolgate_contract::names::TRACE_CONTEXT_FIELDS;
    for (var, name) in [otel::TRACEPARENT, otel::TRACESTATE].into_iter().zip(names) {
        if let Some(value) = std::env::var(var)
            .ok()
            .and_then(|v| reqwest::header::HeaderValue::from_str(v.trim()).ok())
        {
            headers.insert(name, value);
        }
    }
    headers
}

/// Asks the sidecar, waiting for an approval up to `--approval-wait`; any
/// failure to get a verdict blocks the call.
async fn ask(url: &str, call: &HookCall, args: &PreToolUseArgs) -> Answer {
    let blocked = |e: toolgate_client::ClientError| {
        Answer::deny(format!("toolgate: {e}; the call is blocked"))
    };
    let timeout = Duration::from_secs(args.timeout.max(1));
    let client = match Client::with_headers(url, timeout, trace_headers()) {
        Ok(c) => c,
        Err(e) => return blocked(e),
    };
    let request = AuthorizeRequest {
        tool: call.tool.clone(),
        action: None,
        arguments: call.arguments.clone(),
        run_id: call.run_id.clone(),
        step_id: call.step_id.clone(),
        tenant: None,
        definition_digest: None,
    };
    let wait = Duration::from_secs(args.approval_wait);
    match client.authorize_waiting(&request, wait).await {
        Ok(outcome) => judge(&outcome),
        Err(e) => blocked(e),
    }
}

/// Turns the typed outcome into the hook's answer: only `Allowed` runs.
fn judge(outcome: &Outcome) -> Answer {
    let answer = outcome.answer();
    let (reason, decision) = (answer.verdict.reason.as_str(), &answer.decision_id);
    match outcome {
        // A warn-mode profile allows and says what it would have done: the
        // notice goes with the allow, for the agent and its operator.
        Outcome::Allowed(_) => Answer {
            allow: true,
            warned: answer.verdict.warning.is_some(),
            reason: match &answer.verdict.warning {
                Some(warning) => {
                    format!("toolgate: allow ({reason}, decision {decision}); {warning}")
                }
                None => format!("toolgate: allow ({reason}, decision {decision})"),
            },
        },
        Outcome::Denied(_) => {
            Answer::deny(format!("toolgate: deny ({reason}, decision {decision})"))
        }
        Outcome::Escalated { .. } => {
            let id = answer.approval_id.as_deref().unwrap_or_default();
            Answer::deny(format!(
                "toolgate: approval_required: approval {id} must be approved by a human \
                 (in Kubernetes: `kubectl toolgate approve {object}`; for a local sidecar: \
                 `toolgate approvals approve {id} --database <the sidecar's --database> --by \
                 <you>`); retry the same call afterwards (decision {decision})",
                object = toolgate_k8s::names::approval_name(id),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_input_is_read_leniently_but_completely() {
        let call = HookCall::parse(
            br#"{"session_id":"s-1","transcript_path":"/t","cwd":"/w","hook_event_name":"PreToolUse",
                 "tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"toolu_1","new_field":1}"#,
        )
        .unwrap();
        assert_eq!(
            call,
            HookCall {
                tool: "Bash".into(),
                arguments: json!({"command": "ls"}).as_object().unwrap().clone(),
                run_id: RunId::parse("s-1").unwrap(),
                step_id: Some("toolu_1".into()),
            }
        );
        // A session id is the run id in its one spelling; look-alikes block.
        let upper = HookCall::parse(br#"{"session_id":"S-1","tool_name":"Bash"}"#).unwrap();
        assert_eq!(upper.run_id.as_str(), "s-1");
        // Without a session id, every call is the one run `hook`.
        let none = HookCall::parse(br#"{"tool_name":"Bash"}"#).unwrap();
        assert_eq!(none.run_id.as_str(), "hook");
        for session in ["s-1 ", "s-1.", "s-1/", "s\u{200b}-1"] {
            let input = json!({"session_id": session, "tool_name": "Bash"}).to_string();
            let err = HookCall::parse(input.as_bytes()).unwrap_err();
            assert!(err.starts_with("invalid_run_id"), "{session:?}: {err}");
        }
        for bad in [
            &b"not json"[..],
            b"[]",
            b"{}",
            br#"{"tool_name":"x","tool_input":"ls"}"#,
        ] {
            assert!(
                HookCall::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// An answer as the sidecar gives it, with `extra` over an allow.
    fn answer(extra: Value) -> toolgate_client::AuthorizeResponse {
        let mut v = json!({
            "decision_id": "d", "verdict": "allow", "reason": "allow_rule",
            "policy_version": "sha256:p", "risk": "low", "intent_required": false,
            "args_digest": "sha256:a", "call_digest": "sha256:c",
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_a_clear_allow_lets_the_call_run() {
        let warned = judge(&Outcome::Allowed(answer(json!({"reason": "not_enforced",
            "enforced": false, "warning": "not enforced (warn): would deny (deny_rule)"}))));
        assert!(warned.allow && warned.warned);
        assert!(
            warned
                .reason
                .ends_with("; not enforced (warn): would deny (deny_rule)"),
            "{}",
            warned.reason
        );
        let allow = judge(&Outcome::Allowed(answer(json!({}))));
        assert!(allow.allow && !allow.warned);
        assert_eq!(
            allow.to_json()["hookSpecificOutput"]["permissionDecision"],
            "allow"
        );
        let escalated = |approval: &str| Outcome::Escalated {
            answer: answer(json!({"verdict": "escalate", "reason": "escalate_rule",
                "approval_id": approval})),
            waited: None,
        };
        for outcome in [
            Outcome::Denied(answer(json!({"verdict": "deny", "reason": "deny_rule"}))),
            escalated("a"),
        ] {
            let answer = judge(&outcome);
            assert!(!answer.allow, "{outcome:?}");
            assert_eq!(
                answer.to_json()["hookSpecificOutput"]["permissionDecision"],
                "deny"
            );
        }
        assert!(
            judge(&escalated("apr-9"))
                .reason
                .contains("approval_required: approval apr-9")
        );
    }
}
