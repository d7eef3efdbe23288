//! The one error type of this crate, with stable machine-readable codes.

/// Why a custom resource was judged invalid, or the CRDs could not be
/// written. Each variant has a stable [`code`](K8sError::code); approval
/// messages name the offending field.
#[derive(Debug, thiserror::Error)]
pub enum K8sError {
    /// An Approval is not well formed, or its decision is not attributed to
    /// the user making it.
    #[error("{field}: {message}")]
    InvalidApproval {
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An update tries to change a resolved Approval.
    #[error("{field}: {message}")]
    ApprovalImmutable {
        /// Dotted path of the field.
        field: String,
        /// What was attempted.
        message: String,
    },
    /// Writing the generated CRD files failed.
    #[error("io: {0}")]
    Io(String),
}

impl K8sError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidApproval { .. } => "approval_invalid",
            Self::ApprovalImmutable { .. } => "approval_immutable",
            Self::Io(_) => "io",
        }
    }

    /// The field a validation error names, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::InvalidApproval { field, .. } | Self::ApprovalImmutable { field, .. } => {
                Some(field)
            }
            Self::Io(_) => None,
        }
    }
}
