//! Errors the command line reports as `{"error": {"code", "message"}}`.

use toolgate_bundle::BundleError;
use toolgate_policy::PolicyError;

/// A failure of one command, with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A policy, case file or call was rejected.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A bundle, key or trust file was rejected.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The database refused or failed an operation.
    #[error(transparent)]
    Store(#[from] toolgate_store::StoreError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A command-line value is unusable.
    #[error("{0}")]
    Usage(String),
    /// The controller failed to start or stopped with an error.
    #[error("controller: {0}")]
    Controller(#[from] toolgate_controller::ControllerError),
    /// Generating or writing the CRDs failed.
    #[error("crdgen: {0}")]
    K8s(#[from] toolgate_k8s::K8sError),
    /// The webhook's configuration or server failed.
    #[error("webhook: {0}")]
    Webhook(#[from] toolgate_webhook::WebhookError),
    /// The sidecar failed to start.
    #[error("sidecar failed to start: {0}")]
    Sidecar(#[from] toolgate_sidecar::StartError),
    /// The MCP gateway could not reach the sidecar or run its server.
    #[error("mcp: {0}")]
    Mcp(#[from] toolgate_mcp::McpError),
    /// The console could not start.
    #[error("console: {0}")]
    Console(#[from] toolgate_console::ConsoleError),
    /// A test-case file holds a field no case defines.
    #[error("{field}: unknown field `{name}` in a test case")]
    CaseUnknownField {
        /// Where (the case's index and path).
        field: String,
        /// The unknown field's name.
        name: String,
    },
    /// A stored decision-log checkpoint is signed but not a valid
    /// checkpoint, or is filed under another position than it signs.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}

impl CliError {
    /// Stable code of the error: the failing component's own code, so a
    /// start-up failure says what failed (`kube_config`, `tls`, ...).
    pub fn code(&self) -> &str {
        match self {
            Self::Policy(e) => e.code(),
            Self::Bundle(e) => e.code(),
            Self::Store(e) => e.code(),
            Self::Controller(e) => e.code(),
            Self::K8s(e) => e.code(),
            Self::Webhook(e) => e.code(),
            Self::Sidecar(e) => e.code(),
            Self::Mcp(e) => e.code(),
            Self::Console(e) => e.code(),
            Self::Io { .. } => "io_error",
            Self::Usage(_) => "usage",
            Self::Checkpoint(_) => "checkpoint_invalid",
            Self::CaseUnknownField { .. } => "case_unknown_field",
        }
    }

    /// The `{error: {code, message}}` body.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

/// Reads a whole file as UTF-8 text.
pub fn read_text(path: &std::path::Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Reads a whole file as bytes.
pub fn read_bytes(path: &std::path::Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Writes a whole file.
pub fn write_bytes(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, bytes).map_err(|source| CliError::Io {
        path: path.display().to_string(),
        source,
    })
}
