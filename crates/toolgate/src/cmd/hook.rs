//! `toolgate hook pre-tool-use [--format F]`: an agent runner's pre-tool
//! command hook, as a thin client of the sidecar's `POST /v1/hooks/F`.
//!
//! The runner pipes its hook input on stdin; it is posted as it is to the
//! sidecar at `$TOOLGATE_URL`, which reads it, decides the call as
//! `/v1/authorize` would and answers in the runner's own output
//! (`toolgate_contract::hooks`). The hook prints that body and ends with
//! the exit code the format gives it: for Claude Code, Codex and Gemini a
//! deny exits 2 (the code they block on); Cursor and Copilot read the
//! decision from the JSON and get exit 0 (Copilot *skips* a hook that
//! exits non-zero, so its deny must not).
//!
//! Everything that is not a readable answer from the sidecar — no
//! `$TOOLGATE_URL`, a sidecar that is down, an error status, a body that is
//! not an answer in this format, a panic — is rendered here as a deny in
//! the runner's format with the exit code that runner honours: hook
//! runners treat any other failure as non-blocking, which would fail open.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use toolgate_contract::hooks::{Answer, Event, Format, Rendered};

use crate::cli_error::CliError;

/// Largest hook input read from stdin (the sidecar takes less, and denies
/// what is larger).
const MAX_INPUT_BYTES: u64 = 4 << 20;

/// Arguments of `toolgate hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    #[command(subcommand)]
    command: HookCommand,
}

#[derive(Debug, Subcommand)]
enum HookCommand {
    /// Decide one tool call before it runs (a runner's pre-tool hook).
    PreToolUse(PreToolUseArgs),
}

#[derive(Debug, Args)]
struct PreToolUseArgs {
    /// The runner whose hook this is: its input is read and its answer
    /// written in that runner's format.
    #[arg(long, default_value = "claude-code", value_parser = parse_format)]
    format: Format,
    /// The sidecar's agent API.
    #[arg(long, env = toolgate_contract::env::URL)]
    url: Option<String>,
    /// Seconds to wait for a human to answer an escalation before
    /// answering (0: answer at once, naming the approval; the sidecar waits
    /// at most 60).
    #[arg(long, default_value_t = 0)]
    approval_wait: u64,
    /// Seconds one request to the sidecar may take (besides the wait).
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::parse(name).ok_or_else(|| {
        let names: Vec<_> = Format::ALL.iter().map(|f| f.name()).collect();
        format!("unknown hook format {name:?} (one of {})", names.join(", "))
    })
}

/// Runs `toolgate hook …`.
pub fn run(args: HookArgs) -> Result<ExitCode, CliError> {
    match args.command {
        HookCommand::PreToolUse(args) => {
            // A panic blocks too, in the runner's format.
            let rendered = std::panic::catch_unwind(|| pre_tool_use(&args)).unwrap_or_else(|_| {
                let answer = Answer::deny("toolgate hook failed unexpectedly; blocking the call");
                args.format.render(Event::PreToolUse, &answer)
            });
            let _ = writeln!(std::io::stdout().lock(), "{}", rendered.body);
            if let Some(text) = &rendered.stderr {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
            Ok(ExitCode::from(rendered.exit_code))
        }
    }
}

fn pre_tool_use(args: &PreToolUseArgs) -> Rendered {
    let format = args.format;
    let mut input = Vec::new();
    let read = std::io::stdin()
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut input);
    let event = format.event_of(&input);
    let deny = |reason: String| format.render(event, &Answer::deny(reason));
    if let Err(e) = read {
        return deny(format!("toolgate: cannot read the hook input: {e}"));
    }
    if input.len() as u64 > MAX_INPUT_BYTES {
        return deny("toolgate: hook input larger than 4 MiB".into());
    }
    let Some(url) = args.url.as_deref().filter(|u| !u.is_empty()) else {
        return deny(
            "toolgate: TOOLGATE_URL is not set; no sidecar to ask, so the call is blocked".into(),
        );
    };
    let runtime = match crate::runtime() {
        Ok(rt) => rt,
        Err(e) => return deny(format!("toolgate: {e}")),
    };
    match runtime.block_on(ask(url.trim_end_matches('/'), input, args)) {
        Ok(rendered) => rendered,
        Err(why) => deny(format!("toolgate: {why}; the call is blocked")),
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

/// Posts the input to the sidecar; its answer, once read as this format's,
/// or why there is none.
async fn ask(url: &str, input: Vec<u8>, args: &PreToolUseArgs) -> Result<Rendered, String> {
    let wait = args
        .approval_wait
        .min(toolgate_contract::agent_api::MAX_WAIT_SECONDS);
    let timeout =
        Duration::from_secs(args.timeout.max(1)).saturating_add(Duration::from_secs(wait));
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .default_headers(trace_headers())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let endpoint = format!("{url}/v1/hooks/{}?wait={wait}", args.format.name());
    let response = client
        .post(&endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(input)
        .send()
        .await
        .map_err(|e| {
            format!("sidecar_unreachable: the sidecar at {url} could not be asked: {e}")
        })?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("sidecar_unreachable: the sidecar's answer broke off: {e}"))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        return Err(format!("the sidecar answered {status}: {text}"));
    }
    serde_json::from_slice(&body)
        .ok()
        .and_then(|v| args.format.read_output(&v))
        .ok_or_else(|| {
            format!(
                "the sidecar's answer is not a {} hook answer",
                args.format.name()
            )
        })
}
