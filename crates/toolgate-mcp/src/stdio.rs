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
use crate::message::{self, FromClient};
use crate::sidecar::Sidecar;

/// Longest line accepted from the agent or the server.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// How the wrapper decides.
#[derive(Debug, Clone)]
pub struct WrapConfig {
    /// MCP server name: the policy tool of its tool `T` is `NAME.T`.
    pub server: String,
    /// Run id every decision is recorded under.
    pub run_id: String,
    /// How long a `tools/call` that needs an approval waits for it before
    /// it is refused with `approval_required`.
    pub approval_wait: Duration,
    /// The sidecar to ask.
    pub sidecar: Sidecar,
}

/// A run id for a wrapper started without one: `mcp-` and a UUIDv7.
pub fn generated_run_id() -> String {
    format!("mcp-{}", uuid::Uuid::now_v7())
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
    /// What the last `tools/list` announced, by MCP tool name.
    definitions: HashMap<String, Definition>,
}

/// One announced tool: its pinnable digest and its argument validator.
#[derive(Clone)]
struct Definition {
    digest: String,
    /// `Err` when the `inputSchema` is missing or unusable: calls are refused.
    validator: Result<Arc<jsonschema::Validator>, String>,
}

impl std::fmt::Debug for Definition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Definition")
            .field("digest", &self.digest)
            .finish()
    }
}

impl Definition {
    fn of(tool: &Value) -> Self {
        let validator = match tool.get("inputSchema") {
            Some(schema) => jsonschema::validator_for(schema)
                .map(Arc::new)
                .map_err(|e| format!("its inputSchema cannot be used: {e}")),
            None => Err("it announced no inputSchema".to_owned()),
        };
        Self {
            digest: message::definition_digest(tool),
            validator,
        }
    }

    /// `Err` with the first problem when `arguments` do not fit the schema.
    fn check(&self, arguments: &serde_json::Map<String, Value>) -> Result<(), String> {
        let validator = self.validator.as_ref().map_err(Clone::clone)?;
        validator
            .validate(&Value::Object(arguments.clone()))
            .map_err(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
    }
}

struct Gateway {
    config: WrapConfig,
    pending: Mutex<Pending>,
    to_client: mpsc::UnboundedSender<String>,
    /// Taken (closing the server's stdin) once the client is gone and the
    /// calls in flight are settled.
    to_server: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

fn key(id: &Value) -> String {
    id.to_string()
}

impl Gateway {
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

    fn refuse(&self, id: &Value, text: String, verdict: Option<&Value>) {
        let modern = self.pending().modern;
        self.send_client(&message::refusal(id, &text, verdict, modern));
    }

