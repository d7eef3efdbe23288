//! The MCP gateway over streamable HTTP: `/mcp/{server}` on the agent
//! listener forwards to the upstream MCP server configured for `server`
//! (`--mcp-upstream NAME=URL`), with every `tools/call` decided by this
//! sidecar first and every `tools/list` filtered (see `toolgate_mcp::gateway`).
//!
//! - The upstream's address must pass the held profile's egress rules (the
//!   same check as a NETWORK_* tool naming it); otherwise 403
//!   `mcp_upstream_not_allowed`.
//! - Run id: the `X-Toolgate-Run-Id` header (a run id, or the request is
//!   400 `invalid_run_id`), else the MCP session as `mcp-session-` and a
//!   digest of `Mcp-Session-Id` (session ids are opaque and may hold any
//!   visible character), else one per upstream for this sidecar's life.
//! - Protocol 2026-07-28: `Mcp-Method` / `Mcp-Name` headers must match the
//!   body (JSON-RPC error -32020 otherwise), and refusals carry
//!   `resultType: "complete"`.
//! - Responses arrive as JSON or as an SSE stream; in both, the answer to a
//!   `tools/list` is filtered and the answer to a high-risk `tools/call`
//!   closes its intent. Everything else passes through unchanged.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use toolgate_mcp::McpError;
use toolgate_mcp::gateway::{CallOutcome, Decider, Gateway, ToolCall, intent_id};
use toolgate_mcp::message::{self, FromClient};

use crate::api::{self, AppState, AuthorizeRequest};
use crate::error::ApiError;

/// JSON-RPC: a request header contradicts the body (protocol 2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;
/// Largest request body forwarded.
const MAX_BODY_BYTES: usize = 16 << 20;
/// Request headers passed to the upstream (everything else, `Host` and
/// `Origin` included, stays here).
const FORWARDED_REQUEST_HEADERS: [&str; 6] = [
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "authorization",
];
/// Response headers passed back to the agent.
const FORWARDED_RESPONSE_HEADERS: [&str; 4] = [
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "cache-control",
];

/// One configured upstream and its gateway.
pub struct Upstream {
    url: String,
    default_run: toolgate_policy::RunId,
    gateway: Gateway<InProcess>,
}

/// Every configured upstream, by server name.
pub struct McpUpstreams {
    servers: HashMap<String, Arc<Upstream>>,
    http: reqwest::Client,
}

impl McpUpstreams {
    /// The upstreams `NAME=URL`, deciding through `app` (the sidecar's own
    /// state, not yet built: hence the weak reference).
    pub(crate) fn new(upstreams: &[(String, String)], app: Weak<AppState>) -> Self {
        let servers = upstreams
            .iter()
            .map(|(name, url)| {
                let upstream = Upstream {
                    url: url.clone(),
                    default_run: default_run(name),
                    gateway: Gateway::new(
                        name.clone(),
                        Duration::ZERO,
                        InProcess { app: app.clone() },
                    ),
                };
                (name.clone(), Arc::new(upstream))
            })
            .collect();
        Self {
            servers,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
        }
    }

