//! Command-line flags of `toolgate sidecar` and the configuration they
//! produce: one place for every default, so the flags and an embedded
//! sidecar cannot drift apart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use toolgate_contract::names::{McpUpstreamFault, parse_mcp_upstream};
use toolgate_contract::{env, names};

use crate::database::DatabaseArgs;
use crate::start_error::StartError;
use toolgate_store::StoreOptions;

/// Default `--workspace-base`: where the webhook mounts the injected
/// sidecar's workspace volume.
pub const DEFAULT_WORKSPACE_BASE: &str = names::WORKSPACE_BASE;
/// Default tenant, for a sidecar outside a multi-tenant cluster.
pub const DEFAULT_TENANT: &str = "default";
/// Default pod name for heartbeats when no downward API is present.
pub const DEFAULT_POD_NAME: &str = "local";
/// Default pod namespace for heartbeats when no downward API is present.
pub const DEFAULT_POD_NAMESPACE: &str = "default";
/// Default time between bundle file checks (`--reload-interval`).
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(2);
/// Default time between heartbeats (`--heartbeat-interval`): two in the
/// controller's fleet window of 60 s, and with the stop watcher's safety
/// read what an idle sidecar asks of the database (see docs/database.md).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// Default capacity of the low-risk decision queue.
pub const DEFAULT_DECISION_QUEUE: usize = 65_536;

/// Flags of `toolgate sidecar`; each also reads a `TOOLGATE_*` variable.
/// Flatten into a clap command with `#[command(flatten)]` and turn into a
/// [`SidecarConfig`] with `SidecarConfig::try_from`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct SidecarArgs {
    /// Signed bundle (DSSE envelope) to enforce; reloaded when it changes.
    #[arg(long, env = env::BUNDLE)]
    pub bundle: PathBuf,
    /// Trusted public keys (concatenated PEM blocks).
    #[arg(long, env = env::TRUST)]
    pub trust: PathBuf,
    /// The database and how to reach it.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Address to serve on (keep it on loopback).
    #[arg(long, env = env::LISTEN, default_value = names::SIDECAR_LISTEN)]
    pub listen: SocketAddr,
    /// Address for `/healthz`, `/readyz` and `/metrics` (kubelet probes and
    /// Prometheus reach the pod IP, not loopback); `off` to disable.
    #[arg(long, env = env::OPS_LISTEN, default_value = names::OPS_LISTEN)]
    pub ops_listen: String,
    /// Directory holding `<tenant>/<run_id>` workspaces.
    #[arg(long, env = env::WORKSPACE_BASE, default_value = DEFAULT_WORKSPACE_BASE)]
    pub workspace_base: PathBuf,
    /// Tenant this sidecar serves.
    #[arg(long, env = env::TENANT, default_value = DEFAULT_TENANT)]
    pub tenant: String,
    /// Pod name for heartbeats (downward API).
    #[arg(long, env = env::POD_NAME, default_value = DEFAULT_POD_NAME)]
    pub pod_name: String,
    /// Pod namespace for heartbeats (downward API).
    #[arg(long, env = env::POD_NAMESPACE, default_value = DEFAULT_POD_NAMESPACE)]
    pub pod_namespace: String,
    /// Extra `Host` names or addresses the agent API answers to, besides
    /// loopback, `localhost` and the pod name (repeatable or comma-separated).
    #[arg(
        long = "allowed-host",
        env = env::ALLOWED_HOSTS,
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// MCP upstream `NAME=URL` served as a governed MCP endpoint at `/mcp/NAME`
    /// (repeatable or comma-separated; the webhook fills it from the pod
    /// annotation `toolgate.dev/mcp-upstreams`).
    #[arg(
        long = "mcp-upstream",
        env = env::MCP_UPSTREAMS,
        value_delimiter = ',',
        value_parser = parse_upstream
    )]
    pub mcp_upstreams: Vec<(String, String)>,
    /// Directory holding each MCP upstream's credential: file `NAME` is the
    /// `Authorization` value sent to upstream `NAME` (mount a Secret here;
    /// the agent's own `Authorization` never reaches an upstream).
    #[arg(long = "mcp-credentials-dir", env = env::MCP_CREDENTIALS_DIR)]
    pub mcp_credentials_dir: Option<PathBuf>,
    /// Time between bundle file checks, in the duration syntax of every
    /// flag (`2s`, `500ms`, `1m`; at least 100 ms).
    #[arg(long, env = env::RELOAD_INTERVAL, default_value = "2s", value_parser = parse_interval)]
    pub reload_interval: Duration,
    /// Time between heartbeats (fleet status) and refreshes of the
    /// `toolgate_open_intents` gauge (`30s`; at least 100 ms).
    #[arg(long, env = env::HEARTBEAT_INTERVAL, default_value = "30s", value_parser = parse_interval)]
    pub heartbeat_interval: Duration,
    /// Base URL of a wake-up relay (`toolgate wakeups serve`) to hear stops
    /// from, instead of the database's `LISTEN`: for sidecars behind a
    /// transaction pooler, where a listener each would cost a server
    /// connection each.
    #[arg(long, env = env::WAKEUPS_URL)]
    pub wakeups_url: Option<String>,
    /// Record each call's arguments on its trace span
    /// (`gen_ai.tool.call.arguments`). Off: arguments may hold what the
    /// trace store must not.
    #[arg(long, env = env::TRACE_ARGUMENTS, value_parser = clap::builder::BoolishValueParser::new())]
    pub trace_arguments: bool,
}

