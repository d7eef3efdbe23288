//! The intent endpoints: record a pending intent for an allowed high-risk
//! call, watermark it before the side effect, close it with its outcome,
//! and list a run's open intents for resume. Every store call is scoped to
//! this sidecar's tenant, so another tenant's intent is simply not found.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_store::{IntentOutcome, NewIntent};

use super::allowed::{REMEMBER_FOR, Remembered};
use super::{AppState, StrictJson, json_with, parse_body, require_id};
use crate::error::ApiError;

/// Body of `POST /v1/intents`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginIntentRequest {
    /// The allowing decision.
    pub decision_id: String,
    /// Run id (must match the decision's).
    pub run_id: toolgate_policy::RunId,
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
    require_id("step_id", &req.step_id)?;
    require_id("tool", &req.tool)?;
    require_id("args_digest", &req.args_digest)?;
    let (risk, call_digest) = {
        let allowed = app.allowed.lock().unwrap_or_else(|p| p.into_inner());
        let call = match allowed.get(&req.decision_id) {
            Some(Remembered::Open(call)) => call,
            Some(Remembered::Used) => {
                return Err(ApiError::IntentExists(format!(
                    "decision {} already has an intent",
                    req.decision_id
                )));
            }
            None => {
                return Err(ApiError::DecisionNotAllowed(format!(
                    "decision {} did not allow a call that needs an intent (unknown, denied, \
                     escalated, not high-risk, or allowed more than {} s ago)",
                    req.decision_id,
                    REMEMBER_FOR.as_secs()
                )));
            }
        };
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
        .begin(
            NewIntent {
                tenant: app.tenant.clone(),
                run_id: req.run_id.into_string(),
                step_id: req.step_id,
                tool: req.tool,
                args_digest: req.args_digest,
                call_digest: Some(call_digest),
                decision_id: req.decision_id.clone(),
                risk: risk.as_str().to_owned(),
                verification_probe: req.verification_probe,
            },
            Timestamp::now(),
        )
        .await?;
    app.allowed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .mark_used(&req.decision_id);
    app.metrics.intents.with_label_values(&["pending"]).inc();
    let body = serde_json::json!({"intent_id": intent.id, "status": intent.status});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Body of `POST /v1/intents/{id}/effect-sent` (may be empty).
#[derive(Debug, Default, Serialize, Deserialize)]
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
    let intents = app.store.intents();
    let intent = intents
        .mark_effect_sent(&app.tenant, &id, Timestamp::now())
        .await?;
    Ok(Json(intent_json(&intent)))
}

/// An intent row as the API shows it: its id as `intent_id`, as
/// `POST /v1/intents` answers (`id` stays one release for older clients).
fn intent_json(intent: &toolgate_store::Intent) -> serde_json::Value {
    json_with(intent, "intent_id", intent.id.clone().into())
}

/// Body of `POST /v1/intents/{id}/complete`.
#[derive(Debug, Serialize, Deserialize)]
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
    let intent = app
        .store
        .intents()
        .complete(&app.tenant, &id, req.outcome, req.detail, Timestamp::now())
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

pub(super) async fn list_intents(
    State(app): State<Arc<AppState>>,
    query: Result<Query<ListIntentsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::InvalidRequest(e.body_text()))?;
    let run_id = super::run_id(&q.run_id)?;
    if let Some(s) = q.status.as_deref().filter(|s| *s != "pending") {
        return Err(ApiError::InvalidRequest(format!(
            "status `{s}` is not supported; only `pending` lists intents for resume"
        )));
    }
    let pending = app
        .store
        .intents()
        .pending(&app.tenant, run_id.as_str())
        .await?;
    let intents: Vec<_> = pending.iter().map(pending_json).collect();
    Ok(Json(serde_json::json!({"intents": intents})))
}

/// An open intent as the API shows it: the row plus its `resume` class.
pub(crate) fn pending_json(p: &toolgate_store::PendingIntent) -> serde_json::Value {
    json_with(&intent_json(&p.intent), "resume", p.class.as_str().into())
}
