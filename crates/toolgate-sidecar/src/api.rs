//! The loopback JSON API agents call before (and around) every tool call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolgate_policy::{Call, CompiledPolicy, Context, Decision, Reason, Risk, Verdict};
use toolgate_store::{
    ApprovalStatus, ApprovedCall, DecisionRecord, IntentOutcome, NewApproval, NewIntent, Store,
};

use crate::decision_log::DecisionLog;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::policy_state::{Enforced, PolicyState};
use crate::workspace::Workspaces;

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Longest `?wait=` an approval long-poll may ask for.
pub const MAX_WAIT_SECONDS: u64 = 60;
/// Allowed decisions remembered for intent checks.
const MAX_REMEMBERED: usize = 100_000;
/// Step id recorded for calls made outside any step.
pub const NO_STEP: &str = "-";
/// Policy version recorded when no bundle is loaded.
pub const NO_POLICY: &str = "none";
/// How many fresh approvals one (run, step, call) may go through.
const MAX_APPROVAL_ROUNDS: u32 = 32;

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

/// What an allowed decision permits; an intent must match it exactly.
#[derive(Debug, Clone)]
pub(crate) struct AllowedCall {
    run_id: String,
    tool: String,
    canonical_tool: String,
    args_digest: String,
    call_digest: String,
    risk: Risk,
    used: bool,
}

/// Bounded map of recent allowed decisions, oldest evicted first.
#[derive(Debug, Default)]
pub(crate) struct AllowedDecisions {
    map: HashMap<String, AllowedCall>,
    order: std::collections::VecDeque<String>,
}

impl AllowedDecisions {
    fn insert(&mut self, id: String, call: AllowedCall) {
        if self.order.len() >= MAX_REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.map.remove(&old);
        }
        self.order.push_back(id.clone());
        self.map.insert(id, call);
    }
}

/// Strict JSON body: size-limited, unknown fields rejected, typed errors.
pub struct StrictJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES)
            .await
            .map_err(|_| ApiError::TooLarge(MAX_BODY_BYTES))?;
        parse_body(&bytes).map(StrictJson)
    }
}

pub(crate) fn parse_body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(&mut de)
        .map_err(|e| ApiError::InvalidRequest(format!("invalid request body: {e}")))?;
    de.end()
        .map_err(|e| ApiError::InvalidRequest(format!("trailing data after JSON body: {e}")))?;
    Ok(value)
}

