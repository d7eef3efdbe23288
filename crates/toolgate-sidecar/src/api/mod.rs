//! The agent's HTTP API: thin handlers over [`Gate`], each reading its
//! request strictly, calling one gate operation and mapping its answer (or
//! its [`GateError`](toolgate_gate::GateError)) to HTTP.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRef, Path, Query, State};
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jiff::Timestamp;
use serde::Deserialize;
use toolgate_gate::runs::{
    BatchRequest, BatchResponse, CancelRequest, CancelResponse, PodCancelResponse, RunStatus,
};
use toolgate_gate::{ApprovalView, AuthorizeRequest, AuthorizeResponse, Gate, approval_view};

use crate::error::ApiError;
use crate::mcp::McpUpstreams;

mod body;
mod hooks;
mod intents;
pub mod openapi;
mod workspace;

pub(crate) use body::parse_body;
pub use body::{RawBody, StrictJson};
pub use intents::{EffectSentRequest, ListIntentsQuery};
use intents::{begin_intent, complete_intent, effect_sent, list_intents};
use workspace::{workspace_list, workspace_read, workspace_stat, workspace_write};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// What a request handler holds: the gate, and what only HTTP needs.
pub struct AppState {
    /// The decision core.
    pub gate: Arc<Gate>,
    /// Host names, besides loopback addresses and `localhost`, that the
    /// agent API answers to (the pod's own name, say).
    pub local_hosts: Arc<Vec<String>>,
    /// MCP upstreams served at `/mcp/{server}`.
    pub mcp: McpUpstreams,
}

/// What the MCP gateway's handler reads of the state: its upstreams only
/// (cheap to clone: shared maps and handles).
impl FromRef<Arc<AppState>> for McpUpstreams {
    fn from_ref(state: &Arc<AppState>) -> Self {
        state.mcp.clone()
    }
}

/// Builds the router.
pub fn router(state: Arc<AppState>) -> Router {
    let guard = axum::middleware::from_fn_with_state(
        state.local_hosts.clone(),
        crate::guard::local_json_only,
    );
    Router::new()
        .route("/v1/authorize", post(authorize))
        .route("/v1/authorize/batch", post(authorize_batch))
        .route("/v1/hooks/{format}", post(hooks::hook))
        .route("/v1/refusals", post(record_refusal))
        .route("/v1/messages/screen", post(screen_message))
        .route("/v1/runs/{run_id}", get(run_status))
        .route("/v1/runs/{run_id}/cancel", post(cancel_run))
        .route("/v1/pod/cancel", post(cancel_pod))
        .route("/v1/intents", post(begin_intent).get(list_intents))
        .route("/v1/intents/{id}/effect-sent", post(effect_sent))
        .route("/v1/intents/{id}/complete", post(complete_intent))
        .route("/v1/approvals/{id}", get(get_approval))
        .route("/v1/tools/visible", post(visible_tools))
        // GET and DELETE are routed to be refused (405) by the gateway.
        .route(
            "/mcp/{server}",
            get(crate::mcp::proxy)
                .post(crate::mcp::proxy.layer(axum::middleware::from_fn(body::bounded)))
                .delete(crate::mcp::proxy),
        )
        .route("/v1/workspace/read", post(workspace_read))
        .route("/v1/workspace/write", post(workspace_write))
        .route("/v1/workspace/list", post(workspace_list))
        .route("/v1/workspace/stat", post(workspace_stat))
        .merge(ops_routes())
        .fallback(|| async { ApiError::NoRoute })
        .layer(guard)
        .layer(axum::middleware::from_fn(crate::trace_context::server_span))
        .with_state(state)
}

/// Probes and metrics only: what the kubelet and Prometheus reach on the
/// pod IP, while the agent API stays on loopback.
pub fn ops_router(state: Arc<AppState>) -> Router {
    ops_routes()
        .fallback(|| async { ApiError::NoRoute })
        .with_state(state)
}

fn ops_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
}

// ---- decisions and runs ----

async fn authorize(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<AuthorizeRequest>,
) -> Result<Json<AuthorizeResponse>, ApiError> {
    Ok(Json(app.gate.authorize(&req).await?))
}

/// `POST /v1/refusals`: a refusal an edge made on its own (`toolgate mcp
/// wrap`'s gateway), recorded as a denial; `201 {"decision_id"}`.
async fn record_refusal(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<toolgate_gate::RefusalRequest>,
) -> Result<Response, ApiError> {
    let recorded = app.gate.refuse(&req).await?;
    Ok((StatusCode::CREATED, Json(recorded)).into_response())
}

