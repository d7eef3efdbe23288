//! The sidecar's one error type: every failure is `{error: {code, message}}`
//! with a stable code and a fitting HTTP status. What the gate refuses is
//! its [`GateError`], with the gate's code; the rest is HTTP's own.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use toolgate_gate::GateError;
use toolgate_gate::workspace::WorkspaceError;

/// A request the sidecar refuses or cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// What the gate refused or failed.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The body is over the API's limit (`MAX_BODY_BYTES`).
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    /// A `Host` the agent API does not answer to.
    #[error("{0}")]
    HostNotAllowed(String),
    /// A browser `Origin`.
    #[error("{0}")]
    OriginNotAllowed(String),
    /// A body that is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// `/mcp/{server}` names no configured upstream.
    #[error("no MCP upstream named {0}")]
    McpUnknownServer(String),
    /// The upstream's address is refused by the policy.
    #[error("MCP upstream refused: {0}")]
    McpUpstreamNotAllowed(String),
    /// The upstream could not be reached or failed.
    #[error("MCP upstream unavailable: {0}")]
    McpUpstream(String),
    /// No such endpoint.
    #[error("no such endpoint")]
    NoRoute,
}

impl ApiError {
    /// Malformed input (`invalid_request`, the gate's code).
    pub fn invalid_request(message: String) -> Self {
        Self::Gate(GateError::InvalidRequest(message))
    }

    /// A run id outside the alphabet (`invalid_run_id`, the gate's code).
    pub fn invalid_run_id(message: String) -> Self {
        Self::Gate(GateError::InvalidRunId(message))
    }

    /// The stable code clients match on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Gate(e) => e.code(),
            Self::TooLarge(_) => "request_too_large",
            Self::HostNotAllowed(_) => "host_not_allowed",
            Self::OriginNotAllowed(_) => "origin_not_allowed",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::NoRoute => "no_route",
            Self::McpUnknownServer(_) => "mcp_unknown_server",
            Self::McpUpstreamNotAllowed(_) => "mcp_upstream_not_allowed",
            Self::McpUpstream(_) => "mcp_upstream_unavailable",
        }
    }

    /// The HTTP status of this refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Gate(e) => gate_status(e),
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NoRoute | Self::McpUnknownServer(_) => StatusCode::NOT_FOUND,
            Self::HostNotAllowed(_) => StatusCode::MISDIRECTED_REQUEST,
            Self::OriginNotAllowed(_) | Self::McpUpstreamNotAllowed(_) => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::McpUpstream(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

fn gate_status(e: &GateError) -> StatusCode {
    use GateError as G;
    match e {
        G::InvalidRequest(_) | G::InvalidRunId(_) => StatusCode::BAD_REQUEST,
        G::NotFound(_) => StatusCode::NOT_FOUND,
        G::IntentDigestMismatch(_) | G::DecisionNotAllowed(_) | G::PolicyDenied { .. } => {
            StatusCode::FORBIDDEN
        }
        G::Conflict(_) | G::IntentExists(_) => StatusCode::CONFLICT,
        G::WorkspaceBusy(_) | G::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        G::WorkspaceTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
        G::ApprovalExpired(_) => StatusCode::GONE,
        G::Workspace(w) => match w {
            WorkspaceError::NotFound => StatusCode::NOT_FOUND,
            WorkspaceError::Escape | WorkspaceError::HardLink => StatusCode::FORBIDDEN,
            WorkspaceError::Changed => StatusCode::CONFLICT,
            WorkspaceError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            WorkspaceError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        },
    }
}

impl From<toolgate_policy::PolicyError> for ApiError {
    fn from(e: toolgate_policy::PolicyError) -> Self {
        Self::Gate(e.into())
    }
}

impl From<toolgate_store::StoreError> for ApiError {
    fn from(e: toolgate_store::StoreError) -> Self {
        Self::Gate(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body =
            serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}});
        if let Self::Gate(GateError::PolicyDenied { verdict, .. }) = &self {
            body["verdict"] = (**verdict).clone();
        }
        (self.status(), axum::Json(body)).into_response()
    }
}