/// Builds the router.
pub fn router(state: Arc<AppState>) -> Router {
    let guard = axum::middleware::from_fn_with_state(state.clone(), crate::guard::local_json_only);
    Router::new()
        .route("/v1/authorize", post(authorize))
        .route("/v1/authorize/batch", post(crate::runs::authorize_batch))
        .route("/v1/runs/{run_id}", get(crate::runs::run_status))
        .route("/v1/runs/{run_id}/cancel", post(crate::runs::cancel_run))
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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeRequest {
    /// Tool as the agent calls it.
    pub tool: String,
    /// Optional action.
    #[serde(default)]
    pub action: Option<String>,
    /// Exact arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Run the call belongs to.
    pub run_id: String,
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

/// Every agent-supplied field of a call, checked before it is decided.
pub(crate) fn validate_call(app: &AppState, req: &AuthorizeRequest) -> Result<(), ApiError> {
    require_id("run_id", &req.run_id)?;
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

async fn authorize(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<AuthorizeRequest>,
) -> Result<Json<AuthorizeResponse>, ApiError> {
    decide(&app, &req).await.map(Json)
}

/// Decides one call exactly once: evaluate under the held bundle, find or
/// use its approval, record the decision (durably before answering for a
/// high-risk tool), remember an allow for its intent, count it. The
/// workspace endpoints decide through here too, so they can never be more
/// permissive than `/v1/authorize`.
pub(crate) async fn decide(
    app: &AppState,
    req: &AuthorizeRequest,
) -> Result<AuthorizeResponse, ApiError> {
    let started = Instant::now();
    validate_call(app, req)?;
    // The log needs a step; calls outside any step are recorded under "-".
    let step_id = req
        .step_id
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| NO_STEP.to_owned());
    let decision_id = uuid::Uuid::now_v7().to_string();
    let now = Timestamp::now();
    let enforced = app.policy.current();
    let call = Call {
        tool: &req.tool,
        action: req.action.as_deref(),
        arguments: &req.arguments,
    };
    let mut verdict = match &enforced {
        None => sidecar_verdict(Reason::NoBundle, NO_POLICY, &call),
        Some(e) if now >= e.expires_at => {
            sidecar_verdict(Reason::BundleExpired, &e.policy_version, &call)
        }
        Some(e) => e.policy.evaluate(
            &call,
            &Context {
                now,
                subject: Some(&app.tenant),
            },
        ),
    };

    // A pinned tool is decided only for the definition that was reviewed.
    if verdict.verdict != Decision::Deny
        && let Some(e) = &enforced
        && let Some(pinned) = e.policy.pinned_definition(&req.tool)
        && req.definition_digest.as_deref() != Some(pinned)
    {
        crate::runs::refuse(
            &mut verdict,
            Reason::ToolDefinitionChanged,
            Some(format!("definition:{pinned}")),
        );
    }
    // A cancelled run gets nothing more, in every mode.
    if verdict.verdict != Decision::Deny && app.cancelled.contains(&req.run_id) {
        crate::runs::refuse(&mut verdict, Reason::RunCancelled, None);
    }
    let (mode, limits) = match &enforced {
        Some(e) => (
            e.policy.enforcement(&req.tool),
            crate::runs::limits(&e.policy),
        ),
        None => Default::default(),
    };

    let mut approval_id = None;
    if verdict.verdict == Decision::Escalate {
        // No new approval requests for a run cancelled elsewhere.
        refuse_if_cancelled(app, &req.run_id, &mut verdict).await;
    }
    if verdict.verdict == Decision::Escalate {
        // Validated above: an escalation only comes from a live bundle.
        if let Some(e) = &enforced {
            match escalate(app, e, req, &step_id, &decision_id, &mut verdict).await {
                Ok(id) => approval_id = id,
                Err(err) => {
                    tracing::error!(error = %err, "approval request failed; denying");
                    deny_audit(&mut verdict);
                }
            }
        }
    }

    let record_of = |verdict: &Verdict| DecisionRecord {
        decision_id: decision_id.clone(),
        run_id: req.run_id.clone(),
        step_id: step_id.clone(),
        tool: req.tool.clone(),
        verdict: verdict.verdict.as_str().to_owned(),
        reason: verdict.reason.as_str().to_owned(),
        message: record_message(verdict),
        // Labels come from the profile; a very long glob must not make the
        // log refuse the record.
        matched_rule: verdict
            .matched_rule
            .as_deref()
            .map(|r| truncate(r, toolgate_store::MAX_FIELD_LEN / 4).to_owned()),
        policy_version: verdict.policy_version.clone(),
        risk: verdict.risk.as_str().to_owned(),
        args_digest: verdict.args_digest.clone(),
        call_digest: Some(verdict.call_digest.clone()),
        definition_digest: req.definition_digest.clone(),
        created_at: now,
    };
    if let Err(e) = record_of(&verdict).validate() {
        // Every agent field was checked above, so this is a sidecar bug;
        // refuse rather than answer with a decision the log cannot hold.
        return Err(ApiError::InvalidRequest(e.to_string()));
    }
    let high_risk = verdict.risk == Risk::High;
    if crate::runs::needs_admission(&verdict, &limits) {
        // Charge the run (and see whether it was cancelled) where every
        // sidecar of the run sees it; a high-risk call in the transaction
        // that records its decision.
        let runs = app.store.runs();
        let admitted = if high_risk {
            runs.admit_and_record(
                &app.tenant,
                &app.stream,
                &req.run_id,
                true,
                &limits,
                now,
                |a| {
                    let mut answered = verdict.clone();
                    crate::runs::apply_admission(&mut answered, a, mode);
                    record_of(&answered)
                },
            )
            .await
            .map(|(a, _)| a)
        } else {
            runs.admit(&app.tenant, &req.run_id, false, &limits, now)
                .await
        };
        match admitted {
            Ok(admission) => {
                if matches!(admission, toolgate_store::Admission::Cancelled { .. }) {
                    app.cancelled.insert(&req.run_id);
                }
                crate::runs::apply_admission(&mut verdict, &admission, mode);
            }
            Err(err) => {
                tracing::error!(error = %err, "run not charged or decision not recorded; denying");
                deny_audit(&mut verdict);
                approval_id = None;
            }
        }
        if !high_risk {
            app.decision_log.enqueue(&app.tenant, record_of(&verdict));
        }
    } else if high_risk {
        // Nothing to count without budgets, but a high-risk call still sees
        // a cancellation made anywhere: one read by key before the append.
        if verdict.verdict == Decision::Allow {
            refuse_if_cancelled(app, &req.run_id, &mut verdict).await;
        }
        if let Err(err) = app
            .store
            .decisions()
            .append(&app.tenant, &app.stream, record_of(&verdict))
            .await
        {
            tracing::error!(error = %err, "high-risk decision not recorded; denying");
            deny_audit(&mut verdict);
            approval_id = None;
        }
    } else {
        app.decision_log.enqueue(&app.tenant, record_of(&verdict));
    }

    // Only a decision that needs an intent is remembered for one: the map
    // then grows with high-risk traffic, not with every allowed read.
    if verdict.verdict == Decision::Allow && verdict.intent_required {
        app.allowed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                decision_id.clone(),
                AllowedCall {
                    run_id: req.run_id.clone(),
                    tool: req.tool.clone(),
                    canonical_tool: enforced
                        .as_ref()
                        .map(|e| e.policy.canonical_tool(&req.tool).to_owned())
                        .unwrap_or_else(|| req.tool.clone()),
                    args_digest: verdict.args_digest.clone(),
                    call_digest: verdict.call_digest.clone(),
                    risk: verdict.risk,
                    used: false,
                },
            );
    }

    let (tool_label, profile_label) = match &enforced {
        Some(e) => (
            metric_tool_label(&e.policy, &req.tool),
            truncate(&e.profile, MAX_LABEL_CHARS),
        ),
        None => (OTHER_TOOL, NO_PROFILE),
    };
    // A decision that only reports is counted by what enforcement would
    // have answered, so a trial profile's would-denials are visible.
    let (counted_verdict, counted_reason) = match (verdict.would_verdict, verdict.would_reason) {
        (Some(v), Some(r)) if !verdict.enforced => (v, r),
        _ => (verdict.verdict, verdict.reason),
    };
    app.metrics
        .decisions
        .with_label_values(&[
            counted_verdict.as_str(),
            counted_reason.as_str(),
            tool_label,
            profile_label,
            if verdict.enforced { "true" } else { "false" },
        ])
        .inc();
    app.metrics
        .decision_duration
        .with_label_values(&[verdict.risk.as_str()])
        .observe(started.elapsed().as_secs_f64());
    Ok(AuthorizeResponse {
        decision_id,
        verdict,
        approval_id,
    })
}

/// The `tool` label of a call: the canonical name when the held profile
/// declares it, else [`OTHER_TOOL`]. Agent text never becomes a label, so
/// label cardinality is bounded by the profile.
pub(crate) fn metric_tool_label<'a>(policy: &'a CompiledPolicy, tool: &'a str) -> &'a str {
    if policy.effect(tool).is_some() {
        truncate(policy.canonical_tool(tool), MAX_LABEL_CHARS)
    } else {
        OTHER_TOOL
    }
}

fn sidecar_verdict(reason: Reason, policy_version: &str, call: &Call<'_>) -> Verdict {
    Verdict {
        verdict: Decision::Deny,
        reason,
        matched_rule: None,
        policy_version: policy_version.to_owned(),
        risk: Risk::High,
        intent_required: false,
        args_digest: toolgate_policy::args_digest(call.arguments),
        call_digest: toolgate_policy::call_digest(call.tool, call.action, call.arguments),
        enforced: true,
        would_verdict: None,
        would_reason: None,
        would_rule: None,
        warning: None,
    }
}

/// Reads the run's cancellation from the database (a cancellation made
/// anywhere) and refuses `verdict` when there is one; an unreadable run
/// state denies `audit_unavailable`.
async fn refuse_if_cancelled(app: &AppState, run_id: &str, verdict: &mut Verdict) {
    match app.store.runs().cancelled_at(&app.tenant, run_id).await {
        Ok(None) => {}
        Ok(Some(_)) => {
            app.cancelled.insert(run_id);
            crate::runs::refuse(verdict, Reason::RunCancelled, None);
        }
        Err(err) => {
            tracing::error!(error = %err, "run state unreadable; denying");
            deny_audit(verdict);
        }
    }
}

fn deny_audit(verdict: &mut Verdict) {
    crate::runs::refuse(verdict, Reason::AuditUnavailable, None);
}

/// The decision log's `message` for a verdict: what enforcement would have
/// answered when it only reports, and which budget refused a call.
fn record_message(verdict: &Verdict) -> Option<String> {
    if !verdict.enforced {
        return Some(
            serde_json::json!({
                "enforced": false,
                "would_verdict": verdict.would_verdict,
                "would_reason": verdict.would_reason,
                "would_rule": verdict.would_rule.as_deref().map(|r| truncate(r, 512)),
            })
            .to_string(),
        );
    }
    (verdict.reason == Reason::BudgetExhausted).then(|| {
        format!(
            "run budget used up ({})",
            verdict.matched_rule.as_deref().unwrap_or("budget")
        )
    })
}

/// Deterministic id of "this call, in this step, under this policy": the
/// same call asks the same approval until it is used or expires. The call
/// digest covers tool, action and arguments, so another action is another
/// invocation.
fn invocation_base(tenant: &str, run_id: &str, step_id: &str, v: &Verdict) -> String {
    let mut h = Sha256::new();
    for part in [tenant, run_id, step_id, &v.call_digest, &v.policy_version] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// Finds or creates the approval for an escalated call. An approved,
/// unused approval for exactly this call turns the verdict into `approved`.
async fn escalate(
    app: &AppState,
    enforced: &Enforced,
    req: &AuthorizeRequest,
    step_id: &str,
    decision_id: &str,
    verdict: &mut Verdict,
) -> Result<Option<String>, ApiError> {
    let tool = enforced.policy.canonical_tool(&req.tool).to_owned();
    let base = invocation_base(&app.tenant, &req.run_id, step_id, verdict);
    // What the approver is shown: the text the rules matched, masked.
    let preview = enforced.policy.preview(&Call {
        tool: &req.tool,
        action: req.action.as_deref(),
        arguments: &req.arguments,
    });
    for round in 0..MAX_APPROVAL_ROUNDS {
        let approval = app
            .store
            .approvals()
            .request(NewApproval {
                approval_id: None,
                invocation_id: format!("{base}:{round}"),
                tenant: app.tenant.clone(),
                run_id: req.run_id.clone(),
                tool: tool.clone(),
                args_digest: verdict.args_digest.clone(),
                call_digest: Some(verdict.call_digest.clone()),
                policy_version: verdict.policy_version.clone(),
                decision_id: decision_id.to_owned(),
                requested_by: app.identity.clone(),
                ttl: Duration::from_secs(u64::from(enforced.approval_ttl_seconds)),
                action: req.action.clone(),
                preview: preview.clone(),
            })
            .await?;
        if approval.consumed_at.is_some() || approval.status == ApprovalStatus::Expired {
            continue; // used or lapsed: this call needs a fresh approval
        }
        match approval.status {
            ApprovalStatus::Pending => return Ok(Some(approval.id)),
            ApprovalStatus::Denied => {
                verdict.verdict = Decision::Deny;
                verdict.reason = Reason::ApprovalDenied;
                verdict.matched_rule = Some(format!("approval:{}", approval.id));
                return Ok(Some(approval.id));
            }
            ApprovalStatus::Approved => {
                let consumed = app
                    .store
                    .approvals()
                    .consume(
                        &app.tenant,
                        &approval.id,
                        &ApprovedCall {
                            tool: &tool,
                            args_digest: &verdict.args_digest,
                            call_digest: &verdict.call_digest,
                            policy_version: &verdict.policy_version,
                        },
                    )
                    .await?;
                if consumed {
                    verdict.verdict = Decision::Allow;
                    verdict.reason = Reason::Approved;
                    verdict.matched_rule = Some(format!("approval:{}", approval.id));
                    verdict.intent_required = verdict.risk == Risk::High;
                    return Ok(Some(approval.id));
                }
                // Someone else used it first: ask again.
            }
            ApprovalStatus::Expired => {}
            ApprovalStatus::Cancelled => {
                verdict.verdict = Decision::Deny;
                verdict.reason = Reason::RunCancelled;
                verdict.matched_rule = Some(format!("approval:{}", approval.id));
                verdict.intent_required = false;
                return Ok(Some(approval.id));
            }
        }
    }
    verdict.verdict = Decision::Deny;
    verdict.reason = Reason::ApprovalDenied;
    Ok(None)
}

// ---- intents ----

/// Body of `POST /v1/intents`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginIntentRequest {
    /// The allowing decision.
    pub decision_id: String,
    /// Run id (must match the decision's).
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Tool (must match the decision's).
    pub tool: String,
    /// Argument digest (must match the decision's).
    pub args_digest: String,
    /// Whole-call digest (must match the decision's when given).
    #[serde(default)]
    pub call_digest: Option<String>,
    /// How a resume flow can check whether the effect happened.
    #[serde(default)]
    pub verification_probe: Option<serde_json::Value>,
}

pub(crate) async fn begin_intent(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<BeginIntentRequest>,
) -> Result<Response, ApiError> {
    require_id("decision_id", &req.decision_id)?;
    require_id("run_id", &req.run_id)?;
    require_id("step_id", &req.step_id)?;
    require_id("tool", &req.tool)?;
    require_id("args_digest", &req.args_digest)?;
    let (risk, call_digest) = {
        let allowed = app.allowed.lock().unwrap_or_else(|p| p.into_inner());
        let Some(call) = allowed.map.get(&req.decision_id) else {
            return Err(ApiError::DecisionNotAllowed(format!(
                "decision {} did not allow a call that needs an intent (unknown, denied, escalated or not high-risk)",
                req.decision_id
            )));
        };
        if call.used {
            return Err(ApiError::IntentExists(format!(
                "decision {} already has an intent",
                req.decision_id
            )));
        }
        if call.args_digest != req.args_digest
            || req
                .call_digest
                .as_ref()
                .is_some_and(|d| *d != call.call_digest)
            || (call.tool != req.tool && call.canonical_tool != req.tool)
            || call.run_id != req.run_id
        {
            return Err(ApiError::IntentDigestMismatch(format!(
                "decision {} allowed tool `{}` with {} in run `{}`, not these arguments",
                req.decision_id, call.tool, call.args_digest, call.run_id
            )));
        }
        (call.risk, call.call_digest.clone())
    };
    let intent = app
        .store
        .intents()
        .begin(NewIntent {
            tenant: app.tenant.clone(),
            run_id: req.run_id,
            step_id: req.step_id,
            tool: req.tool,
            args_digest: req.args_digest,
            call_digest: Some(call_digest),
            decision_id: req.decision_id.clone(),
            risk: risk.as_str().to_owned(),
            verification_probe: req.verification_probe,
        })
        .await?;
    if let Some(call) = app
        .allowed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map
        .get_mut(&req.decision_id)
    {
        call.used = true;
    }
    app.metrics.intents.with_label_values(&["pending"]).inc();
    let body = serde_json::json!({"intent_id": intent.id, "status": intent.status});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Intents are addressed by id alone; one tenant's sidecar must not move
/// another tenant's rows, so a foreign intent is reported as not found.
async fn own_intent(app: &AppState, id: &str) -> Result<(), ApiError> {
    let intent = app.store.intents().get(id).await?;
    if intent.tenant == app.tenant {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("intent not found: {id}")))
    }
}

/// Body of `POST /v1/intents/{id}/effect-sent` (may be empty).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectSentRequest {}

pub(crate) async fn effect_sent(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !body.is_empty() {
        let _: EffectSentRequest = parse_body(&body)?;
    }
    own_intent(&app, &id).await?;
    Ok(Json(intent_json(
        &app.store.intents().mark_effect_sent(&id).await?,
    )))
}

/// An intent row as the API shows it: its id as `intent_id`, as
/// `POST /v1/intents` answers (`id` stays one release for older clients).
fn intent_json(intent: &toolgate_store::Intent) -> serde_json::Value {
    let mut v = serde_json::to_value(intent).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.insert("intent_id".into(), intent.id.clone().into());
    }
    v
}

