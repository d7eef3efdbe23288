//! Environment variables the webhook sets in an injected pod and the
//! sidecar (or an agent's client) reads. Every `TOOLGATE_*` flag variable
//! of the sidecar is here, so the injector and the flags cannot drift.

/// The sidecar's URL, in every app container.
pub const URL: &str = "TOOLGATE_URL";
/// Database URL (from the tenant's Secret in an injected pod).
pub const DATABASE_URL: &str = "TOOLGATE_DATABASE_URL";
/// `transaction` when the database URL is a transaction-mode pooler.
pub const DATABASE_POOLER: &str = "TOOLGATE_DATABASE_POOLER";
/// Behind a pooler: the server's own URL (migrations, `LISTEN`).
pub const DATABASE_DIRECT_URL: &str = "TOOLGATE_DATABASE_DIRECT_URL";
/// Most database connections one process opens.
pub const DATABASE_MAX_CONNECTIONS: &str = "TOOLGATE_DATABASE_MAX_CONNECTIONS";
/// Tenant the sidecar serves (the pod's namespace when injected).
pub const TENANT: &str = "TOOLGATE_TENANT";
/// The pod's name (downward API).
pub const POD_NAME: &str = "POD_NAME";
/// The pod's namespace (downward API).
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";
/// `toolgate mcp wrap`: the run its calls are decided under.
pub const RUN_ID: &str = "TOOLGATE_RUN_ID";
/// MCP upstreams `NAME=URL,…`.
pub const MCP_UPSTREAMS: &str = "TOOLGATE_MCP_UPSTREAMS";
/// Directory of the MCP upstreams' credentials: file `NAME` holds the
/// `Authorization` value the gateway sends upstream `NAME` (a mounted Secret).
pub const MCP_CREDENTIALS_DIR: &str = "TOOLGATE_MCP_CREDENTIALS_DIR";
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
/// Base URL of a wake-up relay (`toolgate wakeups serve`) the sidecar
/// hears stops from.
pub const WAKEUPS_URL: &str = "TOOLGATE_WAKEUPS_URL";
/// How often the sidecar records its heartbeat.
pub const HEARTBEAT_INTERVAL: &str = "TOOLGATE_HEARTBEAT_INTERVAL";
/// Every long-running command: log JSON lines (boolish: `1`, `true`, …).
pub const LOG_JSON: &str = "TOOLGATE_LOG_JSON";

/// Sidecar: `true` records each call's arguments on its trace span.
pub const TRACE_ARGUMENTS: &str = "TOOLGATE_TRACE_ARGUMENTS";

/// The OpenTelemetry SDK's standard variables toolgate reads (and the
/// webhook sets on an injected sidecar): traces are exported over OTLP
/// when an endpoint is named, and not otherwise.
pub mod otel {
    /// OTLP endpoint for every signal (`http://collector:4318`).
    pub const EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
    /// OTLP endpoint for traces only (used as given, path included).
    pub const EXPORTER_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
    /// `http/protobuf` (the default) or `http/json`.
    pub const EXPORTER_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
    /// `otlp` (the default once an endpoint is named) or `none`.
    pub const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
    /// `true` turns every signal off, whatever else is set.
    pub const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
    /// `service.name`; each command has its own default.
    pub const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
    /// `key=value,…` resource attributes (`k8s.pod.name=…`).
    pub const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
    /// Sampler name (`parentbased_traceidratio`, …).
    pub const TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
    /// Sampler argument (the ratio).
    pub const TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
    /// The caller's trace context handed to a child process (the
    /// environment carrier): what the hook passes on to the sidecar.
    pub const TRACEPARENT: &str = "TRACEPARENT";
    /// Vendor trace state beside [`TRACEPARENT`].
    pub const TRACESTATE: &str = "TRACESTATE";
}
