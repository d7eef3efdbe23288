//! Environment variables the webhook sets in an injected pod and the
//! sidecar (or an agent's client) reads. Every `TOOLGATE_*` flag variable
//! of the sidecar is here, so the injector and the flags cannot drift.

/// The sidecar's URL, in every app container.
pub const URL: &str = "TOOLGATE_URL";
/// Database URL (from the tenant's Secret in an injected pod).
pub const DATABASE_URL: &str = "TOOLGATE_DATABASE_URL";
/// Tenant the sidecar serves (the pod's namespace when injected).
pub const TENANT: &str = "TOOLGATE_TENANT";
/// The pod's name (downward API).
pub const POD_NAME: &str = "POD_NAME";
/// The pod's namespace (downward API).
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
/// MCP upstreams `NAME=URL,…`.
pub const MCP_UPSTREAMS: &str = "TOOLGATE_MCP_UPSTREAMS";
/// Bundle file.
pub const BUNDLE: &str = "TOOLGATE_BUNDLE";
/// Trust set file.
pub const TRUST: &str = "TOOLGATE_TRUST";
/// Agent API listen address.
pub const LISTEN: &str = "TOOLGATE_LISTEN";
/// Probes-and-metrics listen address.
pub const OPS_LISTEN: &str = "TOOLGATE_OPS_LISTEN";
/// Workspace base directory.
pub const WORKSPACE_BASE: &str = "TOOLGATE_WORKSPACE_BASE";
/// Extra host names the agent API answers to.
pub const ALLOWED_HOSTS: &str = "TOOLGATE_ALLOWED_HOSTS";
/// How often the bundle file is checked.
pub const RELOAD_INTERVAL: &str = "TOOLGATE_RELOAD_INTERVAL";
/// How often the sidecar records its heartbeat.
pub const HEARTBEAT_INTERVAL: &str = "TOOLGATE_HEARTBEAT_INTERVAL";
