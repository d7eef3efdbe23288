//! The per-pod toolgate sidecar.
//!
//! An agent asks the sidecar before every tool call (`POST /v1/authorize`),
//! records high-risk calls before running them (`/v1/intents`), waits for
//! humans on escalations (`/v1/approvals`), and reaches its files only
//! through a workspace handle (`/v1/workspace/*`). The sidecar listens on
//! loopback, fails closed (no valid bundle, expired bundle or unreachable
//! audit log on a high-risk path all deny), and exports Prometheus metrics.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod config;
pub mod database;
mod error;
mod guard;
pub mod mcp;
mod start_error;
mod trace_context;
pub mod wake;

pub use toolgate_gate::{policy_state, runs, workspace};

/// The sidecar's metrics: the gate's, plus the build-info and process
/// metrics every toolgate component exports.
pub mod metrics {
    pub use toolgate_gate::metrics::*;

    /// A registry of the sidecar's own with every family registered.
    pub fn sidecar_metrics() -> Metrics {
        let metrics = Metrics::new();
        register_common(metrics.registry(), "sidecar");
        metrics
    }
}

use axum::serve::ListenerExt;
use std::net::SocketAddr;
use std::sync::Arc;

pub use config::{SidecarArgs, SidecarConfig};
pub use error::ApiError;
pub use start_error::StartError;
use tokio::net::TcpListener;
use tokio::sync::watch;
use toolgate_store::{Heartbeat, Store};

use toolgate_gate::{BundleFiles, DecisionLog, Gate, GateParts, PolicyState, Workspaces};

use crate::api::AppState;

/// Names this sidecar instance's decision stream, `{pod}/{uuidv7}`, and
/// opens it linked to the newest stream of the same pod (the run before a
/// container restart), so the new chain names the head it follows. A fresh
/// nonce per start means a restarted sidecar never continues, and so never
/// races, a chain it may still have had appends in flight for. Opening is
/// best effort: if it fails (database briefly down) the first append seeds
/// the stream unlinked, and decisions are still chained and verified.
async fn open_stream(store: &Store, config: &SidecarConfig) -> String {
    let stream = format!("{}/{}", config.pod_name, uuid::Uuid::now_v7());
    let prefix = format!("{}/", config.pod_name);
    let previous = match store
        .decisions()
        .latest_stream(&config.tenant, &prefix)
        .await
    {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look up the previous decision stream");
            None
        }
    };
    match store
        .decisions()
        .open_stream(&config.tenant, &stream, previous.as_deref())
        .await
    {
        Ok(head) => tracing::info!(
            stream,
            previous = ?head.previous,
            "decision stream opened"
        ),
        Err(e) => {
            tracing::warn!(error = %e, stream, "decision stream not opened; it starts unlinked")
        }
    }
    stream
}

/// A running sidecar.
pub struct Sidecar {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// The bound probes-and-metrics address, when configured.
    pub ops_addr: Option<SocketAddr>,
    /// Shared state, for in-process inspection.
    pub state: Arc<AppState>,
    /// The database this sidecar writes to (demos and tests read it back).
    store: Store,
    /// The policy this sidecar loads bundles into (tests watch reloads).
    policy: Arc<PolicyState>,
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    background: Vec<tokio::task::JoinHandle<()>>,
    decision_writer: tokio::task::JoinHandle<()>,
}

impl Sidecar {
    /// The database this sidecar writes to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The bundle state this sidecar loads into: what it enforces and its
    /// last rejected load.
    pub fn policy(&self) -> &PolicyState {
        &self.policy
    }

    /// Connects to the database, loads the bundle (a bad or missing bundle
    /// does not stop start-up: the sidecar serves and denies `no_bundle`),
    /// binds and starts serving.
    pub async fn start(config: SidecarConfig) -> Result<Self, StartError> {
        let store = Store::connect_with(&config.database_url, config.store_options.clone()).await?;
        Self::start_with_store(config, store).await
    }