    /// Whether any upstream is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// Decides through this sidecar's own paths (no HTTP round trip).
pub(crate) struct InProcess {
    app: Weak<AppState>,
}

impl InProcess {
    fn app(&self) -> Result<Arc<AppState>, McpError> {
        self.app
            .upgrade()
            .ok_or_else(|| McpError::Sidecar("shutting down".into()))
    }
}

fn refused(e: ApiError) -> McpError {
    McpError::Refused {
        code: e.code().to_owned(),
        message: e.to_string(),
    }
}

async fn json_of(response: Response) -> Result<Value, McpError> {
    let bytes = axum::body::to_bytes(response.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(|e| McpError::Sidecar(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| McpError::Sidecar(e.to_string()))
}

impl Decider for InProcess {
    async fn authorize(&self, call: ToolCall<'_>) -> Result<Value, McpError> {
        let app = self.app()?;
        let request = AuthorizeRequest {
            tool: call.tool.to_owned(),
            action: None,
            arguments: call.arguments.clone(),
            run_id: call.run_id.clone(),
            step_id: Some(call.step_id.to_owned()),
            tenant: None,
            definition_digest: call.definition_digest.map(str::to_owned),
        };
        let answer = api::authorize_call(&app, &request).await.map_err(refused)?;
        serde_json::to_value(answer).map_err(|e| McpError::Sidecar(e.to_string()))
    }

    async fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        let app = self.app()?;
        Ok(api::visible_of(&app, tools, definitions))
    }

    async fn begin_intent(&self, verdict: &Value, call: ToolCall<'_>) -> Result<String, McpError> {
        let app = self.app()?;
        let text = |k: &str| verdict[k].as_str().unwrap_or_default().to_owned();
        let request = api::BeginIntentRequest {
            decision_id: text("decision_id"),
            run_id: call.run_id.clone(),
            step_id: call.step_id.to_owned(),
            tool: call.tool.to_owned(),
            args_digest: text("args_digest"),
            call_digest: verdict["call_digest"].as_str().map(str::to_owned),
            verification_probe: None,
        };
        let response = api::begin_intent(State(app.clone()), api::StrictJson(request))
            .await
            .map_err(refused)?;
        let id = intent_id(&json_of(response).await?)?;
        let _sent = api::effect_sent(State(app), Path(id.clone()), Bytes::new())
            .await
            .map_err(refused)?;
        Ok(id)
    }

    async fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> Result<(), McpError> {
        let outcome = if failed {
            toolgate_store::IntentOutcome::Error
        } else {
            toolgate_store::IntentOutcome::Completed
        };
        api::complete_intent(
            State(self.app()?),
            Path(id.to_owned()),
            api::StrictJson(api::CompleteRequest {
                outcome,
                detail: detail.map(str::to_owned),
            }),
        )
        .await
        .map(|_| ())
        .map_err(refused)
    }

    async fn wait_for_approval(&self, id: &str, wait: Duration) -> Result<String, McpError> {
        let app = self.app()?;
        let approval = app
            .store
            .approvals()
            .wait(
                &app.tenant,
                id,
                wait.min(Duration::from_secs(api::MAX_WAIT_SECONDS)),
            )
            .await
            .map_err(|e| refused(e.into()))?;
        Ok(approval.status.as_str().to_owned())
    }
}

/// Headers of the agent's request that the upstream gets.
fn forward_headers(from: &HeaderMap) -> reqwest::header::HeaderMap {
    let mut out = reqwest::header::HeaderMap::new();
    for name in FORWARDED_REQUEST_HEADERS {
        for value in from.get_all(name) {
            if let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_bytes(value.as_bytes()),
            ) {
                out.append(n, v);
            }
        }
    }
    out
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `mcp-<server>-<uuid v7>`: a server name is 1-64 of `A-Za-z0-9_-`, so
/// this is a run id (the digest form only if that ever changes).
fn default_run(server: &str) -> toolgate_policy::RunId {
    let uuid = uuid::Uuid::now_v7();
    toolgate_policy::RunId::parse(&format!("mcp-{server}-{uuid}"))
        .unwrap_or_else(|_| toolgate_policy::RunId::derived("mcp", &format!("{server}/{uuid}")))
}

/// The run of a request: `X-Toolgate-Run-Id` (present but not a run id,
/// not even readable text, is refused), else the session's derived run,
/// else the upstream's.
fn request_run(
    headers: &HeaderMap,
    upstream: &Upstream,
) -> Result<toolgate_policy::RunId, ApiError> {
    if let Some(value) = headers.get("x-toolgate-run-id") {
        let text = value.to_str().map_err(|_| {
            ApiError::InvalidRunId("X-Toolgate-Run-Id: run ids are ASCII text".into())
        })?;
        return api::run_id(text);
    }
    Ok(match header(headers, "mcp-session-id") {
        Some(session) => toolgate_policy::RunId::derived("mcp-session", session),
        None => upstream.default_run.clone(),
    })
}

/// A JSON-RPC message answered directly by the gateway.
fn answer(message: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

/// What the gateway must do with the upstream's answer to one request.
enum Follow {
    /// Pass it through.
    Nothing,
    /// Filter the `tools/list` answer with this id.
    List(Value),
    /// Close this intent from the `tools/call` answer with this id.
    Finish(Value, String),
}

/// `GET|POST|DELETE /mcp/{server}`.
pub(crate) async fn proxy(
    State(app): State<Arc<AppState>>,
    Path(server): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let upstream = app
        .mcp
        .servers
        .get(&server)
        .cloned()
        .ok_or_else(|| ApiError::McpUnknownServer(api::truncate(&server, 64).to_owned()))?;
    match app.policy.current() {
        Some(e) if jiff::Timestamp::now() < e.expires_at => {
            if let Some(reason) = e.policy.egress_refusal(&upstream.url) {
                return Err(ApiError::McpUpstreamNotAllowed(format!(
                    "{server}: {} ({})",
                    upstream.url,
                    reason.as_str()
                )));
            }
        }
        _ => {
            return Err(ApiError::McpUpstreamNotAllowed(
                "no live policy bundle to check the upstream with".into(),
            ));
        }
    }
    let run_id = request_run(&headers, &upstream)?;
    let modern = header(&headers, "mcp-protocol-version").is_some_and(|v| v >= "2026-07-28");

    let mut follow = Follow::Nothing;
    if method == Method::POST {
        let message: Value = match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return Ok(answer(&message::error(
                    &Value::Null,
                    message::INVALID_REQUEST,
                    "toolgate: only single JSON-RPC objects are accepted (no batches)",
                )));
            }
            Err(e) => {
                return Ok(answer(&message::error(
                    &Value::Null,
                    message::PARSE_ERROR,
                    &format!("toolgate: not JSON: {e}"),
                )));
            }
        };
        if let Some(mismatch) = header_mismatch(&headers, &message) {
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            return Ok(answer(&message::error(&id, HEADER_MISMATCH, &mismatch)));
        }
        match message::classify(&message) {
            FromClient::CallTool {
                id,
                name,
                arguments,
            } => {
                match upstream
                    .gateway
                    .decide_call(&id, &name, &arguments, &run_id, modern)
                    .await
                {
                    CallOutcome::Respond(refusal) => return Ok(answer(&refusal)),
                    CallOutcome::Forward {
                        intent: Some(intent),
                    } => follow = Follow::Finish(id, intent),
                    CallOutcome::Forward { intent: None } => {}
                }
            }
            FromClient::BadCallTool { id, reason } => {
                return Ok(answer(&message::error(
                    &id,
                    message::INVALID_PARAMS,
                    &reason,
                )));
            }
            FromClient::ListTools { id } => follow = Follow::List(id),
            FromClient::Other => {}
        }
    }

    let started = Instant::now();
    let sent = app
        .mcp
        .http
        .request(method, &upstream.url)
        .headers(forward_headers(&headers))
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            app.metrics
                .mcp_upstream_errors
                .with_label_values(&[upstream.gateway.server()])
                .inc();
            // A forwarded high-risk call whose effect may or may not have
            // happened stays open: resume shows it as uncertain.
            return Err(ApiError::McpUpstream(e.to_string()));
        }
    };
    app.metrics
        .mcp_forward_seconds
        .with_label_values(&[upstream.gateway.server()])
        .observe(started.elapsed().as_secs_f64());
    if response.status().is_server_error() {
        app.metrics
            .mcp_upstream_errors
            .with_label_values(&[upstream.gateway.server()])
            .inc();
    }
    relay(upstream, response, follow).await
}

