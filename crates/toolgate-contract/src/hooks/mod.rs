//! Hook wire formats of the agent runners toolgate governs, free of any
//! transport: read a runner's pre-tool hook input into the call toolgate
//! decides ([`HookCall`]), and write an answer ([`Answer`]) back as that
//! runner's documented output, with the exit code a command hook must use
//! ([`Rendered`]). The sidecar serves them at `POST /v1/hooks/{format}`;
//! `toolgate hook pre-tool-use --format F` relays them.
//!
//! Every format is read strictly where it matters (the tool, its
//! arguments, the session) and leniently elsewhere: fields a runner adds
//! later are ignored. Whatever cannot be read is a [`HookError`], which the
//! caller answers with a deny *in the runner's format*: a runner that gets
//! an error status or an unreadable body treats the hook as non-blocking,
//! so anything but a rendered deny fails open.

use std::fmt;

use serde_json::{Map, Value};

use crate::agent_api::AuthorizeResponse;

mod claude_code;
mod codex;
mod copilot;
mod cursor;
mod gemini;

/// A runner's hook format, named in `/v1/hooks/{format}` and `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Claude Code `PreToolUse` and `PermissionRequest` hooks.
    ClaudeCode,
    /// OpenAI Codex CLI `PreToolUse` hooks (`.codex/hooks.json`).
    Codex,
    /// Gemini CLI `BeforeTool` hooks.
    Gemini,
    /// Cursor `beforeShellExecution`, `beforeMCPExecution`, `preToolUse`.
    Cursor,
    /// GitHub Copilot CLI `preToolUse` hooks (`.github/hooks/*.json`).
    Copilot,
}

/// The hook event an input came from, where a runner's output differs by
/// event (Claude Code's `PermissionRequest` answers in another shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Before a tool runs (every format's main event).
    PreToolUse,
    /// Claude Code's permission dialog is about to be shown.
    PermissionRequest,
}

/// The run every hook call without a session id belongs to: each call is
/// its own process or request, so only a fixed name groups them.
pub const SESSIONLESS_RUN: &str = "hook";

/// What a hook input names: the call toolgate decides.
#[derive(Debug, Clone, PartialEq)]
pub struct HookCall {
    /// The event the input came from.
    pub event: Event,
    /// The policy tool: the runner's own name (profiles alias it), an MCP
    /// tool as `SERVER.TOOL` like toolgate's MCP gateway names it.
    pub tool: String,
    /// The tool's arguments.
    pub arguments: Map<String, Value>,
    /// The runner's session id, unchecked: the run id once the sidecar has
    /// read it (`invalid_run_id` when it is none); `None`: the run
    /// [`SESSIONLESS_RUN`].
    pub run_id: Option<String>,
    /// The input field `run_id` came from, for error messages.
    pub run_field: &'static str,
    /// The runner's id of this attempt (`tool_use_id`, …). Logged only: a
    /// call retried after its approval carries a new one, and the approval
    /// binds to run, tool and arguments, not to an attempt.
    pub step_id: Option<String>,
}

/// Why a hook input cannot be decided. Every kind is the agent API's
/// `invalid_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookError {
    /// Not JSON at all.
    NotJson(String),
    /// JSON, but not an object.
    NotObject,
    /// A field the format requires is absent or empty.
    Missing(&'static str),
    /// A field of the wrong type.
    WrongType {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// An event this format does not decide (an after-tool hook, say).
    UnsupportedEvent(String),
}

impl HookError {
    /// The agent API's stable code of every hook input error.
    pub fn code(&self) -> &'static str {
        crate::errors::INVALID_REQUEST
    }
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson(e) => write!(f, "hook input is not JSON: {e}"),
            Self::NotObject => f.write_str("hook input is not a JSON object"),
            Self::Missing(field) => write!(f, "hook input has no {field}"),
            Self::WrongType { field, expected } => write!(f, "{field} must be {expected}"),
            Self::UnsupportedEvent(e) => {
                let e: String = e.chars().take(64).collect();
                write!(f, "hook event {e:?} is not one toolgate decides")
            }
        }
    }
}