    /// Like [`Sidecar::start`] with an already connected store.
    pub async fn start_with_store(config: SidecarConfig, store: Store) -> Result<Self, StartError> {
        let metrics = metrics::sidecar_metrics();
        let policy = Arc::new(PolicyState::new(metrics.clone()));
        let files = BundleFiles {
            bundle: config.bundle.clone(),
            trust: config.trust.clone(),
        };
        policy.load_files(&files.bundle, &files.trust, jiff::Timestamp::now());
        // Anti-rollback across restarts: the newest sequence any sidecar
        // accepted for this profile is a floor for the bundle on disk.
        if let Some(e) = policy.current() {
            let namespace = e.namespace.clone().unwrap_or_default();
            let floor = store
                .profiles()
                .bundle_high_water(&namespace, &e.profile)
                .await?;
            if let Some((sequence, digest)) = floor {
                policy.set_floor(&namespace, &e.profile, sequence, &digest);
            }
        }
        if let Some(e) = policy.current() {
            record_profile(&store, &config, &e).await;
            policy_state::record_high_water(&store, &e).await;
        }

        let stream = open_stream(&store, &config).await;
        let (decision_log, decision_writer) = DecisionLog::start(
            store.clone(),
            stream.clone(),
            metrics.clone(),
            config.decision_queue,
        );
        metrics.precreate_mcp(config.mcp_upstreams.iter().map(|(n, _)| n.as_str()));
        let workspaces = Workspaces::new(&config.workspace_base, &config.tenant)?;
        let gate = Arc::new(Gate::new(GateParts {
            policy: policy.clone(),
            store: store.clone(),
            decision_log,
            workspaces,
            metrics: metrics.clone(),
            tenant: config.tenant.clone(),
            stream,
            identity: format!("sidecar:{}/{}", config.pod_namespace, config.pod_name),
            pod: config.pod_name.clone(),
            trace_arguments: config.trace_arguments,
        }));
        let gate_for_poll = gate.clone();
        let state = Arc::new(AppState {
            mcp: mcp::McpUpstreams::new(
                &config.mcp_upstreams,
                config.mcp_credentials_dir.clone(),
                gate.clone(),
                mcp::upstream_client(gate.egress()).map_err(StartError::McpClient)?,
                mcp::TaskBook {
                    store: store.clone(),
                    tenant: config.tenant.clone(),
                    metrics,
                },
            ),
            gate,
            local_hosts: Arc::new(
                config
                    .allowed_hosts
                    .iter()
                    .cloned()
                    .chain(std::iter::once(config.pod_name.clone()))
                    .collect(),
            ),
        });

        // Held MCP tasks kept by the last run of this sidecar go on.
        tokio::spawn(state.mcp.clone().resume_tasks());

        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| StartError::Bind(config.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| StartError::Bind(config.listen, e))?;
        let (shutdown, shutdown_rx) = watch::channel(false);

        let stop_signal = Arc::new(toolgate_gate::stops::StopSignal::default());
        let background = vec![
            tokio::spawn(policy_state::watch(
                policy.clone(),
                store.clone(),
                files,
                config.reload_interval,
                shutdown_rx.clone(),
            )),
            tokio::spawn(toolgate_gate::stops::watch_cancellations(
                gate_for_poll,
                stop_signal.clone(),
                shutdown_rx.clone(),
            )),
            match &config.wakeups_url {
                Some(base) => tokio::spawn(wake::from_relay(
                    reqwest::Client::new(),
                    base.clone(),
                    config.tenant.clone(),
                    stop_signal,
                    shutdown_rx.clone(),
                )),
                None => tokio::spawn(wake::from_store(
                    store.clone(),
                    config.tenant.clone(),
                    stop_signal,
                    shutdown_rx.clone(),
                )),
            },
            tokio::spawn(heartbeat_loop(
                store.clone(),
                policy.clone(),
                config.clone(),
                shutdown_rx.clone(),
            )),
        ];

        let ops = match config.ops_listen {
            Some(ops_addr) => Some(
                TcpListener::bind(ops_addr)
                    .await
                    .map_err(|e| StartError::Bind(ops_addr, e))?,
            ),
            None => None,
        };
        let ops_addr = ops.as_ref().and_then(|l| l.local_addr().ok());
        let ops_server = ops.map(|listener| {
            let mut rx = shutdown_rx.clone();
            let app = api::ops_router(state.clone());
            tokio::spawn(async move {
                let _ = axum::serve(listener.tap_io(no_delay), app)
                    .with_graceful_shutdown(async move {
                        let _ = rx.wait_for(|stop| *stop).await;
                    })
                    .await;
            })
        });
        let mut background = background;
        background.extend(ops_server);

        let app = api::router(state.clone());
        let mut rx = shutdown_rx;
        let server = tokio::spawn(async move {
            axum::serve(listener.tap_io(no_delay), app)
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|stop| *stop).await;
                })
                .await
        });
        tracing::info!(%addr, ?ops_addr, tenant = config.tenant, "sidecar listening");
        Ok(Self {
            addr,
            ops_addr,
            state,
            store,
            policy,
            shutdown,
            server,
            background,
            decision_writer,
        })
    }

    /// Stops accepting requests, finishes in-flight ones, then writes every
    /// queued decision record before returning.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
        // Calls held for their approval stop waiting and let the gate go.
        self.state.mcp.close_tasks();
        for task in self.background {
            let _ = task.await;
        }
        // Dropping the last sender lets the writer drain its queue and end.
        let Self {
            state,
            decision_writer,
            ..
        } = self;
        drop(state);
        let _ = decision_writer.await;
    }
}