/// `Mcp-Method` / `Mcp-Name` that contradict the body.
fn header_mismatch(headers: &HeaderMap, message: &Value) -> Option<String> {
    let method = message.get("method").and_then(Value::as_str);
    if let Some(h) = header(headers, "mcp-method")
        && Some(h) != method
    {
        return Some(format!(
            "Mcp-Method header `{h}` does not match the body's method"
        ));
    }
    let name = message
        .pointer("/params/name")
        .or_else(|| message.pointer("/params/uri"))
        .and_then(Value::as_str);
    if let Some(h) = header(headers, "mcp-name")
        && Some(h) != name
    {
        return Some(format!("Mcp-Name header `{h}` does not match the body"));
    }
    None
}

/// The upstream's answer, with the followed response (if any) processed.
async fn relay(
    upstream: Arc<Upstream>,
    response: reqwest::Response,
    follow: Follow,
) -> Result<Response, ApiError> {
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for name in FORWARDED_RESPONSE_HEADERS {
        if let Some(v) = response.headers().get(name)
            && let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(v.as_bytes()),
            )
        {
            headers.insert(n, v);
        }
    }
    let is_sse = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if matches!(follow, Follow::Nothing) {
        let stream = response.bytes_stream();
        return Ok((status, headers, Body::from_stream(stream)).into_response());
    }
    if !is_sse {
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ApiError::McpUpstream(e.to_string()))?;
        let body = match serde_json::from_slice::<Value>(&bytes) {
            Ok(mut message) => {
                process(&upstream, &follow, &mut message).await;
                Bytes::from(message.to_string())
            }
            Err(_) => bytes,
        };
        return Ok((status, headers, body).into_response());
    }
    // An SSE stream: events are relayed as they come, the followed answer
    // processed on its way through.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut response = response;
        let mut pending = Vec::<u8>::new();
        let mut follow = follow;
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            };
            pending.extend_from_slice(&chunk);
            while let Some(end) = event_end(&pending) {
                let event: Vec<u8> = pending.drain(..end).collect();
                let out = process_event(&upstream, &mut follow, event).await;
                if tx.send(Ok(Bytes::from(out))).await.is_err() {
                    return;
                }
            }
        }
        if !pending.is_empty() {
            let _ = tx.send(Ok(Bytes::from(pending))).await;
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok((status, headers, Body::from_stream(stream)).into_response())
}

