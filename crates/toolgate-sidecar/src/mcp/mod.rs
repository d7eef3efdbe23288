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
//! - Protocol 2026-07-28: `Mcp-Method` (every message) and `Mcp-Name`
//!   (messages that name a tool, resource or prompt) must be there and match
//!   the body, and so must the `Mcp-Param-*` headers of a tool's
//!   `x-mcp-header` arguments (the upstream gets them made from the body it
//!   receives) (HTTP 400 with JSON-RPC error -32020 otherwise), and refusals
//!   carry `resultType: "complete"`.
//! - Only a POST carries a message: `GET` (a server-initiated stream) and
//!   `DELETE` (ending a session) are `405`, so nothing but a decided
//!   message reaches the upstream. A message is at most
//!   `api::MAX_BODY_BYTES` (256 KiB, as for `/v1/authorize`: what is
//!   judged is read whole); past it `413 body_too_large`.
//! - Sessions: an `Mcp-Session-Id` the upstream never issued is `404`
//!   (the client starts a new session): an id the agent made up would be a
//!   message to the server that nothing decided.
//! - Headers: the upstream gets `Accept`, `Content-Type`,
//!   `Mcp-Session-Id`, `MCP-Protocol-Version` and the routing headers made
//!   from the forwarded body; never the agent's `Authorization`. An
//!   upstream's own credential is the gateway's: file `NAME` of
//!   `--mcp-credentials-dir` (a mounted Secret), sent as `Authorization`.
//! - Every message either way goes through `toolgate_mcp::relay`, whatever
//!   the framing (one JSON answer, or an SSE stream on a POST or a GET):
//!   requests travel under the gateway's ids, a `tools/list` answer is
//!   filtered, a high-risk `tools/call` answer closes its intent, an answer
//!   the gateway cannot read (or that is larger than
//!   `toolgate_mcp::relay::MAX_MESSAGE_BYTES`) is replaced by a JSON-RPC
//!   error, and a server's own requests are decided (see [`relay`]).
//! - Connections: the addresses a name resolves to are checked against the
//!   hardline CIDRs ([`resolve`]); redirects and proxies are never
//!   followed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use toolgate_mcp::McpError;
use toolgate_mcp::gateway::{Decider, Gateway, ToolCall};
use toolgate_mcp::message;
use toolgate_mcp::relay::{ClientStep, Route};
use toolgate_mcp::tasks::TaskEvent;
use toolgate_policy::{Id, Reason};

use toolgate_gate::{
    AuthorizeRequest, AuthorizeResponse, BeginIntentRequest, CompleteRequest, Gate, GateError,
};

use crate::error::ApiError;
use crate::trace_context;
use toolgate_gate::{EgressGuard, EgressRefusal};
use tracing::Instrument;

mod deferred;
mod headers;
mod relay;
mod resolve;
mod resume;
mod sessions;
mod task_book;

use headers::{header, header_mismatch, set_routing_headers};

/// JSON-RPC: a request header contradicts the body (protocol 2026-07-28).
pub const HEADER_MISMATCH: i64 = -32020;
/// One configured upstream and its gateway.
pub(crate) struct Upstream {
    url: String,
    /// The file holding its `Authorization` value, if one is configured.
    credential: Option<std::path::PathBuf>,
    /// The session ids it issued (see [`sessions`]).
    sessions: sessions::SessionBook,
    default_run: toolgate_policy::RunId,
    gateway: Gateway<InProcess>,
}

/// Where held MCP tasks are kept (this sidecar's store and tenant) and
/// counted: wiring the sidecar hands the gateway, not a way around the gate.
pub(crate) struct TaskBook {
    pub(crate) store: toolgate_store::Store,
    pub(crate) tenant: String,
    pub(crate) metrics: toolgate_gate::Metrics,
}

/// Every configured upstream, by server name.
#[derive(Clone)]
pub struct McpUpstreams {
    servers: Arc<HashMap<String, Arc<Upstream>>>,
    http: reqwest::Client,
    gate: Arc<Gate>,
    /// Transport metrics of the forwarder (latency, upstream errors).
    metrics: toolgate_gate::Metrics,
}