impl std::error::Error for HookError {}

/// What toolgate answers a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The call may run.
    Allow,
    /// The call must not run.
    Deny,
    /// The call waits for a human: it must not run now.
    Escalated,
}

/// An answer to render: the verdict, and the text the agent and its user
/// are shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, naming the decision (for an escalation: how to approve it).
    pub reason: String,
    /// A warn-mode notice carried by an allow.
    pub warning: Option<String>,
}

impl Answer {
    /// A deny for `reason` (every failure to decide ends here).
    pub fn deny(reason: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            reason: reason.into(),
            warning: None,
        }
    }

    /// The answer to a decision as `/v1/authorize` gives it.
    pub fn from_response(response: &AuthorizeResponse) -> Self {
        let text = |key: &str| {
            response
                .verdict
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (reason, decision) = (text("reason"), &response.decision_id);
        let warning = response
            .verdict
            .get("warning")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match text("verdict") {
            "allow" => Self {
                verdict: Verdict::Allow,
                reason: match &warning {
                    Some(w) => format!("toolgate: allow ({reason}, decision {decision}); {w}"),
                    None => format!("toolgate: allow ({reason}, decision {decision})"),
                },
                warning,
            },
            "escalate" => Self {
                verdict: Verdict::Escalated,
                reason: approval_hint(
                    response.approval_id.as_deref().unwrap_or_default(),
                    decision,
                ),
                warning: None,
            },
            // A deny, and any verdict this build does not know.
            _ => Self::deny(format!("toolgate: deny ({reason}, decision {decision})")),
        }
    }
}

/// How an escalated call is approved, for the agent and its user: the
/// approval id, the commands that approve it, and that the same call
/// retried afterwards passes once.
pub fn approval_hint(approval_id: &str, decision_id: &str) -> String {
    // Approval ids are UUIDs, already valid object names: the Approval
    // object is the id behind the `apr-` prefix.
    let k8s = if !approval_id.is_empty()
        && approval_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        format!("in Kubernetes: `kubectl toolgate approve apr-{approval_id}`; ")
    } else {
        String::new()
    };
    format!(
        "toolgate: approval_required: approval {approval_id} must be approved by a human \
         ({k8s}for a local sidecar: `toolgate approvals approve {approval_id} --database \
         <the sidecar's --database> --by <you>`); retry the same call afterwards \
         (decision {decision_id})"
    )
}