/// Length of the first complete SSE event (through its blank line).
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One SSE event: if its data is the followed answer, processed and
/// re-encoded (other fields kept); otherwise unchanged.
async fn process_event(upstream: &Upstream, follow: &mut Follow, event: Vec<u8>) -> Vec<u8> {
    if matches!(follow, Follow::Nothing) {
        return event;
    }
    let text = String::from_utf8_lossy(&event);
    let mut other = Vec::new();
    let mut data = Vec::new();
    for line in text.lines() {
        match line.strip_prefix("data:") {
            Some(d) => data.push(d.strip_prefix(' ').unwrap_or(d)),
            None if !line.is_empty() => other.push(line),
            None => {}
        }
    }
    let Ok(mut message) = serde_json::from_str::<Value>(&data.join("\n")) else {
        return event;
    };
    let id = match follow {
        Follow::List(id) | Follow::Finish(id, _) => id.clone(),
        Follow::Nothing => return event,
    };
    let is_answer = message.get("id") == Some(&id)
        && (message.get("result").is_some() || message.get("error").is_some());
    if !is_answer {
        return event;
    }
    process(upstream, follow, &mut message).await;
    *follow = Follow::Nothing;
    let mut out = String::new();
    for line in other {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&message.to_string());
    out.push_str("\n\n");
    out.into_bytes()
}

/// Filters a followed `tools/list` answer or closes a followed intent.
async fn process(upstream: &Upstream, follow: &Follow, message: &mut Value) {
    match follow {
        Follow::List(id) if message.get("id") == Some(id) => {
            upstream.gateway.filter_list(message).await;
        }
        Follow::Finish(id, intent) if message.get("id") == Some(id) => {
            upstream.gateway.finish_call(intent, message).await;
        }
        _ => {}
    }
}
