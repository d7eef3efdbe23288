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
        /// The refusing decision (the sidecar shows it in the error body).
        verdict: Box<crate::AuthorizeResponse>,
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
    /// The database refused this sidecar's role (a credential that is not
    /// the tenant's, missing grants): not transient, so not `unavailable`.
    #[error("database refused the sidecar's role: {0}")]
    StorePermissionDenied(String),
    /// A stored record does not parse.
    #[error("stored data is corrupt: {0}")]
    StoredDataCorrupt(String),
    /// A workspace path or file refused.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

impl GateError {
    /// The stable code clients match on.
    pub fn code(&self) -> &'static str {
        use toolgate_contract::errors as codes;
        match self {
            Self::InvalidRequest(_) => codes::INVALID_REQUEST,
            Self::InvalidRunId(_) => codes::INVALID_RUN_ID,
            Self::NotFound(_) => codes::NOT_FOUND,
            Self::IntentDigestMismatch(_) => codes::INTENT_DIGEST_MISMATCH,
            Self::DecisionNotAllowed(_) => codes::DECISION_NOT_ALLOWED,
            Self::Conflict(_) => codes::CONFLICT,
            Self::IntentExists(_) => codes::INTENT_EXISTS,
            Self::PolicyDenied { code, .. } => code,
            Self::WorkspaceBusy(_) => codes::WORKSPACE_BUSY,
            Self::WorkspaceTimeout(_) => codes::WORKSPACE_TIMEOUT,
            Self::ApprovalExpired(_) => codes::APPROVAL_EXPIRED,
            Self::StoreUnavailable(_) => codes::STORE_UNAVAILABLE,
            Self::StorePermissionDenied(_) => codes::PERMISSION_DENIED,
            Self::StoredDataCorrupt(_) => codes::STORED_DATA_CORRUPT,
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
            S::PermissionDenied(_) => Self::StorePermissionDenied(e.to_string()),
            S::Corrupt(_) => Self::StoredDataCorrupt(e.to_string()),
            _ => Self::StoreUnavailable(e.to_string()),
        }
    }
}
