//! The console's one error type, each with a stable code and an HTTP status.

use axum::http::StatusCode;

/// Why the console could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Nobody usable is signed in (or a forwarded identity is not trusted).
    #[error("{0}")]
    Unauthenticated(String),
    /// A form without its token, or from another site.
    #[error("{0}")]
    Forbidden(String),
    /// The Kubernetes API refused, in its own words (RBAC, the webhook).
    #[error("{message}")]
    Refused {
        /// The API server's HTTP status.
        status: u16,
        /// Its message (a webhook's denial is in it).
        message: String,
    },
    /// The API server could not be reached or answered nonsense.
    #[error("Kubernetes API unavailable: {0}")]
    Unavailable(String),
    /// The form or path is not one the console takes.
    #[error("{0}")]
    InvalidRequest(String),
    /// A path names no namespace or object the API server could hold;
    /// refused before any request is made.
    #[error("{0}")]
    InvalidName(String),
    /// The console is misconfigured.
    #[error("{0}")]
    Config(String),
    /// Too many sign-in attempts from one address: wait and retry.
    #[error("{message}")]
    RateLimited {
        /// What happened, in words.
        message: String,
        /// Seconds until an attempt is taken again (`Retry-After`).
        retry_after: u64,
    },
    /// The list of signed-out sessions is full: no sign-in (or sign-out)
    /// until one of them expires.
    #[error("{message}")]
    Busy {
        /// What happened, in words.
        message: String,
        /// Seconds until one expires (`Retry-After`).
        retry_after: u64,
    },
}

impl ConsoleError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
            Self::Refused { .. } => "kubernetes_refused",
            Self::Unavailable(_) => "kubernetes_unavailable",
            Self::InvalidRequest(_) => "invalid_request",
            Self::InvalidName(_) => "invalid_name",
            Self::Config(_) => "console_config",
            Self::RateLimited { .. } => "rate_limited",
            Self::Busy { .. } => "sign_outs_full",
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Refused { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            Self::Unavailable(_) => StatusCode::BAD_GATEWAY,
            Self::InvalidRequest(_) | Self::InvalidName(_) => StatusCode::BAD_REQUEST,
            Self::Config(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// When to try again (`Retry-After`, seconds), for what passes with time.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Busy { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }
}

impl From<kube::Error> for ConsoleError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => Self::Refused {
                status: status.code,
                message: status.message,
            },
            other => Self::Unavailable(other.to_string()),
        }
    }
}