/// `POST /v1/messages/screen`: whether a run's message to an MCP server
/// (other than a `tools/call`) may pass its flow rules (`toolgate mcp
/// wrap`'s gateway asks before it forwards one).
async fn screen_message(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<toolgate_gate::MessageScreen>,
) -> Result<Json<toolgate_gate::Screened>, ApiError> {
    Ok(Json(app.gate.screen_message(&req).await?))
}

async fn authorize_batch(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<BatchRequest>,
) -> Result<Json<BatchResponse>, ApiError> {
    Ok(Json(app.gate.authorize_batch(req).await?))
}

async fn run_status(
    State(app): State<Arc<AppState>>,
    Path(run_id): Path<String>,
) -> Result<Json<RunStatus>, ApiError> {
    let run_id = toolgate_gate::run_id(&run_id)?;
    Ok(Json(app.gate.run_status(&run_id).await?))
}

/// A cancellation's body: empty, or strict JSON.
fn cancel_request(RawBody(body): RawBody) -> Result<CancelRequest, ApiError> {
    if body.is_empty() {
        Ok(CancelRequest::default())
    } else {
        parse_body(&body)
    }
}

async fn cancel_run(
    State(app): State<Arc<AppState>>,
    Path(run_id): Path<String>,
    body: RawBody,
) -> Result<Json<CancelResponse>, ApiError> {
    let run_id = toolgate_gate::run_id(&run_id)?;
    let req = cancel_request(body)?;
    Ok(Json(app.gate.cancel_run(&run_id, &req).await?))
}

async fn cancel_pod(
    State(app): State<Arc<AppState>>,
    body: RawBody,
) -> Result<Json<PodCancelResponse>, ApiError> {
    let req = cancel_request(body)?;
    Ok(Json(app.gate.cancel_pod(&req).await?))
}

// ---- tool discovery (gateways) ----

/// Body of `POST /v1/tools/visible`: the tool names a gateway would offer.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibleToolsRequest {
    /// Policy tool names (aliases apply), e.g. `fs.read_file`.
    #[schemars(length(max = MAX_VISIBLE_QUERY))]
    pub tools: Vec<String>,
    /// Definition digests the server announced, by policy tool name: a
    /// pinned tool is visible only with its pinned digest.
    #[serde(default)]
    pub definitions: HashMap<String, String>,
}

/// Most tool names one `POST /v1/tools/visible` may ask about.
pub const MAX_VISIBLE_QUERY: usize = 10_000;

async fn visible_tools(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<VisibleToolsRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if req.tools.len() > MAX_VISIBLE_QUERY {
        return Err(ApiError::invalid_request(format!(
            "tools: at most {MAX_VISIBLE_QUERY} names"
        )));
    }
    let visible = app.gate.visible_tools(&req.tools, &req.definitions)?;
    Ok(Json(serde_json::json!({ "tools": visible })))
}

// ---- approvals ----

/// Query of `GET /v1/approvals/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalQuery {
    /// Seconds to wait for a resolution (at most
    /// [`MAX_WAIT_SECONDS`](toolgate_gate::MAX_WAIT_SECONDS)).
    #[serde(default)]
    pub wait: Option<u64>,
}

async fn get_approval(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    query: Result<Query<ApprovalQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ApprovalView>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid_request(e.body_text()))?;
    let approval = app
        .gate
        .approval(&id, q.wait.map(Duration::from_secs))
        .await?;
    Ok(Json(approval_view(approval)))
}

// ---- operations ----

async fn metrics(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.gate.render_metrics(),
    )
}

async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    let now = Timestamp::now();
    let gate = &app.gate;
    let bundle = gate.enforced();
    let bundle_ok = bundle.as_ref().is_some_and(|b| b.is_live(now));
    let database_ok = gate.database_reachable().await;
    let body = serde_json::json!({
        "ready": bundle_ok && database_ok,
        "bundle": bundle.as_ref().map(|b| serde_json::json!({
            "policy_version": b.policy_version,
            "sequence": b.sequence,
            "expires_at": b.expires_at.to_string(),
            "digest": b.digest,
        })),
        "bundle_expired": bundle.as_ref().is_some_and(|b| !b.is_live(now)),
        "last_rejected_bundle": gate.last_rejected_bundle(),
        "database": if database_ok { "ok" } else { "unreachable" },
    });
    let status = if bundle_ok && database_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