/// Body of `POST /v1/intents/{id}/complete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// completed | not_completed | error.
    pub outcome: IntentOutcome,
    /// Free-form detail.
    #[serde(default)]
    pub detail: Option<String>,
}

pub(crate) async fn complete_intent(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    StrictJson(req): StrictJson<CompleteRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    own_intent(&app, &id).await?;
    let intent = app
        .store
        .intents()
        .complete(&id, req.outcome, req.detail)
        .await?;
    app.metrics
        .intents
        .with_label_values(&[intent.status.as_str()])
        .inc();
    Ok(Json(intent_json(&intent)))
}

/// Query of `GET /v1/intents`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListIntentsQuery {
    /// Run to list.
    pub run_id: String,
    /// Only `pending` is supported: the resume flow.
    #[serde(default)]
    pub status: Option<String>,
}

async fn list_intents(
    State(app): State<Arc<AppState>>,
    query: Result<Query<ListIntentsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    require_id("run_id", &q.run_id)?;
    if let Some(s) = q.status.as_deref().filter(|s| *s != "pending") {
        return Err(ApiError::InvalidRequest(format!(
            "status `{s}` is not supported; only `pending` lists intents for resume"
        )));
    }
    let pending = app.store.intents().pending(&q.run_id).await?;
    let intents: Vec<_> = pending
        .into_iter()
        .filter(|p| p.intent.tenant == app.tenant)
        .map(|p| pending_json(&p))
        .collect();
    Ok(Json(serde_json::json!({"intents": intents})))
}

