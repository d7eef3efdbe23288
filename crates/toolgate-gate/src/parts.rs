//! What a [`Gate`](crate::Gate) is built from. The sidecar wires these
//! once at start-up and keeps the handles it needs for its own work (bundle
//! reloads, heartbeats, the MCP task book); once built, the gate's own
//! fields are private and every decision goes through its methods.

use std::sync::Arc;

use toolgate_store::Store;

use crate::{DecisionLog, Metrics, PolicyState, Workspaces};

/// The parts of a [`Gate`](crate::Gate), moved in by
/// [`Gate::new`](crate::Gate::new).
pub struct GateParts {
    /// The bundle state the gate enforces (reloaded by the sidecar).
    pub policy: Arc<PolicyState>,
    /// The shared database.
    pub store: Store,
    /// Background writer for low-risk decisions.
    pub decision_log: DecisionLog,
    /// Workspace roots.
    pub workspaces: Workspaces,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Tenant this sidecar serves.
    pub tenant: String,
    /// This sidecar instance's decision stream (`{pod}/{uuidv7}`).
    pub stream: String,
    /// Who this sidecar is (for `requested_by`).
    pub identity: String,
    /// The pod this sidecar serves.
    pub pod: String,
    /// Whether a call's span carries its arguments.
    pub trace_arguments: bool,
}
