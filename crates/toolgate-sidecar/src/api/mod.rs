//! The loopback JSON API agents call before (and around) every tool call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{RunId, Verdict};
use toolgate_store::Store;

use crate::decision_log::DecisionLog;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::policy_state::PolicyState;
use crate::workspace::Workspaces;

mod allowed;
mod authorize;
mod body;
mod intents;
mod workspace;

pub(crate) use allowed::AllowedDecisions;
use authorize::authorize;
pub(crate) use authorize::authorize_call;
pub use body::StrictJson;
pub(crate) use body::parse_body;
use intents::list_intents;
pub use intents::{BeginIntentRequest, CompleteRequest, EffectSentRequest, ListIntentsQuery};
pub(crate) use intents::{begin_intent, complete_intent, effect_sent, pending_json};
pub use workspace::{Governed, PathRequest, WORKSPACE_SLOTS, WriteRequest};
use workspace::{workspace_list, workspace_read, workspace_stat, workspace_write};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Longest `?wait=` an approval long-poll may ask for.
pub const MAX_WAIT_SECONDS: u64 = 60;
/// Step id recorded for calls made outside any step.
pub const NO_STEP: &str = "-";
/// Policy version recorded when no bundle is loaded.
pub const NO_POLICY: &str = "none";
/// How many fresh approvals one (run, step, call) may go through.
pub(crate) const MAX_APPROVAL_ROUNDS: u32 = 32;

/// Everything a request handler needs.
pub struct AppState {
    /// The enforced policy.
    pub policy: Arc<PolicyState>,
    /// The shared database.
    pub store: Store,
    /// Background writer for low-risk decisions.
    pub decision_log: DecisionLog,
    /// Workspace roots.
    pub workspaces: Workspaces,
    /// Metrics.
    pub metrics: Metrics,
    /// Tenant this sidecar serves.
    pub tenant: String,
    /// This sidecar instance's decision stream (`{pod}/{uuidv7}`).
    pub stream: String,
    /// Who this sidecar is (for `requested_by`).
    pub identity: String,
    /// The pod this sidecar serves: what a pod-scoped cancellation and a
    /// per-pod budget are keyed by.
    pub pod: String,
    /// Allowed high-risk decisions awaiting their intent.
    pub(crate) allowed: Mutex<AllowedDecisions>,
    /// Bounds concurrent workspace I/O (see [`WORKSPACE_SLOTS`]).
    pub workspace_slots: Arc<tokio::sync::Semaphore>,
    /// Host names, besides loopback addresses and `localhost`, that the
    /// agent API answers to (the pod's own name, say).
    pub local_hosts: Vec<String>,
    /// MCP upstreams served at `/mcp/{server}`.
    pub mcp: crate::mcp::McpUpstreams,
    /// Runs of this tenant known to be cancelled.
    pub cancelled: Arc<crate::runs::CancelledRuns>,
}

impl AppState {
    /// This sidecar as the store charges and stops it: tenant, pod, and the
    /// profile of the bundle it enforces (none without one).
    pub(crate) fn caller<'a>(
        &'a self,
        enforced: Option<&'a crate::policy_state::Enforced>,
    ) -> toolgate_store::Caller<'a> {
        toolgate_store::Caller::new(
            &self.tenant,
            &self.pod,
            enforced.map(|e| e.profile.as_str()),
        )
    }
}

