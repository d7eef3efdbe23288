//! The workspace endpoints over [`Gate`](toolgate_gate::Gate): each is the
//! governed tool call `workspace.<op>`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use toolgate_gate::workspace::{FileRead, FileWritten, Listing, Stat};
use toolgate_gate::{Governed, PathRequest, WriteRequest};

use super::{AppState, StrictJson};
use crate::error::ApiError;

pub(super) async fn workspace_write(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<WriteRequest>,
) -> Result<Json<Governed<FileWritten>>, ApiError> {
    Ok(Json(app.gate.workspace_write(req).await?))
}

pub(super) async fn workspace_read(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<PathRequest>,
) -> Result<Json<Governed<FileRead>>, ApiError> {
    Ok(Json(app.gate.workspace_read(req).await?))
}

pub(super) async fn workspace_list(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<PathRequest>,
) -> Result<Json<Governed<Listing>>, ApiError> {
    Ok(Json(app.gate.workspace_list(req).await?))
}

pub(super) async fn workspace_stat(
    State(app): State<Arc<AppState>>,
    StrictJson(req): StrictJson<PathRequest>,
) -> Result<Json<Governed<Stat>>, ApiError> {
    Ok(Json(app.gate.workspace_stat(req).await?))
}
