//! The intent endpoints over [`Gate`](toolgate_gate::Gate): begin, watermark,
//! complete, and list a run's open intents for resume.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use toolgate_gate::intents::{IntentView, OpenIntents, intent_view, open_intent};
use toolgate_gate::{BeginIntentRequest, CompleteRequest};

use super::{AppState, RawBody, StrictJson, parse_body};
use crate::error::ApiError;

pub(crate) async fn begin_intent(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<BeginIntentRequest>,
) -> Result<Response, ApiError> {
    let intent = app.gate.begin_intent(req).await?;
    let body = serde_json::json!({"intent_id": intent.id, "status": intent.status});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Body of `POST /v1/intents/{id}/effect-sent`: empty, or `{}`.
#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EffectSentRequest {}

pub(crate) async fn effect_sent(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<Json<IntentView>, ApiError> {
    if !body.is_empty() {
        let _: EffectSentRequest = parse_body(&body)?;
    }
    Ok(Json(intent_view(app.gate.effect_sent(&id).await?)))
}

pub(crate) async fn complete_intent(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    StrictJson(req): StrictJson<CompleteRequest>,
) -> Result<Json<IntentView>, ApiError> {
    Ok(Json(intent_view(app.gate.complete_intent(&id, req).await?)))
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
) -> Result<Json<OpenIntents>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid_request(e.body_text()))?;
    let run_id = toolgate_gate::run_id(&q.run_id)?;
    if let Some(s) = q.status.as_deref().filter(|s| *s != "pending") {
        return Err(ApiError::invalid_request(format!(
            "status `{s}` is not supported; only `pending` lists intents for resume"
        )));
    }
    let pending = app.gate.pending_intents(&run_id).await?;
    Ok(Json(OpenIntents {
        intents: pending.into_iter().map(open_intent).collect(),
    }))
}
