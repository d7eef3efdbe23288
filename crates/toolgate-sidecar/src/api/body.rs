//! Request bodies: size-limited, strict JSON.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::MAX_BODY_BYTES;
use crate::error::ApiError;

/// Strict JSON body: size-limited, unknown fields rejected, typed errors.
pub struct StrictJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        parse_body(&read_body(req.into_body()).await?).map(StrictJson)
    }
}

/// A body read whole under the API's limit, for a handler that takes an
/// empty body or reads its own (without it axum's own 2 MB limit and
/// plain-text 413 would apply).
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        read_body(req.into_body()).await.map(RawBody)
    }
}

/// The same limit as middleware, for a handler outside this module that
/// reads its own body (the MCP gateway): the body is read here, then
/// handed on whole.
pub(crate) async fn bounded(req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    match read_body(body).await {
        Ok(bytes) => next.run(Request::from_parts(parts, bytes.into())).await,
        Err(e) => e.into_response(),
    }
}

async fn read_body(body: axum::body::Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError::TooLarge(MAX_BODY_BYTES))
}

pub(crate) fn parse_body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        run_id_fault(bytes).unwrap_or_else(|| {
            // Name the member serde stumbled on (`calls[2].tool: …`), so a
            // refused id says which one it was.
            let at = e.path().to_string();
            let inner = e.into_inner();
            ApiError::invalid_request(match at.as_str() {
                "." | "" => format!("invalid request body: {inner}"),
                _ => format!("invalid request body: {at}: {inner}"),
            })
        })
    })?;
    de.end()
        .map_err(|e| ApiError::invalid_request(format!("trailing data after JSON body: {e}")))?;
    Ok(value)
}

/// A body refused for its `run_id` is `invalid_run_id`, whichever field
/// serde stumbled on: read again (only on this error path) to see whether
/// the `run_id` member is a run id.
fn run_id_fault(bytes: &Bytes) -> Option<ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    match value.get("run_id")? {
        serde_json::Value::String(text) => {
            toolgate_policy::RunId::parse(text).err().map(Into::into)
        }
        _ => Some(ApiError::invalid_run_id("run_id: must be a string".into())),
    }
}
