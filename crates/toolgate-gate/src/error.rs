//! The gate's one error type, with a stable code for each failure. Adapters
//! map it to their transport (the sidecar's HTTP status, a JSON-RPC error).

use crate::workspace::WorkspaceError;

/// Why the gate refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// The input is malformed.
    #[error("{0}")]
    InvalidRequest(String),
    /// A run id outside the run-id alphabet.
    #[error("{0}")]
    InvalidRunId(String),
    /// No such record (in this tenant).
    #[error("{0}")]
    NotFound(String),
    /// An intent whose call is not the one its decision allowed.
    #[error("{0}")]
    IntentDigestMismatch(String),
    /// An intent for a decision that allowed no call needing one.
    #[error("{0}")]
    DecisionNotAllowed(String),
    /// The record changed under the request.
    #[error("{0}")]
    Conflict(String),
    /// The decision already has its intent.
    #[error("{0}")]
    IntentExists(String),
    /// A governed operation the policy did not allow; carries the verdict.
    #[error("{message}")]
    PolicyDenied {
        /// `policy_denied` or `approval_required`.
        code: &'static str,
        /// What was refused, and why.
        message: String,
        /// The decision, as `/v1/authorize` would answer it.
        verdict: Box<serde_json::Value>,
    },
    /// Every workspace I/O slot is taken.
    #[error("{0}")]
    WorkspaceBusy(String),
    /// A workspace operation took too long.
    #[error("{0}")]
    WorkspaceTimeout(String),
    /// The approval expired.
    #[error("{0}")]
    ApprovalExpired(String),
    /// The database (or a task the gate depends on) is unavailable.
    #[error("database unavailable: {0}")]
    StoreUnavailable(String),
    /// A workspace path or file refused.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

impl GateError {
    /// The stable code clients match on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidRunId(_) => "invalid_run_id",
            Self::NotFound(_) => "not_found",
            Self::IntentDigestMismatch(_) => "intent_digest_mismatch",
            Self::DecisionNotAllowed(_) => "decision_not_allowed",
            Self::Conflict(_) => "conflict",
            Self::IntentExists(_) => "intent_exists",
            Self::PolicyDenied { code, .. } => code,
            Self::WorkspaceBusy(_) => "workspace_busy",
            Self::WorkspaceTimeout(_) => "workspace_timeout",
            Self::ApprovalExpired(_) => "approval_expired",
            Self::StoreUnavailable(_) => "store_unavailable",
            Self::Workspace(e) => e.code(),
        }
    }
}

impl From<toolgate_policy::PolicyError> for GateError {
    fn from(e: toolgate_policy::PolicyError) -> Self {
        match e {
            toolgate_policy::PolicyError::InvalidRunId { .. } => Self::InvalidRunId(e.to_string()),
            other => Self::InvalidRequest(other.to_string()),
        }
    }
}

impl From<toolgate_store::StoreError> for GateError {
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