/// An open intent as the API shows it: the row plus its `resume` class.
pub(crate) fn pending_json(p: &toolgate_store::PendingIntent) -> serde_json::Value {
    let mut v = intent_json(&p.intent);
    if let Some(obj) = v.as_object_mut() {
        obj.insert(
            "resume".into(),
            serde_json::to_value(p.class).unwrap_or_default(),
        );
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
        _ => approvals.get(&app.tenant, &id).await?,
    };
    let mut body = serde_json::to_value(&approval).unwrap_or_default();
    if let Some(obj) = body.as_object_mut() {
        obj.insert("approval_id".into(), approval.id.clone().into());
    }
    Ok(Json(body))
}

// ---- workspace ----
//
// Every workspace operation is the tool call `workspace.<op>` with arguments
// `{"path": …}` (write adds `"content"`), decided by `decide` exactly as
// `/v1/authorize` would decide it and recorded in the decision log. A
// profile that declares no `workspace.*` tool denies them (`unknown_tool`);
// a hardline path rule denies them in every mode. A high-risk write records
// its intent around the write itself.

/// Body of workspace `read`, `list` and `stat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRequest {
    /// Run whose workspace to use.
    pub run_id: String,
    /// Relative path; `""` is the root (list and stat only).
    pub path: String,
    /// Step within the run, for the decision record.
    #[serde(default)]
    pub step_id: Option<String>,
}