/// A loop interval in the one duration syntax, at least 100 ms (a zero or
/// tiny interval would spin).
fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = toolgate_contract::parse_duration(text)?.unsigned_abs();
    if d < Duration::from_millis(100) {
        return Err(format!("interval `{text}` must be at least 100ms"));
    }
    Ok(d)
}

/// `NAME=URL`: a server name usable as a path segment and tool prefix, and
/// an `http(s)` URL (the rule the webhook applies to the pod annotation).
fn parse_upstream(text: &str) -> Result<(String, String), String> {
    match parse_mcp_upstream(text) {
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

/// Everything needed to run a sidecar.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    /// Address of the agent API; loopback in production.
    pub listen: SocketAddr,
    /// Address of `/healthz`, `/readyz` and `/metrics` for the kubelet and
    /// Prometheus (the pod IP); `None` serves them on `listen` only.
    pub ops_listen: Option<SocketAddr>,
    /// Signed bundle file (DSSE envelope).
    pub bundle: PathBuf,
    /// Trusted public keys (PEM).
    pub trust: PathBuf,
    /// Database URL (`postgres://…` or `sqlite://…`).
    pub database_url: String,
    /// How the store reaches it (pooler, direct URL, connections).
    pub store_options: StoreOptions,
    /// Directory holding `<tenant>/<run_id>` workspaces.
    pub workspace_base: PathBuf,
    /// Tenant served.
    pub tenant: String,
    /// Pod name (downward API), for heartbeats.
    pub pod_name: String,
    /// Pod namespace (downward API), for heartbeats.
    pub pod_namespace: String,
    /// How often the bundle files are checked for changes.
    pub reload_interval: Duration,
    /// How often a heartbeat is written.
    pub heartbeat_interval: Duration,
    /// Wake-up relay to hear stops from (`--wakeups-url`).
    pub wakeups_url: Option<String>,
    /// Capacity of the low-risk decision queue.
    pub decision_queue: usize,
    /// Host names or addresses, besides loopback and `localhost`, that the
    /// agent API accepts in `Host` (the pod name is always added).
    pub allowed_hosts: Vec<String>,
    /// MCP upstreams `(NAME, URL)` served at `/mcp/NAME` (the gateway).
    pub mcp_upstreams: Vec<(String, String)>,
    /// Where the upstreams' credentials are (`--mcp-credentials-dir`).
    pub mcp_credentials_dir: Option<PathBuf>,
    /// Whether a call's trace span carries its arguments.
    pub trace_arguments: bool,
}

impl SidecarConfig {
    /// The flags' defaults for everything but the files and the database,
    /// with no ops listener: for embedding a sidecar (the demo, tests,
    /// benchmarks), which set their own `listen` and `workspace_base`
    /// (the default base, [`DEFAULT_WORKSPACE_BASE`], is the pod's volume).
    pub fn new(bundle: PathBuf, trust: PathBuf, database_url: String) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], names::SIDECAR_PORT)),
            ops_listen: None,
            bundle,
            trust,
            database_url,
            store_options: StoreOptions::default(),
            workspace_base: PathBuf::from(DEFAULT_WORKSPACE_BASE),
            tenant: DEFAULT_TENANT.into(),
            pod_name: DEFAULT_POD_NAME.into(),
            pod_namespace: DEFAULT_POD_NAMESPACE.into(),
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            wakeups_url: None,
            decision_queue: DEFAULT_DECISION_QUEUE,
            allowed_hosts: Vec::new(),
            mcp_upstreams: Vec::new(),
            mcp_credentials_dir: None,
            trace_arguments: false,
        }
    }
}

