//! The one error type of this crate, with stable machine-readable codes.

use toolgate_policy::PolicyError;

/// Why a review was denied or the server could not start. Each variant has a
/// stable [`code`](WebhookError::code); messages name the offending field.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The body is not JSON, or not an `admission.k8s.io/v1` AdmissionReview.
    #[error("malformed AdmissionReview: {0}")]
    MalformedReview(String),
    /// The body is larger than the configured limit.
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The reviewed object lacks a field the webhook needs, or has the wrong shape.
    #[error("{field}: {message}")]
    InvalidObject {
        /// Dotted path of the field, e.g. `object.spec.containers`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The pod asks for something the injector cannot honour (bad profile
    /// name, a volume name toolgate needs is taken, no namespace), or has a
    /// shape that would defeat the sidecar's isolation (a tenant other than
    /// its namespace, its own `toolgate-sidecar`, host namespaces, mounts of
    /// the sidecar's volumes).
    #[error("{field}: {message}")]
    Injection {
        /// Dotted path of the field.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A PolicyProfile spec does not load or compile.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// An Approval is not well formed, or an update tries to change a
    /// resolved one: the shared rules of [`toolgate_k8s::validate_approval`]
    /// (codes `approval_invalid`, `approval_immutable`).
    #[error(transparent)]
    Approval(#[from] toolgate_k8s::K8sError),
    /// A decision by someone who is not an approver of the profile the
    /// approval answers for, or whose profile cannot be found.
    #[error("{field}: {message}")]
    ApproverNotAllowed {
        /// Dotted path of the field, e.g. `spec.decision`.
        field: String,
        /// Who decided and which approvers would have been allowed.
        message: String,
    },
    /// The approvers of a profile could not be read (API unreachable, no
    /// client, RBAC): the decision is refused, fail closed.
    #[error(
        "spec.decision: cannot read the approvers of {profile}: {message}; the decision is refused"
    )]
    ApproversUnavailable {
        /// The profile, e.g. `PolicyProfile agents/safe-coding`.
        profile: String,
        /// What failed.
        message: String,
    },
    /// A request Approval, or any Approval named with the mirror's `apr-`
    /// prefix, created by someone other than the controller: only the
    /// controller mirrors database rows, so such an object from anyone else
    /// could only show approvers something other than the call waiting.
    #[error(
        "spec.request: request Approvals (and the names apr-*) are created by the controller ({controller}) only, not by {writer}"
    )]
    RequestNotFromController {
        /// Who tried.
        writer: String,
        /// Who may (`--controller-user`).
        controller: String,
    },
    /// A pod update would change, remove or reach into the injected sidecar.
    #[error("{field}: {message}")]
    SidecarImmutable {
        /// Dotted path of the field.
        field: String,
        /// What was attempted.
        message: String,
    },
    /// A certificate or key file is missing, unparsable or inconsistent.
    #[error("TLS {path}: {message}")]
    Tls {
        /// The file (or files) concerned.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Binding or accepting on the listen address failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A bug: something that cannot fail did.
    #[error("internal error: {0}")]
    Internal(String),
}

impl WebhookError {
    /// Stable snake_case code, used in `status.reason` and `{error: {code}}`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MalformedReview(_) => "malformed_review",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::InvalidObject { .. } => "invalid_object",
            Self::Injection { .. } => "injection_refused",
            Self::Policy(e) => e.code(),
            Self::Approval(e) => e.code(),
            Self::SidecarImmutable { .. } => "sidecar_immutable",
            Self::ApproverNotAllowed { .. } => "approver_not_allowed",
            Self::ApproversUnavailable { .. } => "approvers_unavailable",
            Self::RequestNotFromController { .. } => "request_not_from_controller",
            Self::Tls { .. } => "tls_config",
            Self::Io { .. } => "io",
            Self::Internal(_) => "internal",
        }
    }

    /// Dotted path of the offending field, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidObject { field, .. }
            | Self::Injection { field, .. }
            | Self::SidecarImmutable { field, .. }
            | Self::ApproverNotAllowed { field, .. } => Some(field),
            Self::ApproversUnavailable { .. } => Some("spec.decision"),
            Self::RequestNotFromController { .. } => Some("spec.request"),
            Self::Policy(e) => e.field(),
            Self::Approval(e) => e.field(),
            _ => None,
        }
    }

    /// HTTP status this error maps to: in an AdmissionResponse's
    /// `status.code`, or of the HTTP reply when no review could be read.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::MalformedReview(_) | Self::InvalidObject { .. } => 400,
            Self::BodyTooLarge { .. } => 413,
            Self::Injection { .. }
            | Self::SidecarImmutable { .. }
            | Self::ApproverNotAllowed { .. }
            | Self::RequestNotFromController { .. } => 403,
            Self::ApproversUnavailable { .. } => 503,
            Self::Approval(toolgate_k8s::K8sError::ApprovalImmutable { .. }) => 403,
            Self::Policy(_) | Self::Approval(toolgate_k8s::K8sError::InvalidApproval { .. }) => 422,
            Self::Approval(toolgate_k8s::K8sError::Io(_)) => 500,
            Self::Tls { .. } | Self::Io { .. } | Self::Internal(_) => 500,
        }
    }

    /// The error as the `{error: {code, message}}` body every toolgate API returns.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}
