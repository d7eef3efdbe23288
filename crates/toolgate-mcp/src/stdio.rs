//! `toolgate mcp wrap`: a stdio MCP server behind the sidecar.
//!
//! The agent's MCP client starts `toolgate mcp wrap … -- CMD ARGS` instead
//! of the server; the wrapper starts the server as a child and relays
//! newline-delimited JSON-RPC both ways, every message judged by
//! [`crate::relay`] as the HTTP gateway judges it:
//!
//! - a `tools/call` (and `resources/read`, `prompts/get`, …) is first
//!   decided by the sidecar (`SERVER.TOOL` is the policy tool). A refusal is
//!   answered here and never reaches the server; an unknown tool is
//!   JSON-RPC error -32602. An allowed high-risk call gets its intent
//!   recorded and marked effect-sent before it is forwarded, and completed
//!   from the server's answer.
//! - the result of a `tools/list` request keeps only the tools the profile
//!   could allow or escalate (asked of the sidecar; nothing when it cannot
//!   be asked).
//! - requests go to the server under the gateway's ids; the server's
//!   messages that cannot be read, and answers to nothing forwarded, never
//!   reach the client.
//!
//! A line from the agent that is not a JSON object is answered with a
//! JSON-RPC error and not forwarded: what the gateway cannot read, the
//! server must not act on.

use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::McpError;
use crate::caller_trace::CallerTrace;
use crate::gateway::Gateway;
use crate::message;
use crate::relay::{Answers, ClientStep, Route, ServerStep};
use crate::sidecar::Sidecar;

/// Longest line read from the agent or the server: the gateway reads (and
/// judges) every message, so a longer one is skipped unread.
pub const MAX_LINE_BYTES: usize = crate::relay::MAX_MESSAGE_BYTES;

/// How the wrapper decides.
#[derive(Debug, Clone)]
pub struct WrapConfig {
    /// MCP server name: the policy tool of its tool `T` is `NAME.T`.
    pub server: String,
    /// Run id every decision is recorded under, in its canonical spelling.
    pub run_id: toolgate_policy::RunId,
    /// How long a `tools/call` that needs an approval waits for it before
    /// it is refused with `approval_required`.
    pub approval_wait: Duration,
    /// The sidecar to ask.
    pub sidecar: Sidecar,
}

/// A run id for a wrapper started without one: `mcp-` and a UUIDv7.
pub fn generated_run_id() -> toolgate_policy::RunId {
    toolgate_policy::RunId::fresh("mcp", uuid::Uuid::now_v7())
}

struct Relay {
    config: WrapConfig,
    gateway: Gateway<Sidecar>,
    to_client: mpsc::UnboundedSender<String>,
    /// Taken (closing the server's stdin) once the client is gone and the
    /// calls in flight are settled.
    to_server: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

impl Relay {
    fn send_client(&self, message: &Value) {
        let _ = self.to_client.send(message.to_string());
    }

    fn send_server(&self, message: &Value) {
        if let Some(tx) = self
            .to_server
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(message.to_string());
        }
    }

    /// One line from the agent; a request that waits on a decision is
    /// decided in a task of its own, returned so the caller can let it
    /// settle before closing.
    async fn on_client_line(self: &Arc<Self>, line: Line) -> Option<tokio::task::JoinHandle<()>> {
        let parsed = match line {
            Line::Text(text) => serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()),
            Line::TooLong => Err(format!("a line longer than {MAX_LINE_BYTES} bytes")),
        };
        let message = match parsed {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                self.send_client(&message::error(
                    &Value::Null,
                    message::INVALID_REQUEST,
                    "toolgate: only single JSON-RPC objects are accepted (no batches)",
                ));
                return None;
            }
            Err(e) => {
                self.send_client(&message::error(
                    &Value::Null,
                    message::PARSE_ERROR,
                    &format!("toolgate: not JSON: {e}"),
                ));
                return None;
            }
        };
        let concurrent = message::waits_on_a_decision(&message);
        let caller = CallerTrace::of_message(&message);
        let relay = Arc::clone(self);
        let step = caller.scope(async move {
            let route = Route {
                run_id: &relay.config.run_id,
                session: None,
                modern: relay.gateway.server_is_modern(),
            };
            match relay.gateway.from_client(message, route).await {
                ClientStep::Answer(answer) => relay.send_client(&answer),
                ClientStep::Forward { message, .. } => relay.send_server(&message),
                ClientStep::Nothing => {}
                ClientStep::Defer { answer, call } => {
                    relay.send_client(&answer);
                    // Waits on a human: apart, so this line's task ends.
                    let relay = Arc::clone(&relay);
                    tokio::spawn(async move {
                        let client_here = || {
                            let open = relay
                                .to_server
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .is_some();
                            open.then_some(())
                                .ok_or_else(|| "the client has gone".to_owned())
                        };
                        if let Some(message) = relay.gateway.run_deferred(call, client_here).await {
                            relay.send_server(&message);
                        }
                    });
                }
            }
        });
        // Decided concurrently: one call waiting for a human must not hold
        // up the others. Everything else keeps its order.
        if concurrent {
            Some(tokio::spawn(step))
        } else {
            step.await;
            None
        }
    }

    /// One line from the server.
    async fn on_server_line(&self, line: Line) {
        let raw = match &line {
            Line::Text(text) => text.as_bytes(),
            Line::TooLong => {
                // Whatever it answered, no call is made against an older list.
                tracing::warn!(server = %self.config.server, "a line longer than {MAX_LINE_BYTES} bytes from the server was skipped unread");
                self.gateway.forget_definitions();
                return;
            }
        };
        match self
            .gateway
            .from_server(raw, &self.config.run_id, Answers::Any)
            .await
        {
            ServerStep::ToClient(message) => self.send_client(&message),
            ServerStep::ToServer(answer) => self.send_server(&answer),
            ServerStep::Drop(why) => {
                tracing::warn!(server = %self.config.server, %why, "a message from the server was not passed on");
            }
            ServerStep::Kept => {}
        }
    }
}