impl TryFrom<SidecarArgs> for SidecarConfig {
    type Error = StartError;

    /// Fails ([`StartError::Usage`]) when `--ops-listen` is neither `off`
    /// nor an address; intervals below one second become one second.
    fn try_from(args: SidecarArgs) -> Result<Self, StartError> {
        // Renamed when the intervals became durations: refuse rather than
        // run silently at the default.
        for (old, new) in [
            ("TOOLGATE_RELOAD_SECONDS", env::RELOAD_INTERVAL),
            ("TOOLGATE_HEARTBEAT_SECONDS", env::HEARTBEAT_INTERVAL),
        ] {
            if std::env::var_os(old).is_some() {
                return Err(StartError::Usage(format!(
                    "{old} is no longer read: set {new} to a duration (e.g. 2s) instead"
                )));
            }
        }
        let ops_listen = match args.ops_listen.as_str() {
            "off" | "" => None,
            addr => Some(addr.parse().map_err(|e| {
                StartError::Usage(format!("--ops-listen `{addr}` is not an address: {e}"))
            })?),
        };
        Ok(Self {
            listen: args.listen,
            ops_listen,
            workspace_base: args.workspace_base,
            tenant: args.tenant,
            pod_name: args.pod_name,
            pod_namespace: args.pod_namespace,
            allowed_hosts: args.allowed_hosts,
            mcp_upstreams: args.mcp_upstreams,
            mcp_credentials_dir: args.mcp_credentials_dir,
            reload_interval: args.reload_interval,
            heartbeat_interval: args.heartbeat_interval,
            wakeups_url: args.wakeups_url,
            trace_arguments: args.trace_arguments,
            store_options: args.database.options(),
            ..Self::new(args.bundle, args.trust, args.database.database)
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SidecarArgs,
    }

    fn parse(extra: &[&str]) -> Result<SidecarArgs, clap::Error> {
        let base = [
            "sidecar",
            "--bundle",
            "/b",
            "--trust",
            "/t",
            "--database",
            "sqlite::memory:",
        ];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args)
    }

    #[test]
    fn defaults_match_the_embedded_config() {
        let config = SidecarConfig::try_from(parse(&[]).unwrap()).unwrap();
        let embedded = SidecarConfig::new("/b".into(), "/t".into(), "sqlite::memory:".into());
        assert_eq!(config.listen, embedded.listen);
        assert_eq!(config.workspace_base, embedded.workspace_base);
        assert_eq!(config.workspace_base, PathBuf::from(names::WORKSPACE_BASE));
        assert_eq!(config.tenant, embedded.tenant);
        assert_eq!(config.pod_name, embedded.pod_name);
        assert_eq!(config.pod_namespace, embedded.pod_namespace);
        assert_eq!(config.reload_interval, embedded.reload_interval);
        assert_eq!(config.heartbeat_interval, embedded.heartbeat_interval);
        assert_eq!(config.decision_queue, embedded.decision_queue);
        assert_eq!(config.ops_listen, Some(names::OPS_LISTEN.parse().unwrap()));
    }

    #[test]
    fn flags_parse_into_a_config() {
        let args = parse(&[
            "--ops-listen",
            "off",
            "--allowed-host",
            "a,b",
            "--mcp-upstream",
            "tickets=http://localhost:1/mcp",
            "--reload-interval",
            "500ms",
        ])
        .unwrap();
        let config = SidecarConfig::try_from(args).unwrap();
        assert_eq!(config.ops_listen, None);
        assert_eq!(config.allowed_hosts, ["a", "b"]);
        assert_eq!(
            config.mcp_upstreams,
            [("tickets".to_owned(), "http://localhost:1/mcp".to_owned())]
        );
        assert_eq!(config.reload_interval, Duration::from_millis(500));
        for too_short in ["0", "0s", "50ms", "x"] {
            assert!(
                parse(&["--heartbeat-interval", too_short]).is_err(),
                "{too_short}"
            );
        }
        assert!(parse(&["--mcp-upstream", "bad name=http://x"]).is_err());
        assert!(parse(&["--mcp-upstream", "x=ftp://x"]).is_err());
        let bad = SidecarConfig::try_from(parse(&["--ops-listen", "nowhere"]).unwrap());
        let err = bad.unwrap_err();
        assert_eq!(err.code(), "usage");
        assert!(
            err.to_string()
                .starts_with("--ops-listen `nowhere` is not an address: "),
            "{err}"
        );
    }
}