/// Body of workspace `write`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteRequest {
    /// Run whose workspace to use.
    pub run_id: String,
    /// Relative path.
    pub path: String,
    /// UTF-8 text to write.
    pub content: String,
    /// Step within the run, for the decision record.
    #[serde(default)]
    pub step_id: Option<String>,
}

/// A workspace result with the decision that allowed it.
#[derive(Debug, Serialize)]
pub struct Governed<T> {
    /// The allowing decision.
    pub decision_id: String,
    /// What the operation returned.
    #[serde(flatten)]
    pub result: T,
}

/// Concurrent workspace operations; the rest wait (bounded) for a slot, so
/// stuck file I/O can never take every blocking thread.
pub const WORKSPACE_SLOTS: usize = 8;
/// How long a workspace request waits for a slot.
const WORKSPACE_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// How long one workspace operation may take.
const WORKSPACE_IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs file I/O on the blocking pool, holding one of [`WORKSPACE_SLOTS`].
/// A timed-out operation keeps its slot until its thread returns, so even
/// operations that never return cannot exceed the bound.
async fn workspace_io<T: Send + 'static>(
    app: &AppState,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = tokio::time::timeout(
        WORKSPACE_QUEUE_WAIT,
        app.workspace_slots.clone().acquire_owned(),
    )
    .await
    .map_err(|_| ApiError::WorkspaceBusy("every workspace I/O slot is busy".into()))?
    .map_err(|_| ApiError::WorkspaceBusy("workspace I/O is shut down".into()))?;
    let task = tokio::task::spawn_blocking(move || {
        let _slot = permit;
        f()
    });
    match tokio::time::timeout(WORKSPACE_IO_TIMEOUT, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(ApiError::StoreUnavailable("workspace task failed".into())),
        Err(_) => Err(ApiError::WorkspaceTimeout(format!(
            "workspace operation exceeded {} s",
            WORKSPACE_IO_TIMEOUT.as_secs()
        ))),
    }
}