/// One line read: its text, or the mark of a line skipped for its length.
enum Line {
    Text(String),
    TooLong,
}

/// Reads newline-delimited lines; a line longer than [`MAX_LINE_BYTES`] is
/// read through and dropped (never held whole), the reading goes on.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<Line>> {
    buf.clear();
    let mut too_long = false;
    loop {
        let n = (&mut *reader)
            .take((MAX_LINE_BYTES + 1 - buf.len()) as u64)
            .read_until(b'\n', buf)
            .await?;
        if n == 0 {
            if too_long {
                return Ok(Some(Line::TooLong));
            }
            return Ok(
                (!buf.is_empty()).then(|| Line::Text(String::from_utf8_lossy(buf).into_owned()))
            );
        }
        if buf.ends_with(b"\n") {
            if too_long {
                return Ok(Some(Line::TooLong));
            }
            while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                buf.pop();
            }
            return Ok(Some(Line::Text(String::from_utf8_lossy(buf).into_owned())));
        }
        if buf.len() > MAX_LINE_BYTES {
            too_long = true;
            buf.clear();
        }
    }
}

/// Runs `program args` as the MCP server behind the gateway, relaying this
/// process's stdin/stdout, until the client closes stdin and the server
/// exits. Returns the server's exit status.
pub async fn wrap(
    config: WrapConfig,
    program: OsString,
    args: Vec<OsString>,
) -> Result<ExitStatus, McpError> {
    let mut child = tokio::process::Command::new(&program)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(McpError::Process)?;
    let mut server_in = child.stdin.take().expect("piped stdin");
    let server_out = child.stdout.take().expect("piped stdout");

    let (to_client, mut client_rx) = mpsc::unbounded_channel::<String>();
    let (to_server, mut server_rx) = mpsc::unbounded_channel::<String>();
    let relay = Arc::new(Relay {
        gateway: Gateway::new(
            config.server.clone(),
            config.approval_wait,
            config.sidecar.clone(),
        ),
        config,
        to_client,
        to_server: Mutex::new(Some(to_server)),
    });

    let client_writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(line) = client_rx.recv().await {
            if out.write_all(line.as_bytes()).await.is_err()
                || out.write_all(b"\n").await.is_err()
                || out.flush().await.is_err()
            {
                break;
            }
        }
    });
    let server_writer = tokio::spawn(async move {
        while let Some(line) = server_rx.recv().await {
            if server_in.write_all(line.as_bytes()).await.is_err()
                || server_in.write_all(b"\n").await.is_err()
                || server_in.flush().await.is_err()
            {
                break;
            }
        }
        // Dropping `server_in` closes the server's stdin.
    });
    let server_reader = {
        let gateway = Arc::clone(&relay);
        tokio::spawn(async move {
            let mut reader = BufReader::new(server_out);
            let mut buf = Vec::new();
            while let Ok(Some(line)) = next_line(&mut reader, &mut buf).await {
                gateway.on_server_line(line).await;
            }
        })
    };

    let mut in_flight: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut buf = Vec::new();
    loop {
        match next_line(&mut stdin, &mut buf).await {
            Ok(Some(Line::Text(line))) if line.trim().is_empty() => {}
            Ok(Some(line)) => {
                in_flight.retain(|t| !t.is_finished());
                in_flight.extend(relay.on_client_line(line).await);
            }
            Ok(None) => break,
            Err(e) => {
                tracing::error!(error = %e, "reading the client failed; closing");
                break;
            }
        }
    }
    // The client is gone. Calls held as tasks have no one to read them;
    // calls still being decided get a moment to settle (one waiting for a
    // human is abandoned), then the server's stdin closes and it exits.
    relay.gateway.close_tasks();
    let settle = futures_join_all(in_flight);
    let _ = tokio::time::timeout(Duration::from_secs(5), settle).await;
    relay
        .to_server
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let status = child.wait().await.map_err(McpError::Process)?;
    let _ = server_writer.await;
    let _ = server_reader.await;
    drop(relay);
    let _ = client_writer.await;
    Ok(status)
}

/// Awaits every task (aborting none).
async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}
