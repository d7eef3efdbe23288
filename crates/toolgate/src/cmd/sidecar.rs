//! `toolgate sidecar`: the per-pod enforcement server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use toolgate_sidecar::{Sidecar, SidecarConfig};

use crate::cli_error::CliError;

/// Arguments of `toolgate sidecar`; each also reads a `TOOLGATE_*` variable.
#[derive(Debug, Args)]
pub struct SidecarArgs {
    /// Signed bundle (DSSE envelope) to enforce; reloaded when it changes.
    #[arg(long, env = "TOOLGATE_BUNDLE")]
    pub bundle: PathBuf,
    /// Trusted public keys (concatenated PEM blocks).
    #[arg(long, env = "TOOLGATE_TRUST")]
    pub trust: PathBuf,
    /// Database URL: `postgres://…` or `sqlite://path?mode=rwc`.
    #[arg(long, env = "TOOLGATE_DATABASE_URL")]
    pub database: String,
    /// Address to serve on (keep it on loopback).
    #[arg(long, env = "TOOLGATE_LISTEN", default_value = toolgate_k8s::names::SIDECAR_LISTEN)]
    pub listen: SocketAddr,
    /// Address for `/healthz`, `/readyz` and `/metrics` (kubelet probes and
    /// Prometheus reach the pod IP, not loopback); `off` to disable.
    #[arg(long, env = "TOOLGATE_OPS_LISTEN", default_value = toolgate_k8s::names::OPS_LISTEN)]
    pub ops_listen: String,
    /// Directory holding `<tenant>/<run_id>` workspaces.
    #[arg(
        long,
        env = "TOOLGATE_WORKSPACE_BASE",
        default_value = "/var/lib/toolgate/workspaces"
    )]
    pub workspace_base: PathBuf,
    /// Tenant this sidecar serves.
    #[arg(long, env = "TOOLGATE_TENANT", default_value = "default")]
    pub tenant: String,
    /// Pod name for heartbeats (downward API).
    #[arg(long, env = "POD_NAME", default_value = "local")]
    pub pod_name: String,
    /// Pod namespace for heartbeats (downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub pod_namespace: String,
    /// Extra `Host` names or addresses the agent API answers to, besides
    /// loopback, `localhost` and the pod name (repeatable or comma-separated).
    #[arg(
        long = "allowed-host",
        env = "TOOLGATE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// MCP upstream `NAME=URL` served as a governed MCP endpoint at `/mcp/NAME`
    /// (repeatable or comma-separated; the webhook fills it from the pod
    /// annotation `toolgate.dev/mcp-upstreams`).
    #[arg(
        long = "mcp-upstream",
        env = "TOOLGATE_MCP_UPSTREAMS",
        value_delimiter = ',',
        value_parser = parse_upstream
    )]
    pub mcp_upstreams: Vec<(String, String)>,
    /// Seconds between bundle file checks.
    #[arg(long, env = "TOOLGATE_RELOAD_SECONDS", default_value_t = 2)]
    pub reload_seconds: u64,
    /// Seconds between heartbeats (fleet status) and refreshes of the
    /// `toolgate_open_intents` gauge.
    #[arg(long, env = "TOOLGATE_HEARTBEAT_SECONDS", default_value_t = 15)]
    pub heartbeat_seconds: u64,
}

/// Runs the sidecar until SIGTERM or Ctrl-C, then shuts down gracefully.
pub fn run(args: SidecarArgs, log_json: bool) -> Result<ExitCode, CliError> {
    crate::logging::init(log_json);
    let mut config = SidecarConfig::new(args.bundle, args.trust, args.database);
    config.listen = args.listen;
    config.ops_listen = match args.ops_listen.as_str() {
        "off" | "" => None,
        addr => Some(addr.parse().map_err(|e| {
            CliError::Usage(format!("--ops-listen `{addr}` is not an address: {e}"))
        })?),
    };
    config.workspace_base = args.workspace_base;
    config.tenant = args.tenant;
    config.pod_name = args.pod_name;
    config.pod_namespace = args.pod_namespace;
    config.allowed_hosts = args.allowed_hosts;
    config.mcp_upstreams = args.mcp_upstreams;
    config.reload_interval = Duration::from_secs(args.reload_seconds.max(1));
    config.heartbeat_interval = Duration::from_secs(args.heartbeat_seconds.max(1));
    crate::runtime()?.block_on(async move {
        let sidecar = Sidecar::start(config).await?;
        crate::wait_for_signal().await;
        tracing::info!("shutting down: draining requests and the decision log");
        sidecar.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// `NAME=URL`: a server name usable as a path segment and tool prefix, and
/// an `http(s)` URL.
fn parse_upstream(text: &str) -> Result<(String, String), String> {
    use toolgate_k8s::names::McpUpstreamFault;
    match toolgate_k8s::names::parse_mcp_upstream(text) {
        Ok((name, url)) => Ok((name.to_owned(), url.to_owned())),
        Err(McpUpstreamFault::NotNameUrl) => Err(format!("`{text}` is not NAME=URL")),
        Err(McpUpstreamFault::BadName(name)) => Err(format!(
            "MCP server name `{name}` must be 1-64 characters of A-Z, a-z, 0-9, '-' and '_'"
        )),
        Err(McpUpstreamFault::BadUrl(url)) => Err(format!(
            "MCP upstream `{url}` must be an http:// or https:// URL"
        )),
    }
}