/// Decides `workspace.<op>` for these arguments; anything but an allow is a
/// 403 carrying the verdict.
async fn govern(
    app: &AppState,
    op: &str,
    run_id: &str,
    step_id: Option<String>,
    arguments: serde_json::Map<String, serde_json::Value>,
) -> Result<AuthorizeResponse, ApiError> {
    // A run id that cannot name a workspace is refused as such, before it
    // is decided or recorded.
    crate::workspace::check_id("run_id", run_id)?;
    let answer = decide(
        app,
        &AuthorizeRequest {
            tool: format!("workspace.{op}"),
            action: None,
            arguments,
            run_id: run_id.to_owned(),
            step_id,
            tenant: None,
            definition_digest: None,
        },
    )
    .await?;
    if answer.verdict.verdict == Decision::Allow {
        return Ok(answer);
    }
    let code = if answer.verdict.verdict == Decision::Escalate {
        "approval_required"
    } else {
        "policy_denied"
    };
    let message = format!(
        "workspace.{op}: {} ({})",
        answer.verdict.verdict.as_str(),
        answer.verdict.reason.as_str()
    );
    Err(ApiError::PolicyDenied {
        code,
        message,
        verdict: Box::new(serde_json::to_value(&answer).unwrap_or_default()),
    })
}