/// Builds the router.
pub fn router(state: Arc<AppState>) -> Router {
    let guard = axum::middleware::from_fn_with_state(state.clone(), crate::guard::local_json_only);
    Router::new()
        .route("/v1/authorize", post(authorize))
        .route("/v1/authorize/batch", post(crate::runs::authorize_batch))
        .route("/v1/runs/{run_id}", get(crate::runs::run_status))
        .route("/v1/runs/{run_id}/cancel", post(crate::runs::cancel_run))
        .route("/v1/pod/cancel", post(crate::runs::cancel_pod))
        .route("/v1/intents", post(begin_intent).get(list_intents))
        .route("/v1/intents/{id}/effect-sent", post(effect_sent))
        .route("/v1/intents/{id}/complete", post(complete_intent))
        .route("/v1/approvals/{id}", get(get_approval))
        .route("/v1/tools/visible", post(visible_tools))
        .route(
            "/mcp/{server}",
            get(crate::mcp::proxy)
                .post(crate::mcp::proxy)
                .delete(crate::mcp::proxy),
        )
        .route("/v1/workspace/read", post(workspace_read))
        .route("/v1/workspace/write", post(workspace_write))
        .route("/v1/workspace/list", post(workspace_list))
        .route("/v1/workspace/stat", post(workspace_stat))
        .merge(ops_routes())
        .fallback(|| async { ApiError::NoRoute })
        .layer(guard)
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

// ---- authorize ----

/// Body of `POST /v1/authorize`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeRequest {
    /// Tool as the agent calls it.
    pub tool: String,
    /// Optional action.
    #[serde(default)]
    pub action: Option<String>,
    /// Exact arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Run the call belongs to, in its canonical spelling (a look-alike
    /// is refused when the body is read: `invalid_run_id`).
    pub run_id: RunId,
    /// Step within the run.
    #[serde(default)]
    pub step_id: Option<String>,
    /// Must equal the sidecar's tenant when given.
    #[serde(default)]
    pub tenant: Option<String>,
    /// For MCP gateways: the `sha256:` digest of the tool's canonical
    /// definition as the server announced it; checked against a pinned
    /// `definitionDigest`.
    #[serde(default)]
    pub definition_digest: Option<String>,
}

/// Answer of `POST /v1/authorize`: the verdict plus its identifiers.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuthorizeResponse {
    /// Id of this decision; intents name it.
    pub decision_id: String,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// For `escalate`: the approval to wait on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
}

/// Longest id-like field an agent may send (run, step, tool, action).
pub const MAX_ID_BYTES: usize = 256;
/// Longest label value a metric series may carry.
pub(crate) const MAX_LABEL_CHARS: usize = 128;
/// Metric label for a tool the held profile does not declare.
pub const OTHER_TOOL: &str = "<other>";
/// Metric label for "no profile loaded".
pub const NO_PROFILE: &str = "<none>";

/// Refuses an id-like field the decision log would refuse: empty, longer
/// than [`MAX_ID_BYTES`], or holding control characters. Checked before any
/// decision is made, so bad input is a 400, never a lost record or a
/// spurious `audit_unavailable`.
pub(crate) fn require_id(field: &str, value: &str) -> Result<(), ApiError> {
    if value.len() > MAX_ID_BYTES {
        return Err(ApiError::InvalidRequest(format!(
            "{field} must be 1-{MAX_ID_BYTES} bytes"
        )));
    }
    toolgate_store::check_field(field, value).map_err(|e| match e {
        toolgate_store::StoreError::InvalidInput(m) => ApiError::InvalidRequest(m),
        other => ApiError::InvalidRequest(other.to_string()),
    })
}

/// The run a path segment, query or header names, in its canonical
/// spelling; a look-alike is `invalid_run_id`.
pub(crate) fn run_id(text: &str) -> Result<RunId, ApiError> {
    Ok(RunId::parse(text)?)
}

/// Every agent-supplied field of a call, checked before it is decided (the
/// run id was checked when the body was read).
pub(crate) fn validate_call(app: &AppState, req: &AuthorizeRequest) -> Result<(), ApiError> {
    require_id("tool", &req.tool)?;
    if let Some(step) = req.step_id.as_deref().filter(|s| !s.is_empty()) {
        require_id("step_id", step)?;
    }
    if let Some(action) = &req.action {
        require_id("action", action)?;
    }
    if let Some(digest) = &req.definition_digest {
        require_id("definition_digest", digest)?;
    }
    if let Some(t) = &req.tenant
        && *t != app.tenant
    {
        return Err(ApiError::InvalidRequest(format!(
            "tenant `{}` is not served by this sidecar",
            truncate(t, MAX_LABEL_CHARS)
        )));
    }
    Ok(())
}