impl McpUpstreams {
    /// The upstreams `NAME=URL`, deciding through `gate`, reached with
    /// `http` (an [`upstream_client`]).
    pub(crate) fn new(
        upstreams: &[(String, String)],
        credentials: Option<std::path::PathBuf>,
        gate: Arc<Gate>,
        http: reqwest::Client,
        tasks: TaskBook,
    ) -> Self {
        let servers = upstreams
            .iter()
            .map(|(name, url)| {
                let upstream = Upstream {
                    url: url.clone(),
                    credential: credentials.as_ref().map(|dir| dir.join(name)),
                    sessions: sessions::SessionBook::default(),
                    default_run: default_run(name),
                    gateway: Gateway::new(
                        name.clone(),
                        Duration::ZERO,
                        InProcess { gate: gate.clone() },
                    ),
                };
                upstream
                    .gateway
                    .keep_tasks(Arc::new(task_book::StoreTasks::new(
                        tasks.store.clone(),
                        tasks.tenant.clone(),
                    )));
                let label =
                    toolgate_gate::labels::truncate(name, toolgate_gate::labels::MAX_LABEL_CHARS)
                        .to_owned();
                let counter = tasks.metrics.mcp_tasks.clone();
                for event in TaskEvent::ALL {
                    counter.with_label_values(&[&label, event.as_str()]);
                }
                upstream
                    .gateway
                    .observe_tasks(Arc::new(move |event: TaskEvent| {
                        counter.with_label_values(&[&label, event.as_str()]).inc();
                    }));
                (name.clone(), Arc::new(upstream))
            })
            .collect();
        Self {
            servers: Arc::new(servers),
            http,
            gate,
            metrics: tasks.metrics,
        }
    }

    /// Ends every upstream's held calls (see `Gateway::close_tasks`).
    pub(crate) fn close_tasks(&self) {
        for upstream in self.servers.values() {
            upstream.gateway.close_tasks();
        }
    }

    /// Whether any upstream is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// The client upstreams are reached with: every address checked against
/// `policy`'s hardline CIDRs as it is connected to. Where the gateway
/// connects is decided here, never by the upstream (a redirect) or the
/// environment (a proxy variable).
pub(crate) fn upstream_client(egress: EgressGuard) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(resolve::HardlineResolver { egress }))
        .build()
}

/// Decides through the sidecar's [`Gate`], in process: no HTTP round trip
/// and no second reading of the answer.
pub(crate) struct InProcess {
    gate: Arc<Gate>,
}

fn refused(e: GateError) -> McpError {
    McpError::Refused {
        code: e.code().to_owned(),
        message: e.to_string(),
    }
}

/// A name from the MCP conversation as the gate takes it: under the one id
/// rule, refused like any other bad input.
fn id(text: &str) -> Result<Id, McpError> {
    Id::parse(text).map_err(|e| refused(e.into()))
}

impl Decider for InProcess {
    async fn authorize(&self, call: ToolCall<'_>) -> Result<AuthorizeResponse, McpError> {
        let request = AuthorizeRequest {
            tool: id(call.tool)?,
            action: None,
            arguments: call.arguments.clone(),
            run_id: call.run_id.clone(),
            step_id: Some(id(call.step_id)?),
            tenant: None,
            definition_digest: call.definition_digest.map(id).transpose()?,
        };
        self.gate.authorize(&request).await.map_err(refused)
    }

    async fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        self.gate.visible_tools(tools, definitions).map_err(refused)
    }

    async fn begin_intent(
        &self,
        decided: &AuthorizeResponse,
        call: ToolCall<'_>,
    ) -> Result<String, McpError> {
        let request = BeginIntentRequest {
            decision_id: id(&decided.decision_id)?,
            run_id: call.run_id.clone(),
            step_id: id(call.step_id)?,
            tool: id(call.tool)?,
            args_digest: id(&decided.verdict.args_digest)?,
            call_digest: Some(id(&decided.verdict.call_digest)?),
            verification_probe: None,
        };
        let intent = self.gate.begin_intent(request).await.map_err(refused)?;
        self.gate.effect_sent(&intent.id).await.map_err(refused)?;
        Ok(intent.id)
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
        let req = CompleteRequest {
            outcome,
            detail: detail.map(str::to_owned),
        };
        self.gate
            .complete_intent(id, req)
            .await
            .map(|_| ())
            .map_err(refused)
    }

    async fn wait_for_approval(
        &self,
        id: &str,
        wait: Duration,
    ) -> Result<toolgate_contract::ApprovalStatus, McpError> {
        let approval = self.gate.approval(id, Some(wait)).await.map_err(refused)?;
        Ok(approval.status)
    }

    async fn screen(
        &self,
        message: &toolgate_gate::MessageScreen,
    ) -> Result<toolgate_gate::Screened, McpError> {
        self.gate.screen_message(message).await.map_err(refused)
    }

    async fn refused(&self, refusal: &toolgate_gate::RefusalRequest) -> Result<(), McpError> {
        self.gate.refuse(refusal).await.map(|_| ()).map_err(refused)
    }
}

