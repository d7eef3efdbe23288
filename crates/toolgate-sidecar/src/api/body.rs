//! Request bodies: size-limited, strict JSON.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use super::MAX_BODY_BYTES;
use crate::error::ApiError;

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
