//! The sidecar's one error type: every failure is `{error: {code, message}}`
//! with a stable code and a fitting HTTP status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::workspace::WorkspaceError;

/// A request the sidecar refuses or cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not the JSON the endpoint expects.
    #[error("{0}")]
    InvalidRequest(String),
    /// A run id outside the run-id alphabet (see `toolgate_policy::ids`):
    /// refused, never mapped, so a look-alike of a run is never another run.
    #[error("{0}")]
    InvalidRunId(String),
    /// The body is larger than the limit.
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    /// Unknown id.
    #[error("{0}")]
    NotFound(String),
    /// The intent does not match the decision it names.
    #[error("{0}")]
    IntentDigestMismatch(String),
    /// The decision named by an intent did not allow the call.
    #[error("{0}")]
    DecisionNotAllowed(String),
    /// A conflicting state transition.
    #[error("{0}")]
    Conflict(String),
    /// The decision already has its one intent.
    #[error("{0}")]
    IntentExists(String),
    /// The request's `Host` is not this pod's loopback API.
    #[error("{0}")]
    HostNotAllowed(String),
    /// A browser page of another origin sent the request.
    #[error("{0}")]
    OriginNotAllowed(String),
    /// The body is not declared as JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The policy denied (or escalated) a call the sidecar makes itself,
    /// such as a workspace operation; carries the verdict.
    #[error("{message}")]
    PolicyDenied {
        /// Stable code: `policy_denied` or `approval_required`.
        code: &'static str,
        /// What was decided.
        message: String,
        /// The verdict, with its decision id.
        verdict: Box<serde_json::Value>,
    },
    /// Every workspace I/O slot is busy (stuck or slow file operations).
    #[error("{0}")]
    WorkspaceBusy(String),
    /// A workspace operation took too long.
    #[error("{0}")]
    WorkspaceTimeout(String),
    /// The approval is past its deadline.
    #[error("{0}")]
    ApprovalExpired(String),
    /// The database failed.
    #[error("database unavailable: {0}")]
    StoreUnavailable(String),
    /// A workspace operation was refused.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// `/mcp/{server}` names no configured upstream.
    #[error("no MCP upstream named {0}")]
    McpUnknownServer(String),
    /// The MCP upstream's address is refused by the profile (egress), or no
    /// policy is held to check it with.
    #[error("MCP upstream refused: {0}")]
    McpUpstreamNotAllowed(String),
    /// The MCP upstream could not be reached or broke off.
    #[error("MCP upstream unavailable: {0}")]
    McpUpstream(String),
    /// No such route.
    #[error("no such endpoint")]
    NoRoute,
}

impl ApiError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidRunId(_) => "invalid_run_id",
            Self::TooLarge(_) => "request_too_large",
            Self::NotFound(_) => "not_found",
            Self::IntentDigestMismatch(_) => "intent_digest_mismatch",
            Self::DecisionNotAllowed(_) => "decision_not_allowed",
            Self::Conflict(_) => "conflict",
            Self::IntentExists(_) => "intent_exists",
            Self::HostNotAllowed(_) => "host_not_allowed",
            Self::OriginNotAllowed(_) => "origin_not_allowed",
            Self::UnsupportedMediaType(_) => "unsupported_media_type",
            Self::PolicyDenied { code, .. } => code,
            Self::WorkspaceBusy(_) => "workspace_busy",
            Self::WorkspaceTimeout(_) => "workspace_timeout",
            Self::ApprovalExpired(_) => "approval_expired",
            Self::StoreUnavailable(_) => "store_unavailable",
            Self::Workspace(e) => e.code(),
            Self::NoRoute => "no_route",
            Self::McpUnknownServer(_) => "mcp_unknown_server",
            Self::McpUpstreamNotAllowed(_) => "mcp_upstream_not_allowed",
            Self::McpUpstream(_) => "mcp_upstream_unavailable",
        }
    }

    /// HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) | Self::InvalidRunId(_) => StatusCode::BAD_REQUEST,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NotFound(_) | Self::NoRoute => StatusCode::NOT_FOUND,
            Self::IntentDigestMismatch(_) | Self::DecisionNotAllowed(_) => StatusCode::FORBIDDEN,
            Self::Conflict(_) | Self::IntentExists(_) => StatusCode::CONFLICT,
            Self::HostNotAllowed(_) => StatusCode::MISDIRECTED_REQUEST,
            Self::OriginNotAllowed(_) | Self::PolicyDenied { .. } => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::WorkspaceBusy(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::WorkspaceTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::ApprovalExpired(_) => StatusCode::GONE,
            Self::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::McpUnknownServer(_) => StatusCode::NOT_FOUND,
            Self::McpUpstreamNotAllowed(_) => StatusCode::FORBIDDEN,
            Self::McpUpstream(_) => StatusCode::BAD_GATEWAY,
            Self::Workspace(e) => match e {
                WorkspaceError::NotFound => StatusCode::NOT_FOUND,
                WorkspaceError::Escape | WorkspaceError::HardLink => StatusCode::FORBIDDEN,
                WorkspaceError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                WorkspaceError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            },
        }
    }
}

impl From<toolgate_policy::PolicyError> for ApiError {
    fn from(e: toolgate_policy::PolicyError) -> Self {
        match e {
            toolgate_policy::PolicyError::InvalidRunId { .. } => Self::InvalidRunId(e.to_string()),
            other => Self::InvalidRequest(other.to_string()),
        }
    }
}

impl From<toolgate_store::StoreError> for ApiError {
    fn from(e: toolgate_store::StoreError) -> Self {
        use toolgate_store::StoreError as S;
        match e {
            S::NotFound { .. } => Self::NotFound(e.to_string()),
            S::Conflict(_) => Self::Conflict(e.to_string()),
            S::IntentExists { .. } => Self::IntentExists(e.to_string()),
            S::ApprovalExpired { .. } => Self::ApprovalExpired(e.to_string()),
            S::InvalidInput(_) => Self::InvalidRequest(e.to_string()),
            _ => Self::StoreUnavailable(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body =
            serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}});
        if let Self::PolicyDenied { verdict, .. } = &self {
            body["verdict"] = (**verdict).clone();
        }
        (self.status(), axum::Json(body)).into_response()
    }
}
