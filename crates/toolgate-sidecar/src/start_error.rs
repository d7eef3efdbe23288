//! Why a sidecar could not start, with a stable code.

use std::net::SocketAddr;

/// Why a sidecar could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database could not be opened or migrated.
    #[error("database: {0}")]
    Store(#[from] toolgate_store::StoreError),
    /// The workspace base is unusable.
    #[error("workspace: {0}{hint}", hint = base_hint(.0))]
    Workspace(#[from] toolgate_gate::workspace::WorkspaceError),
    /// The listen address could not be bound.
    #[error("listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// A flag value is unusable (see [`SidecarConfig`]'s `TryFrom<SidecarArgs>`).
    #[error("{0}")]
    Usage(String),
    /// The MCP gateway's HTTP client could not be built.
    #[error("MCP gateway client: {0}")]
    McpClient(#[source] reqwest::Error),
}

/// What to do about a base directory that cannot be created: on a laptop
/// the default (the pod's volume path) usually cannot be.
fn base_hint(e: &toolgate_gate::workspace::WorkspaceError) -> String {
    match e {
        toolgate_gate::workspace::WorkspaceError::BaseUnusable { .. } => format!(
            "; pass --workspace-base DIR (or {}) naming a directory this user may create \
             (the default, {}, is the pod's volume)",
            toolgate_contract::env::WORKSPACE_BASE,
            crate::config::DEFAULT_WORKSPACE_BASE
        ),
        _ => String::new(),
    }
}

impl StartError {
    /// Stable code: the store's own code, `workspace_unusable`,
    /// `listen_failed` or `usage` (what the CLI calls every bad flag).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Store(e) => e.code(),
            Self::Workspace(_) => "workspace_unusable",
            Self::Bind(..) => "listen_failed",
            Self::Usage(_) => "usage",
            Self::McpClient(_) => "mcp_client_unusable",
        }
    }
}