/// `mcp-<server>-<uuid v7>`, by the one default-run rule.
fn default_run(server: &str) -> toolgate_policy::RunId {
    toolgate_policy::RunId::fresh(&format!("mcp-{server}"), uuid::Uuid::now_v7())
}

/// The run of a request: `X-Toolgate-Run-Id` (present but not a run id,
/// not even readable text, is refused), else the session's derived run,
/// else the upstream's.
fn request_run(
    headers: &HeaderMap,
    upstream: &Upstream,
) -> Result<toolgate_policy::RunId, ApiError> {
    if let Some(value) = headers.get(toolgate_contract::agent_api::RUN_ID_HEADER) {
        let text = value.to_str().map_err(|_| {
            ApiError::invalid_run_id("X-Toolgate-Run-Id: run ids are ASCII text".into())
        })?;
        return Ok(toolgate_gate::run_id(text)?);
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

/// `GET|POST|DELETE /mcp/{server}`.
pub(crate) async fn proxy(
    State(mcp): State<McpUpstreams>,
    Path(server): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let span = trace_context::mcp_span(&server, &headers, &body);
    let exchange = exchange(mcp, server, method, headers, body);
    let answer = if span.is_disabled() {
        exchange.await
    } else {
        // The message's own `_meta` context may be sampled where the
        // request's headers were not, or the other way round.
        let sampled = trace_context::sampled(&span);
        toolgate_gate::with_sampling(sampled, exchange)
            .instrument(span.clone())
            .await
    };
    trace_context::mcp_answered(&span, &answer);
    answer
}

/// One message (or stream) between the agent and upstream `server`.
async fn exchange(
    mcp: McpUpstreams,
    server: String,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let upstream = mcp.servers.get(&server).cloned().ok_or_else(|| {
        ApiError::McpUnknownServer(toolgate_gate::labels::truncate(&server, 64).to_owned())
    })?;
    if method != Method::POST {
        // No server-initiated stream (GET) and no session ending (DELETE)
        // pass: their headers and bodies would reach the server undecided.
        return Ok((
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "toolgate: only POST carries MCP messages through the gateway",
        )
            .into_response());
    }
    let run_id = request_run(&headers, &upstream)?;
    if let Some(why) = upstream_refusal(&mcp, &upstream) {
        let method = serde_json::from_slice::<Value>(&body).ok();
        let method = method.as_ref().and_then(|m| m.get("method")?.as_str());
        record_refusal(&upstream, &run_id, method, Reason::UpstreamNotAllowed).await;
        return Err(ApiError::McpUpstreamNotAllowed(why));
    }
    let modern = header(&headers, "mcp-protocol-version").is_some_and(|v| v >= "2026-07-28");
    if headers.contains_key("mcp-session-id")
        && !header(&headers, "mcp-session-id").is_some_and(|s| upstream.sessions.knows(s))
    {
        let method = serde_json::from_slice::<Value>(&body).ok();
        let method = method.as_ref().and_then(|m| m.get("method")?.as_str());
        record_refusal(&upstream, &run_id, method, Reason::RequestMalformed).await;
        return Ok((
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "application/json")],
            message::error(
                &Value::Null,
                message::INVALID_REQUEST,
                "toolgate: no session of this server has that Mcp-Session-Id; start a new one",
            )
            .to_string(),
        )
            .into_response());
    }

    let session = header(&headers, "mcp-session-id").map(str::to_owned);
    let route = Route {
        run_id: &run_id,
        session: session.as_deref(),
        modern,
    };
    let mut awaited = None;
    // The message as the upstream gets it, for its routing headers.
    let mut routed = None;
    // Only a POST carries a message; any other body is not the server's to
    // read past the gateway.
    let body = if method == Method::POST {
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
        let mismatch = header_mismatch(&headers, &message, modern).or_else(|| {
            // A 2026-07-28 call mirrors a tool's `x-mcp-header` arguments.
            modern
                .then(|| {
                    let params = |name: &str| header(&headers, name);
                    upstream.gateway.param_mismatch(&message, params)
                })
                .flatten()
        });
        if let Some(mismatch) = mismatch {
            let method = message.get("method").and_then(Value::as_str);
            record_refusal(&upstream, &run_id, method, Reason::RequestMalformed).await;
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            let error = message::error(&id, HEADER_MISMATCH, &mismatch);
            return Ok((
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response());
        }
        match upstream.gateway.from_client(message, route).await {
            ClientStep::Answer(a) => return Ok(answer(&a)),
            ClientStep::Nothing => return Ok(StatusCode::ACCEPTED.into_response()),
            ClientStep::Defer {
                answer: created,
                call,
            } => {
                let deferred = deferred::Deferred {
                    mcp: mcp.clone(),
                    upstream: upstream.clone(),
                    headers: upstream.headers(&headers)?,
                    run_id: run_id.clone(),
                };
                // Kept before the client learns of it (see `toolgate_mcp::kept`).
                let kept = resume::context(&headers);
                if upstream
                    .gateway
                    .hold_task(&call, session.as_deref(), kept)
                    .await
                {
                    tokio::spawn(deferred.run(call).in_current_span());
                }
                return Ok(answer(&created));
            }
            ClientStep::Forward {
                mut message,
                request,
            } => {
                trace_context::inject_meta(&mut message);
                awaited = request;
                let body = Bytes::from(message.to_string());
                routed = Some(message);
                body
            }
        }
    } else {
        Bytes::new()
    };
    let is_post = method == Method::POST;

    let started = Instant::now();
    let mut forwarded = upstream.headers(&headers)?;
    if modern && let Some(message) = &routed {
        set_routing_headers(&mut forwarded, message, &upstream.gateway);
    }
    trace_context::inject(&mut forwarded);
    let sent = mcp
        .http
        .request(method, &upstream.url)
        .headers(forwarded.clone())
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            if let Some(ours) = &awaited {
                upstream.gateway.abandon(ours);
            }
            if let Some(why) = resolve::hardline_cause(&e) {
                let method = routed.as_ref().and_then(|m| m.get("method")?.as_str());
                let reason = Reason::UpstreamNotAllowed;
                record_refusal(&upstream, &run_id, method, reason).await;
                return Err(ApiError::McpUpstreamNotAllowed(format!("{server}: {why}")));
            }
            mcp.metrics
                .mcp_upstream_errors
                .with_label_values(&[upstream.gateway.server()])
                .inc();
            // A forwarded high-risk call whose effect may or may not have
            // happened stays open: resume shows it as uncertain.
            return Err(ApiError::McpUpstream(e.to_string()));
        }
    };
    if let Some(session) = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        upstream.sessions.issued(session);
    }
    mcp.metrics
        .mcp_forward_seconds
        .with_label_values(&[upstream.gateway.server()])
        .observe(started.elapsed().as_secs_f64());
    if response.status().is_server_error() {
        mcp.metrics
            .mcp_upstream_errors
            .with_label_values(&[upstream.gateway.server()])
            .inc();
    }
    let stream = relay::Stream {
        http: mcp.http.clone(),
        upstream,
        headers: forwarded,
        run_id,
        awaited,
        is_post,
        detached: false,
    };
    Ok(stream.relay(response).await)
}

/// Records a refusal of this gateway's own as a denial of `SERVER.METHOD`
/// (see `toolgate_mcp::edges`).
async fn record_refusal(
    upstream: &Upstream,
    run_id: &toolgate_policy::RunId,
    method: Option<&str>,
    reason: Reason,
) {
    let tool = upstream.gateway.method_tool(method);
    let refused = toolgate_mcp::edges::EdgeRefusal::new(&tool, run_id, reason);
    upstream.gateway.record_refusal(refused).await;
}

/// Why `upstream` may not be reached now: its address fails the live
/// policy's egress rules, or no policy is live.
fn upstream_refusal(mcp: &McpUpstreams, upstream: &Upstream) -> Option<String> {
    let refusal = mcp
        .gate
        .egress()
        .url_refusal(&upstream.url, jiff::Timestamp::now())?;
    Some(match refusal {
        EgressRefusal::Policy(reason) => format!(
            "{}: {} ({})",
            upstream.gateway.server(),
            upstream.url,
            reason.as_str()
        ),
        EgressRefusal::NoLiveBundle => refusal.to_string(),
    })
}