/// An answer in a runner's format.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The JSON a command hook prints on stdout (an HTTP hook's body).
    pub body: Value,
    /// The exit code a command hook must end with.
    pub exit_code: u8,
    /// What a command hook prints on stderr (runners show it on exit 2).
    pub stderr: Option<String>,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 5] = [
        Self::ClaudeCode,
        Self::Codex,
        Self::Gemini,
        Self::Cursor,
        Self::Copilot,
    ];

    /// The format named `name` (`claude-code`, `codex`, …).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The format's name in URLs and flags.
    pub fn name(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Cursor => "cursor",
            Self::Copilot => "copilot",
        }
    }

    /// Reads a hook input.
    pub fn parse_input(self, input: &[u8]) -> Result<HookCall, HookError> {
        let value: Value =
            serde_json::from_slice(input).map_err(|e| HookError::NotJson(e.to_string()))?;
        let obj = value.as_object().ok_or(HookError::NotObject)?;
        match self {
            Self::ClaudeCode => claude_code::parse(obj),
            Self::Codex => codex::parse(obj),
            Self::Gemini => gemini::parse(obj),
            Self::Cursor => cursor::parse(obj),
            Self::Copilot => copilot::parse(obj),
        }
    }

    /// The event of an input, read as far as it can be (an input that
    /// cannot be decided is still answered in its event's shape).
    pub fn event_of(self, input: &[u8]) -> Event {
        let event = serde_json::from_slice::<Value>(input)
            .ok()
            .and_then(|v| v.get("hook_event_name")?.as_str().map(str::to_owned));
        match (self, event.as_deref()) {
            (Self::ClaudeCode, Some("PermissionRequest")) => Event::PermissionRequest,
            _ => Event::PreToolUse,
        }
    }

    /// `answer` as this runner reads it.
    pub fn render(self, event: Event, answer: &Answer) -> Rendered {
        match self {
            Self::ClaudeCode => claude_code::render(event, answer),
            Self::Codex => codex::render(answer),
            Self::Gemini => gemini::render(answer),
            Self::Cursor => cursor::render(answer),
            Self::Copilot => copilot::render(answer),
        }
    }

    /// What `body`, a rendered answer (the sidecar's), means to this runner:
    /// its exit code and stderr. `None` when the body is not an answer in
    /// this format, which the caller turns into a deny.
    pub fn read_output(self, body: &Value) -> Option<Rendered> {
        let answer = match self {
            Self::ClaudeCode => claude_code::read(body)?,
            Self::Codex => codex::read(body)?,
            Self::Gemini => gemini::read(body)?,
            Self::Cursor => cursor::read(body)?,
            Self::Copilot => copilot::read(body)?,
        };
        let event = match self {
            Self::ClaudeCode => claude_code::event_of_output(body),
            _ => Event::PreToolUse,
        };
        let mut rendered = self.render(event, &answer);
        // Relay the body as the sidecar wrote it; only the exit code and
        // stderr come from reading it.
        rendered.body = body.clone();
        Some(rendered)
    }
}

/// A reason field of an output: present, a string.
pub(crate) fn reason_of(body: &Value, key: &str) -> String {
    body.get(key)
        .and_then(Value::as_str)
        .unwrap_or("toolgate: no reason given")
        .to_owned()
}

/// A string field: present and not empty.
pub(crate) fn text<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// An optional string field: absent, null or a string; anything else is
/// refused (a session id of the wrong type must not become "no session").
pub(crate) fn opt_text<'a>(
    obj: &'a Map<String, Value>,
    key: &'static str,
) -> Result<Option<&'a str>, HookError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(HookError::WrongType {
            field: key,
            expected: "a string",
        }),
    }
}

/// Tool arguments: an object, or absent/null (no arguments). With
/// `json_text`, a string holding a JSON object is read too (Cursor's MCP
/// input and Copilot's `toolArgs` carry the arguments as text).
pub(crate) fn arguments(
    obj: &Map<String, Value>,
    key: &'static str,
    json_text: bool,
) -> Result<Map<String, Value>, HookError> {
    let wrong = || HookError::WrongType {
        field: key,
        expected: "a JSON object",
    };
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(Value::String(s)) if json_text => match serde_json::from_str(s) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(wrong()),
        },
        Some(_) => Err(wrong()),
    }
}

/// The policy name of an MCP tool that a runner calls `mcp__SERVER__TOOL`:
/// `SERVER.TOOL`, the name toolgate's MCP gateway gives it, so one profile
/// governs a server whichever way its calls come. Other names are kept.
pub(crate) fn mcp_policy_name(name: &str) -> String {
    match name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        Some((server, tool)) if !server.is_empty() && !tool.is_empty() => {
            format!("{server}.{tool}")
        }
        _ => name.to_owned(),
    }
}

/// The fields of the Claude-Code-compatible inputs (Claude Code, Codex,
/// Gemini): `tool_name`, `tool_input`, `session_id`, `tool_use_id`.
pub(crate) fn claude_like(obj: &Map<String, Value>, event: Event) -> Result<HookCall, HookError> {
    let tool = text(obj, "tool_name").ok_or(HookError::Missing("tool_name"))?;
    Ok(HookCall {
        event,
        tool: mcp_policy_name(tool),
        arguments: arguments(obj, "tool_input", false)?,
        run_id: opt_text(obj, "session_id")?.map(str::to_owned),
        run_field: "session_id",
        step_id: opt_text(obj, "tool_use_id")?.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests;
