//! `POST /v1/hooks/{format}`: an agent runner's pre-tool hook, served over
//! HTTP (Claude Code's `http` hooks post here; `toolgate hook pre-tool-use
//! --format F` relays a command hook's stdin here). The body is the
//! runner's own hook input; the answer is the runner's own output, read
//! and written by [`toolgate_contract::hooks`].
//!
//! The call is decided by the `/v1/authorize` handler itself, so a hook
//! call is the same decision, recorded the same way. Every answer is HTTP
//! 200 with the decision in the body — a deny, an input that cannot be
//! read, a gate that fails: runners treat an error status as a
//! non-blocking hook error and run the call. Only an unknown format is a
//! 404 (`no_route`): there is no runner to answer in.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use toolgate_contract::hooks::{Answer, Event, Format, HookCall, SESSIONLESS_RUN};
use toolgate_gate::AuthorizeRequest;
use toolgate_policy::{Id, RunId};

use super::{AppState, MAX_BODY_BYTES, StrictJson, authorize};
use crate::error::ApiError;

/// Query of `POST /v1/hooks/{format}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookQuery {
    /// Seconds to wait for a human to answer an escalation before
    /// answering (at most `MAX_WAIT_SECONDS`); then the call is asked
    /// again, and passes once if it was approved.
    #[serde(default)]
    pub wait: Option<u64>,
}

pub(super) async fn hook(
    State(app): State<Arc<AppState>>,
    Path(format): Path<String>,
    query: Result<Query<HookQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Result<Response, ApiError> {
    let format = Format::parse(&format).ok_or(ApiError::NoRoute)?;
    let (event, answer) = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Err(_) => (
            Event::PreToolUse,
            Answer::deny(format!(
                "toolgate: body_too_large: hook input larger than {MAX_BODY_BYTES} bytes; \
                 the call is blocked"
            )),
        ),
        Ok(input) => {
            let wait = match query {
                Ok(Query(q)) => Ok(q.wait.unwrap_or(0)),
                Err(e) => Err(e.body_text()),
            };
            (
                format.event_of(&input),
                decide(&app, format, &input, wait).await,
            )
        }
    };
    Ok(Json(format.render(event, &answer).body).into_response())
}

/// The answer to one hook input: whatever cannot be decided denies.
async fn decide(
    app: &Arc<AppState>,
    format: Format,
    input: &[u8],
    wait: Result<u64, String>,
) -> Answer {
    let blocked =
        |code: &str, why: &dyn std::fmt::Display| Answer::deny(format!("toolgate: {code}: {why}"));
    let wait = match wait {
        Ok(w) => Duration::from_secs(w.min(toolgate_gate::MAX_WAIT_SECONDS)),
        Err(e) => return blocked(toolgate_contract::errors::INVALID_REQUEST, &e),
    };
    let call = match format.parse_input(input) {
        Ok(call) => call,
        Err(e) => return blocked(e.code(), &e),
    };
    let request = match request(&call) {
        Ok(r) => r,
        Err(e) => return blocked(e.code(), &e),
    };
    tracing::debug!(format = format.name(), tool = %request.tool, attempt = ?call.step_id, "hook call");
    let answer = ask(app, &request).await;
    match (&answer, wait.is_zero()) {
        (Ok(resp), false) if resp.approval_id.is_some() && is_escalated(resp) => {
            // Wait for the human, then ask again: an approved call passes
            // once, exactly as a retried call would.
            let id = resp.approval_id.as_deref().unwrap_or_default();
            if let Err(e) = app.gate.approval(id, Some(wait)).await {
                return blocked(e.code(), &e);
            }
            into_answer(ask(app, &request).await)
        }
        _ => into_answer(answer),
    }
}

/// The `/v1/authorize` request of a hook call. No step id: the runner's
/// per-attempt id (`tool_use_id`, `turn_id`) changes when the agent
/// retries, and an approval binds to run, tool and arguments.
fn request(call: &HookCall) -> Result<AuthorizeRequest, ApiError> {
    let run_id = match call.run_id.as_deref() {
        Some(session) => RunId::parse(session)
            .map_err(|e| ApiError::invalid_run_id(format!("{}: {e}", call.run_field)))?,
        None => RunId::fixed(SESSIONLESS_RUN),
    };
    let tool = Id::parse(call.tool.clone())
        .map_err(|e| ApiError::invalid_request(format!("tool: {e}")))?;
    Ok(AuthorizeRequest {
        tool,
        action: None,
        arguments: call.arguments.clone(),
        run_id,
        step_id: None,
        tenant: None,
        definition_digest: None,
    })
}

/// Decides through the `/v1/authorize` handler.
async fn ask(
    app: &Arc<AppState>,
    request: &AuthorizeRequest,
) -> Result<toolgate_gate::AuthorizeResponse, ApiError> {
    let Json(resp) = authorize(State(app.clone()), StrictJson(request.clone())).await?;
    Ok(resp)
}

fn is_escalated(resp: &toolgate_gate::AuthorizeResponse) -> bool {
    resp.verdict.verdict == toolgate_policy::Decision::Escalate
}

fn into_answer(answer: Result<toolgate_gate::AuthorizeResponse, ApiError>) -> Answer {
    let resp = match answer {
        Ok(resp) => resp,
        Err(e) => return Answer::deny(format!("toolgate: {}: {e}; the call is blocked", e.code())),
    };
    // The contract reads the decision as any client does: from its JSON.
    match serde_json::to_value(&resp).and_then(serde_json::from_value) {
        Ok(wire) => Answer::from_response(&wire),
        Err(e) => Answer::deny(format!("toolgate: decision unreadable: {e}")),
    }
}