/// `text` cut to at most `max` characters.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// `value` as a JSON object with one more member: how a record is shown
/// with its id under the name clients use (`intent_id`, `approval_id`).
pub(crate) fn json_with(
    value: &impl Serialize,
    key: &str,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut v = serde_json::to_value(value).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.insert(key.into(), extra);
    }
    v
}

// ---- tool discovery (gateways) ----

/// Most tool names one `POST /v1/tools/visible` may ask about.
pub const MAX_VISIBLE_QUERY: usize = 10_000;

/// Body of `POST /v1/tools/visible`: the tool names a gateway would offer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisibleToolsRequest {
    /// Policy tool names (aliases apply), e.g. `fs.read_file`.
    pub tools: Vec<String>,
    /// Definition digests the server announced, by policy tool name: a
    /// pinned tool is visible only with its pinned digest.
    #[serde(default)]
    pub definitions: HashMap<String, String>,
}

/// Which of the named tools the held profile declares and could allow or
/// escalate, in the order asked; nothing without a live bundle (fail closed).
async fn visible_tools(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<VisibleToolsRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if req.tools.len() > MAX_VISIBLE_QUERY {
        return Err(ApiError::InvalidRequest(format!(
            "tools: at most {MAX_VISIBLE_QUERY} names"
        )));
    }
    let visible = visible_of(&app, &req.tools, &req.definitions);
    Ok(Json(serde_json::json!({ "tools": visible })))
}

/// The tools of `tools` the held profile declares and could allow or
/// escalate, with their pinned definition where one is pinned; nothing
/// without a live bundle (fail closed).
pub(crate) fn visible_of(
    app: &AppState,
    tools: &[String],
    definitions: &HashMap<String, String>,
) -> Vec<String> {
    match app.policy.current() {
        Some(e) if Timestamp::now() < e.expires_at => tools
            .iter()
            .filter(|t| e.policy.may_permit(t))
            .filter(|t| {
                e.policy
                    .pinned_definition(t)
                    .is_none_or(|pinned| definitions.get(*t).map(String::as_str) == Some(pinned))
            })
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

// ---- approvals ----

/// Query of `GET /v1/approvals/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalQuery {
    /// Seconds to wait for a resolution (at most [`MAX_WAIT_SECONDS`]).
    #[serde(default)]
    pub wait: Option<u64>,
}

async fn get_approval(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    query: Result<Query<ApprovalQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let approvals = app.store.approvals();
    let approval = match q.wait {
        Some(secs) if secs > 0 => {
            approvals
                .wait(
                    &app.tenant,
                    &id,
                    Duration::from_secs(secs.min(MAX_WAIT_SECONDS)),
                )
                .await?
        }
        _ => approvals.get(&app.tenant, &id, Timestamp::now()).await?,
    };
    Ok(Json(json_with(
        &approval,
        "approval_id",
        approval.id.clone().into(),
    )))
}

// ---- operations ----

async fn metrics(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.metrics.render(),
    )
}

async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    let now = Timestamp::now();
    let bundle = app.policy.current();
    let bundle_ok = bundle.as_ref().is_some_and(|b| now < b.expires_at);
    let database_ok = app.store.ping().await.is_ok();
    let body = serde_json::json!({
        "ready": bundle_ok && database_ok,
        "bundle": bundle.as_ref().map(|b| serde_json::json!({
            "policy_version": b.policy_version,
            "sequence": b.sequence,
            "expires_at": b.expires_at.to_string(),
            "digest": b.digest,
        })),
        "bundle_expired": bundle.as_ref().is_some_and(|b| now >= b.expires_at),
        "last_rejected_bundle": app.policy.last_failure(),
        "database": if database_ok { "ok" } else { "unreachable" },
    });
    let status = if bundle_ok && database_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