/// Every accepted connection answers at once: without `TCP_NODELAY`, a
/// client that delays its ACKs (Python's `http.client`, blocking `httpx`)
/// waits ~40 ms for the second write of an answer (an SSE body after its
/// headers).
fn no_delay(tcp: &mut tokio::net::TcpStream) {
    let _ = tcp.set_nodelay(true);
}

async fn record_profile(store: &Store, config: &SidecarConfig, e: &policy_state::Enforced) {
    let v = e.policy.version();
    let load = toolgate_store::ProfileLoad {
        profile: e.profile.clone(),
        namespace: e.namespace.clone().unwrap_or_default(),
        policy_version: v.version.clone(),
        spec_sha256: v.spec_sha256.clone(),
        hardline_sha256: v.hardline_sha256.clone(),
        bundle_digest: Some(e.digest.clone()),
        loaded_by: format!("sidecar:{}/{}", config.pod_namespace, config.pod_name),
    };
    if let Err(err) = store
        .profiles()
        .record_profile_load(load, jiff::Timestamp::now())
        .await
    {
        tracing::warn!(error = %err, "could not record the profile load");
    }
}

/// Sets `toolgate_open_intents` from the database (the tenant's pending
/// intents, whichever sidecar wrote them).
async fn refresh_open_intents(store: &Store, policy: &PolicyState, tenant: &str) {
    match store.intents().open_counts(tenant).await {
        Ok(counts) => set_open_intents(policy, counts),
        Err(err) => tracing::warn!(error = %err, "could not count open intents"),
    }
}

fn set_open_intents(policy: &PolicyState, (safe, uncertain): (i64, i64)) {
    let gauge = &policy.metrics().open_intents;
    gauge.with_label_values(&["safe_to_retry"]).set(safe);
    gauge.with_label_values(&["uncertain"]).set(uncertain);
}

async fn heartbeat_loop(
    store: Store,
    policy: Arc<PolicyState>,
    config: SidecarConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(config.heartbeat_interval);
    let mut last_version = None;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(enforced) = policy.current() else {
            refresh_open_intents(&store, &policy, &config.tenant).await;
            continue;
        };
        if last_version.as_deref() != Some(enforced.policy_version.as_str()) {
            record_profile(&store, &config, &enforced).await;
            last_version = Some(enforced.policy_version.clone());
        }
        let beat = Heartbeat {
            pod_name: config.pod_name.clone(),
            pod_namespace: config.pod_namespace.clone(),
            profile: enforced.profile.clone(),
            policy_version: enforced.policy_version.clone(),
            sequence: i64::try_from(enforced.sequence).unwrap_or(i64::MAX),
            last_seen: jiff::Timestamp::now(),
            shadow: enforced.candidate.as_ref().map(|c| {
                let tallies = &policy.metrics().shadow_tallies;
                tallies.snapshot(&enforced.policy_version, &c.version().version)
            }),
        };
        // The beat and the open-intent count in one statement: an idle
        // sidecar's queries are a fleet's database load.
        match store
            .heartbeats()
            .record_heartbeat_and_count(&beat, &config.tenant)
            .await
        {
            Ok(counts) => set_open_intents(&policy, counts),
            Err(err) => tracing::warn!(error = %err, "heartbeat not recorded"),
        }
    }
}
