//! The client's one error, with stable codes.

use serde_json::Value;
use toolgate_contract::errors::{self, ApiErrorCode};

/// Everything asking the sidecar can end in besides an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Setup(String),
    /// The sidecar could not be reached, or did not answer in time.
    #[error("the sidecar at {url} is unreachable ({source})")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// What the transport reported.
        #[source]
        source: reqwest::Error,
    },
    /// The sidecar answered something that is not the agent API's shape.
    #[error("unreadable sidecar answer ({0})")]
    Unreadable(String),
    /// The sidecar answered with its error envelope.
    #[error("the sidecar refused ({status}, {code}: {message})")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The envelope's code: one of [`errors::ALL`] from a sidecar of
        /// this contract, `unknown` when the envelope had none.
        code: String,
        /// The sidecar's message.
        message: String,
    },
}

/// Code of [`ClientError::Setup`].
pub const CLIENT_SETUP: &str = "client_setup";
/// Code of [`ClientError::Unreachable`] (what `toolgate mcp wrap` reports).
pub const SIDECAR_UNREACHABLE: &str = "sidecar_unreachable";
/// Code of [`ClientError::Unreadable`].
pub const SIDECAR_UNREADABLE: &str = "sidecar_unreadable";

impl ClientError {
    /// The stable code: the sidecar's own for [`ClientError::Refused`].
    pub fn code(&self) -> &str {
        match self {
            Self::Setup(_) => CLIENT_SETUP,
            Self::Unreachable { .. } => SIDECAR_UNREACHABLE,
            Self::Unreadable(_) => SIDECAR_UNREADABLE,
            Self::Refused { code, .. } => code,
        }
    }

    /// The contract's entry of a refusal's code (`None` for the client's
    /// own errors and for a code this contract does not know).
    pub fn contract_code(&self) -> Option<&'static ApiErrorCode> {
        match self {
            Self::Refused { code, .. } => errors::lookup(code),
            _ => None,
        }
    }

    /// Reads `{"error": {"code", "message"}}` answered with `status`.
    pub(crate) fn from_envelope(status: u16, body: &Value) -> Self {
        let text = |p: &str| body.pointer(p).and_then(Value::as_str);
        Self::Refused {
            status,
            code: text("/error/code").unwrap_or("unknown").to_owned(),
            message: text("/error/message").unwrap_or_default().to_owned(),
        }
    }
}