/// Counts a refused workspace request in `toolgate_workspace_refusals_total{code}`.
fn counted_refusal<T>(app: &AppState, result: Result<T, ApiError>) -> Result<T, ApiError> {
    if let Err(e) = &result {
        app.metrics
            .workspace_refusals
            .with_label_values(&[e.code()])
            .inc();
    }
    result
}

fn path_arguments(path: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut args = serde_json::Map::new();
    args.insert("path".into(), path.into());
    args
}

async fn workspace_read(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<PathRequest>,
) -> Result<Json<Governed<crate::workspace::FileRead>>, ApiError> {
    counted_refusal(&app, workspace_read_inner(app.clone(), req).await)
}

async fn workspace_read_inner(
    app: Arc<AppState>,
    req: PathRequest,
) -> Result<Json<Governed<crate::workspace::FileRead>>, ApiError> {
    let answer = govern(
        &app,
        "read",
        &req.run_id,
        req.step_id,
        path_arguments(&req.path),
    )
    .await?;
    let state = app.clone();
    let result = workspace_io(&app, move || {
        Ok(state.workspaces.read(&req.run_id, &req.path)?)
    })
    .await?;
    Ok(Json(Governed {
        decision_id: answer.decision_id,
        result,
    }))
}

async fn workspace_write(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<WriteRequest>,
) -> Result<Json<Governed<crate::workspace::FileWritten>>, ApiError> {
    counted_refusal(&app, workspace_write_inner(app.clone(), req).await)
}

