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
    /// How often the leader signs each changed decision-stream head and
    /// publishes every tenant's latest checkpoints (ConfigMap
    /// `toolgate-checkpoints` in its namespace).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub checkpoint_interval: SignedDuration,
    /// Do not sign checkpoints (sign them yourself with `toolgate audit checkpoint`).
    #[arg(long)]
    pub no_checkpoints: bool,
}

use toolgate_bundle::parse_duration;

fn std_duration(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::from_secs(1))
}

fn identity(args: &ControllerArgs) -> String {
    args.identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("toolgate-controller-{}", std::process::id()))
}

/// Runs the controller until `shutdown` resolves (the CLI passes its
/// SIGTERM / Ctrl-C future) or it loses leadership. Works in-cluster or from
/// a kubeconfig (`Client::try_default`).
pub async fn run_controller(
    args: ControllerArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ControllerError> {
    let shutdown = std::pin::pin!(shutdown);
    let mut shutdown = futures::FutureExt::fuse(shutdown);
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
        () = &mut shutdown => return Ok(()),
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
        stop_rx.clone(),
    ));
    let checkpoints = (!args.no_checkpoints).then(|| {
        tokio::spawn(crate::checkpoint::run_checkpoints(
            ctx.clone(),
            std_duration(args.checkpoint_interval),
            stop_rx,
        ))
    });

    let outcome = tokio::select! {
        e = elector.keep(renew) => Err(e),
        () = &mut shutdown => Ok(()),
        r = server => match r {
            Ok(Err(e)) => Err(e),
            _ => Err(ControllerError::Io("metrics server stopped".into())),
        },
    };
    metrics.leader.set(0);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), controllers).await;
    if let Some(task) = checkpoints {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllerArgs,
    }

    fn parse(extra: &[&str]) -> Result<ControllerArgs, clap::Error> {
        let base = ["controller", "--database", "sqlite::memory:"];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args)
    }

    #[test]
    fn duration_flags_take_the_bundle_syntax() {
        let args = parse(&["--bundle-validity", "7d", "--checkpoint-interval", "1h30m"]).unwrap();
        assert_eq!(args.bundle_validity, SignedDuration::from_hours(7 * 24));
        assert_eq!(args.checkpoint_interval, SignedDuration::from_mins(90));
        assert_eq!(
            parse(&[]).unwrap().checkpoint_interval,
            SignedDuration::from_mins(10)
        );
        assert!(parse(&["--lease-duration", "0s"]).is_err());
        assert!(parse(&["--approval-sync-interval", "soon"]).is_err());
    }
}
