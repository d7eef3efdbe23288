//! `toolgate mcp wrap`: a stdio MCP server behind the sidecar.
//!
//! The agent's MCP client starts `toolgate mcp wrap … -- CMD ARGS` instead
//! of the server; the wrapper starts the server as a child and relays
//! newline-delimited JSON-RPC both ways. Two messages are not relayed as
//! they are:
//!
//! - a `tools/call` request is first decided by the sidecar (`SERVER.TOOL`
//!   is the policy tool). A refusal is answered here and never reaches the
//!   server; an unknown tool is JSON-RPC error -32602. An allowed high-risk
//!   call gets its intent recorded and marked effect-sent before it is
//!   forwarded, and completed from the server's answer.
//! - the result of a `tools/list` request keeps only the tools the profile
//!   could allow or escalate (asked of the sidecar; nothing when it cannot
//!   be asked).
//!
//! A line from the agent that is not a JSON object is answered with a
//! JSON-RPC error and not forwarded: what the gateway cannot read, the
//! server must not act on.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::McpError;
use crate::gateway::{CallOutcome, Gateway};
use crate::message::{self, FromClient};
use crate::sidecar::Sidecar;

/// Longest line accepted from the agent or the server.
pub const MAX_LINE_BYTES: usize = 64 << 20;

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
    let uuid = uuid::Uuid::now_v7().to_string();
    toolgate_policy::RunId::parse(&format!("mcp-{uuid}"))
        .unwrap_or_else(|_| toolgate_policy::RunId::derived("mcp", &uuid))
}

/// Requests of the client whose responses the wrapper must see.
#[derive(Debug, Default)]
struct Pending {
    /// `tools/list` request ids (JSON text).
    lists: HashSet<String>,
    /// Forwarded high-risk `tools/call` ids (JSON text) → intent id.
    intents: HashMap<String, String>,
    /// `server/discover` request ids: a result means protocol 2026-07-28.
    discovers: HashSet<String>,
    /// The server answered `server/discover`.
    modern: bool,
}

struct Relay {
    config: WrapConfig,
    gateway: Gateway<Sidecar>,
    pending: Mutex<Pending>,
    to_client: mpsc::UnboundedSender<String>,
    /// Taken (closing the server's stdin) once the client is gone and the
    /// calls in flight are settled.
    to_server: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

fn key(id: &Value) -> String {
    id.to_string()
}

impl Relay {
    fn send_client(&self, message: &Value) {
        let _ = self.to_client.send(message.to_string());
    }

    fn send_server(&self, line: String) {
        if let Some(tx) = self
            .to_server
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(line);
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One line from the agent; a `tools/call` is decided in a task of its
    /// own, returned so the caller can let it settle before closing.
    async fn on_client_line(self: &Arc<Self>, line: String) -> Option<tokio::task::JoinHandle<()>> {
        let message: Value = match serde_json::from_str(&line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                let e = message::error(
                    &Value::Null,
                    message::INVALID_REQUEST,
                    "toolgate: only single JSON-RPC objects are accepted (no batches)",
                );
                self.send_client(&e);
                return None;
            }
            Err(e) => {
                let e = message::error(
                    &Value::Null,
                    message::PARSE_ERROR,
                    &format!("toolgate: not JSON: {e}"),
                );
                self.send_client(&e);
                return None;
            }
        };
        match message::classify(&message) {
            FromClient::CallTool {
                id,
                name,
                arguments,
            } => {
                // Decided concurrently: one call waiting for a human must
                // not hold up the others.
                let gateway = Arc::clone(self);
                return Some(tokio::spawn(async move {
                    gateway.call_tool(line, id, name, arguments).await;
                }));
            }
            FromClient::BadCallTool { id, reason } => {
                self.send_client(&message::error(&id, message::INVALID_PARAMS, &reason));
            }
            FromClient::ListTools { id } => {
                self.pending().lists.insert(key(&id));
                self.send_server(line);
            }
            FromClient::Other => {
                if message.get("method").and_then(Value::as_str) == Some("server/discover")
                    && let Some(id) = message.get("id")
                {
                    self.pending().discovers.insert(key(id));
                }
                self.send_server(line);
            }
        }
        None
    }

    async fn call_tool(
        &self,
        line: String,
        id: Value,
        name: String,
        arguments: serde_json::Map<String, Value>,
    ) {
        let modern = self.pending().modern;
        match self
            .gateway
            .decide_call(&id, &name, &arguments, &self.config.run_id, modern)
            .await
        {
            CallOutcome::Respond(answer) => self.send_client(&answer),
            CallOutcome::Forward { intent } => {
                if let Some(intent) = intent {
                    self.pending().intents.insert(key(&id), intent);
                }
                self.send_server(line);
            }
        }
    }

    /// One line from the server.
    async fn on_server_line(&self, line: String) {
        let Ok(mut message) = serde_json::from_str::<Value>(&line) else {
            // Not ours to judge: the client sees what the server said.
            let _ = self.to_client.send(line);
            return;
        };
        let is_response = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        let Some(id) = message.get("id").filter(|_| is_response).map(key) else {
            let _ = self.to_client.send(line);
            return;
        };
        let (list, intent) = {
            let mut p = self.pending();
            if p.discovers.remove(&id) && message.get("result").is_some() {
                p.modern = true;
            }
            (p.lists.remove(&id), p.intents.remove(&id))
        };
        if list {
            self.gateway.filter_list(&mut message).await;
            return self.send_client(&message);
        }
        if let Some(intent) = intent {
            self.gateway.finish_call(&intent, &message).await;
        }
        let _ = self.to_client.send(line);
    }
}

/// Reads newline-delimited lines of at most [`MAX_LINE_BYTES`]; a longer
/// line ends the stream with an error.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<String>> {
    buf.clear();
    loop {
        let n = (&mut *reader)
            .take((MAX_LINE_BYTES + 1 - buf.len()) as u64)
            .read_until(b'\n', buf)
            .await?;
        if n == 0 {
            return Ok((!buf.is_empty()).then(|| String::from_utf8_lossy(buf).into_owned()));
        }
        if buf.ends_with(b"\n") {
            while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                buf.pop();
            }
            return Ok(Some(String::from_utf8_lossy(buf).into_owned()));
        }
        if buf.len() > MAX_LINE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "line longer than 64 MiB",
            ));
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
        pending: Mutex::new(Pending::default()),
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
            Ok(Some(line)) if line.trim().is_empty() => {}
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
    // The client is gone. Calls still being decided get a moment to settle
    // (one waiting for a human is abandoned), then the server's stdin
    // closes and it exits.
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