async fn workspace_write_inner(
    app: Arc<AppState>,
    req: WriteRequest,
) -> Result<Json<Governed<crate::workspace::FileWritten>>, ApiError> {
    let mut args = path_arguments(&req.path);
    args.insert("content".into(), req.content.clone().into());
    let step = req.step_id.clone();
    let answer = govern(&app, "write", &req.run_id, step.clone(), args).await?;
    // A high-risk write is recorded like any high-risk call: pending before
    // the effect, watermarked, then closed with its outcome.
    let intent = if answer.verdict.intent_required {
        let intent = app
            .store
            .intents()
            .begin(NewIntent {
                tenant: app.tenant.clone(),
                run_id: req.run_id.clone(),
                step_id: step.unwrap_or_else(|| NO_STEP.to_owned()),
                tool: "workspace.write".into(),
                args_digest: answer.verdict.args_digest.clone(),
                call_digest: Some(answer.verdict.call_digest.clone()),
                decision_id: answer.decision_id.clone(),
                risk: answer.verdict.risk.as_str().to_owned(),
                verification_probe: None,
            })
            .await?;
        app.store.intents().mark_effect_sent(&intent.id).await?;
        Some(intent.id)
    } else {
        None
    };
    let state = app.clone();
    let (run_id, path, content) = (req.run_id, req.path, req.content);
    let written = workspace_io(&app, move || {
        Ok(state.workspaces.write(&run_id, &path, &content)?)
    })
    .await;
    if let Some(id) = intent {
        let (outcome, detail) = match &written {
            Ok(_) => (IntentOutcome::Completed, None),
            Err(e) => (IntentOutcome::Error, Some(e.code().to_owned())),
        };
        app.store.intents().complete(&id, outcome, detail).await?;
    }
    Ok(Json(Governed {
        decision_id: answer.decision_id,
        result: written?,
    }))
}

async fn workspace_list(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<PathRequest>,
) -> Result<Json<Governed<crate::workspace::Listing>>, ApiError> {
    counted_refusal(&app, workspace_list_inner(app.clone(), req).await)
}

async fn workspace_list_inner(
    app: Arc<AppState>,
    req: PathRequest,
) -> Result<Json<Governed<crate::workspace::Listing>>, ApiError> {
    let answer = govern(
        &app,
        "list",
        &req.run_id,
        req.step_id,
        path_arguments(&req.path),
    )
    .await?;
    let state = app.clone();
    let result = workspace_io(&app, move || {
        Ok(state.workspaces.list(&req.run_id, &req.path)?)
    })
    .await?;
    Ok(Json(Governed {
        decision_id: answer.decision_id,
        result,
    }))
}

async fn workspace_stat(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<PathRequest>,
) -> Result<Json<Governed<crate::workspace::Stat>>, ApiError> {
    counted_refusal(&app, workspace_stat_inner(app.clone(), req).await)
}

async fn workspace_stat_inner(
    app: Arc<AppState>,
    req: PathRequest,
) -> Result<Json<Governed<crate::workspace::Stat>>, ApiError> {
    let answer = govern(
        &app,
        "stat",
        &req.run_id,
        req.step_id,
        path_arguments(&req.path),
    )
    .await?;
    let state = app.clone();
    let result = workspace_io(&app, move || {
        Ok(state.workspaces.stat(&req.run_id, &req.path)?)
    })
    .await?;
    Ok(Json(Governed {
        decision_id: answer.decision_id,
        result,
    }))
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
