//! `run_controller`: wiring of client, store, leader election, reconcilers
//! and the metrics endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::SignedDuration;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{Controller, watcher};
use toolgate_store::Store;

use crate::context::{Context, Settings};
use crate::crd::{Approval, PolicyProfile};
use crate::error::ControllerError;
use crate::leader::LeaderElector;
use crate::metrics::{Health, Metrics};

/// Command-line arguments of `toolgate controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Database URL (`postgres://…` or `sqlite://path?mode=rwc`).
    #[arg(long, env = "TOOLGATE_DATABASE_URL")]
    pub database: String,
    /// Namespace the controller runs in: signing key Secret, trust ConfigMap, leader Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "toolgate-system")]
    pub namespace: String,
    /// Namespace for Approval objects mirrored from the database (default: --namespace).
    #[arg(long, env = "TOOLGATE_APPROVALS_NAMESPACE")]
    pub approvals_namespace: Option<String>,
    /// Address of the /metrics, /healthz and /readyz endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_listen: SocketAddr,
    /// Validity of signed bundles (e.g. `24h`, `90m`); re-signed when a third remains.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub bundle_validity: SignedDuration,
    /// How often pending approvals are mirrored from the database.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub approval_sync_interval: SignedDuration,
    /// Identity in the leader Lease (default: $POD_NAME, else the hostname).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Leader lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: SignedDuration,
    /// Secret (key `url`) written into each namespace that has a PolicyProfile,
    /// holding that namespace's own PostgreSQL tenant role; the injected sidecars
    /// read it. Needs CREATEROLE for the controller's database user.
    #[arg(long, env = "TOOLGATE_TENANT_SECRET", default_value = crate::tenancy::DATABASE_SECRET)]
    pub tenant_secret: String,
    /// Do not provision tenant roles or write tenant Secrets (manage them yourself
    /// with `toolgate tenant provision`).
    #[arg(long)]
    pub no_tenant_provisioning: bool,
    /// Base URL for tenant URLs (host, port, database and options the sidecars use);
    /// default: --database.
    #[arg(long, env = "TOOLGATE_TENANT_DATABASE_URL")]
    pub tenant_database_url: Option<String>,
}

/// Parses `24h`, `90m`, `5s`, `1h30m` or ISO 8601 (`PT24H`).
pub fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    let d: SignedDuration = text
        .parse()
        .map_err(|e| format!("invalid duration `{text}`: {e}"))?;
    if d <= SignedDuration::ZERO {
        return Err(format!("duration `{text}` must be positive"));
    }
    Ok(d)
}

fn std_duration(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::from_secs(1))
}

fn identity(args: &ControllerArgs) -> String {
    args.identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("toolgate-controller-{}", std::process::id()))
}

/// Runs the controller until it is interrupted (Ctrl-C / SIGTERM) or loses
/// leadership. Works in-cluster or from a kubeconfig (`Client::try_default`).
pub async fn run_controller(args: ControllerArgs) -> Result<(), ControllerError> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| ControllerError::Config(e.to_string()))?;
    let store = Store::connect(&args.database).await?;
    let metrics = Metrics::new();
    let health = Health::default();
    let server = tokio::spawn(crate::metrics::serve(
        args.metrics_listen,
        metrics.clone(),
        health.clone(),
    ));
    health.set_ready(true);

    let elector = LeaderElector::new(
        client.clone(),
        &args.namespace,
        identity(&args),
        std_duration(args.lease_duration),
    );
    let renew = elector.lease_duration() / 3;
    tokio::select! {
        r = elector.acquire(renew) => r?,
        _ = shutdown_signal() => return Ok(()),
    }
    metrics.leader.set(1);

    let key = crate::keys::ensure_signing_key(&client, &args.namespace).await?;
    crate::keys::ensure_trust(&client, &args.namespace, &key).await?;
    tracing::info!(keyid = %key.key_id(), "signing bundles");

    let mut settings = Settings::new(&args.namespace);
    settings.bundle_validity = args.bundle_validity;
    if let Some(ns) = &args.approvals_namespace {
        settings.approvals_namespace = ns.clone();
    }
    settings.tenant_secret = (!args.no_tenant_provisioning).then(|| args.tenant_secret.clone());
    settings.tenant_base_url = args.tenant_database_url.clone();
    let ctx = Arc::new(Context::new(
        client.clone(),
        store,
        key,
        metrics.clone(),
        settings,
    ));
    ctx.mark_trusted(&args.namespace);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let controllers = tokio::spawn(run_reconcilers(
        ctx.clone(),
        std_duration(args.approval_sync_interval),
        stop_rx,
    ));

    let outcome = tokio::select! {
        e = elector.keep(renew) => Err(e),
        _ = shutdown_signal() => Ok(()),
        r = server => match r {
            Ok(Err(e)) => Err(e),
            _ => Err(ControllerError::Io("metrics server stopped".into())),
        },
    };
    metrics.leader.set(0);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers).await;
    outcome
}