    async fn call_tool(
        &self,
        line: String,
        id: Value,
        name: String,
        arguments: serde_json::Map<String, Value>,
    ) {
        let config = &self.config;
        let tool = message::policy_tool(&config.server, &name);
        // Arguments must fit the schema the server announced, before the
        // policy is asked (and never forwarded when they do not).
        let definition = self.pending().definitions.get(&name).cloned();
        if let Some(def) = &definition
            && let Err(problem) = def.check(&arguments)
        {
            return self.refuse(
                &id,
                format!("toolgate: invalid_arguments: {problem}; the call was not made"),
                None,
            );
        }
        let digest = definition.as_ref().map(|d| d.digest.as_str());
        // One step per server: a call retried after its approval is the
        // same invocation, so the approval lets it through (once).
        let step = format!("mcp:{}", config.server);
        let ask = || {
            config
                .sidecar
                .authorize(&tool, &arguments, &config.run_id, &step, digest)
        };
        let mut verdict = match ask().await {
            Ok(v) => v,
            Err(e) => {
                return self.refuse(
                    &id,
                    format!("toolgate: {} ({e}); the call was not made", e.code()),
                    None,
                );
            }
        };
        let field = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
        if field(&verdict, "verdict") == "escalate" && !config.approval_wait.is_zero() {
            let approval = field(&verdict, "approval_id");
            match config
                .sidecar
                .wait_for_approval(&approval, config.approval_wait)
                .await
            {
                Ok(status) if status != "pending" => match ask().await {
                    Ok(v) => verdict = v,
                    Err(e) => {
                        return self.refuse(
                            &id,
                            format!("toolgate: {} ({e}); the call was not made", e.code()),
                            None,
                        );
                    }
                },
                Ok(_) => {}
                Err(e) => {
                    return self.refuse(
                        &id,
                        format!("toolgate: {} ({e}); the call was not made", e.code()),
                        None,
                    );
                }
            }
        }
        let reason = field(&verdict, "reason");
        let decision = field(&verdict, "decision_id");
        match field(&verdict, "verdict").as_str() {
            "allow" => {}
            "deny" if reason == "unknown_tool" => {
                return self.send_client(&message::error(
                    &id,
                    message::INVALID_PARAMS,
                    &format!("Unknown tool: {name}"),
                ));
            }
            "escalate" => {
                let approval = field(&verdict, "approval_id");
                return self.refuse(
                    &id,
                    format!(
                        "toolgate: approval_required: approval {approval} must be approved by a \
                         human; retry the same call afterwards (decision {decision})"
                    ),
                    Some(&verdict),
                );
            }
            _ => {
                let message = field(&verdict, "message");
                let detail = if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                };
                return self.refuse(
                    &id,
                    format!("toolgate: {reason}{detail} (decision {decision})"),
                    Some(&verdict),
                );
            }
        }
        if verdict["intent_required"].as_bool() == Some(true) {
            match config
                .sidecar
                .begin_intent(&verdict, &tool, &config.run_id, &step)
                .await
            {
                Ok(intent) => {
                    self.pending().intents.insert(key(&id), intent);
                }
                Err(e) => {
                    return self.refuse(
                        &id,
                        format!(
                            "toolgate: the intent of this high-risk call could not be recorded \
                             ({}: {e}); the call was not made (decision {decision})",
                            e.code()
                        ),
                        Some(&verdict),
                    );
                }
            }
        }
        self.send_server(line);
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
            let server = &self.config.server;
            let announced: Vec<(String, Definition)> = message::listed_definitions(&message)
                .iter()
                .filter_map(|t| Some((t.get("name")?.as_str()?.to_owned(), Definition::of(t))))
                .collect();
            let names: Vec<String> = announced
                .iter()
                .map(|(n, _)| message::policy_tool(server, n))
                .collect();
            let digests: HashMap<String, String> = announced
                .iter()
                .map(|(n, d)| (message::policy_tool(server, n), d.digest.clone()))
                .collect();
            self.pending().definitions.extend(announced);
            let visible: HashSet<String> = match self.config.sidecar.visible(&names, &digests).await
            {
                Ok(v) => v.into_iter().collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ask which tools to list; listing none");
                    HashSet::new()
                }
            };
            message::filter_tools(&mut message, &self.config.server, &visible);
            return self.send_client(&message);
        }
        if let Some(intent) = intent {
            let failed = message::is_failure(&message);
            let detail = failed.then(|| {
                message
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the tool reported isError")
                    .chars()
                    .take(1024)
                    .collect::<String>()
            });
            if let Err(e) = self
                .config
                .sidecar
                .complete_intent(&intent, failed, detail.as_deref())
                .await
            {
                // The intent stays open and shows up for resume as uncertain.
                tracing::error!(%intent, error = %e, "could not complete the intent");
            }
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
    let gateway = Arc::new(Gateway {
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
        let gateway = Arc::clone(&gateway);
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
                in_flight.extend(gateway.on_client_line(line).await);
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
    gateway
        .to_server
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let status = child.wait().await.map_err(McpError::Process)?;
    let _ = server_writer.await;
    let _ = server_reader.await;
    drop(gateway);
    let _ = client_writer.await;
    Ok(status)
}

/// Awaits every task (aborting none).
async fn futures_join_all(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}