/// Runs the PolicyProfile, Approval and RunCancellation controllers and the approvals mirror
/// (every `approval_sync_interval`) on `ctx` until `stop` turns true. What
/// [`run_controller`] runs once it leads; public so tests can drive the
/// watches against a mock API.
pub async fn run_reconcilers(
    ctx: Arc<Context>,
    approval_sync_interval: Duration,
    stop_rx: tokio::sync::watch::Receiver<bool>,
) {
    let interval = approval_sync_interval;
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let profiles_ctrl = Controller::new(
        Api::<PolicyProfile>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let profile_cache = profiles_ctrl.store();
    let profiles = profiles_ctrl
        .owns(
            Api::<ConfigMap>::all(ctx.client.clone()),
            watcher::Config::default().labels(&format!(
                "{}={}",
                toolgate_k8s::names::LABEL_MANAGED_BY,
                crate::MANAGER
            )),
        )
        .watches(
            Api::<Approval>::all(ctx.client.clone()),
            watcher::Config::default(),
            |a: Approval| crate::approval::grant_profile_ref(&a),
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            crate::profile::reconcile,
            crate::profile::error_policy,
            ctx.clone(),
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "policyprofile controller event");
            }
        });

    let approvals_ctrl = Controller::new(
        Api::<Approval>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let approval_cache = approvals_ctrl.store();
    let approvals = approvals_ctrl
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            crate::approval::reconcile,
            |a: Arc<Approval>, e: &ControllerError, _ctx| {
                tracing::warn!(approval = %kube::ResourceExt::name_any(a.as_ref()), code = e.code(), error = %e, "reconcile failed");
                kube::runtime::controller::Action::requeue(Duration::from_secs(15))
            },
            ctx.clone(),
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "approval controller event");
            }
        });

    let cancellations = Controller::new(
        Api::<crate::cancellation::RunCancellation>::all(ctx.client.clone()),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(
        crate::cancellation::reconcile,
        |c: Arc<crate::cancellation::RunCancellation>, e: &ControllerError, _ctx| {
            tracing::warn!(cancellation = %kube::ResourceExt::name_any(c.as_ref()), code = e.code(), error = %e, "reconcile failed");
            kube::runtime::controller::Action::requeue(Duration::from_secs(15))
        },
        ctx.clone(),
    )
    .for_each(|r| async move {
        if let Err(e) = r {
            tracing::debug!(error = %e, "runcancellation controller event");
        }
    });

    let sync_ctx = ctx.clone();
    let mut sync_stop = stop_rx.clone();
    let mirror = async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = sync_stop.wait_for(|s| *s) => return,
            }
            match crate::approval::sync_once(
                &sync_ctx,
                &approval_cache.state(),
                &profile_cache.state(),
            )
            .await
            {
                Ok(report) if report != Default::default() => {
                    tracing::info!(?report, "approvals mirrored")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(code = e.code(), error = %e, "approval sync failed"),
            }
        }
    };

    tokio::join!(profiles, approvals, cancellations, mirror);
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(
            parse_duration("24h").unwrap(),
            SignedDuration::from_hours(24)
        );
        assert_eq!(parse_duration("5s").unwrap(), SignedDuration::from_secs(5));
        assert_eq!(
            parse_duration("PT1H").unwrap(),
            SignedDuration::from_hours(1)
        );
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
