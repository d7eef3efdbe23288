//! `run_controller`: wiring of client, store, leader election, reconcilers
//! and the metrics endpoint.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{Controller, watcher};
use toolgate_store::Store;

use crate::config::ControllerConfig;
use crate::context::Context;
use crate::crd::{Approval, PolicyProfile};
use crate::error::ControllerError;
use crate::leader::LeaderElector;
use crate::metrics::{Health, Metrics};

/// Runs the controller until `shutdown` resolves (the CLI passes its
/// SIGTERM / Ctrl-C future) or it loses leadership. Works in-cluster or from
/// a kubeconfig (`Client::try_default`).
pub async fn run_controller(
    config: ControllerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ControllerError> {
    let shutdown = std::pin::pin!(shutdown);
    let mut shutdown = futures::FutureExt::fuse(shutdown);
    let client = kube::Client::try_default()
        .await
        .map_err(|e| ControllerError::Config(e.to_string()))?;
    let ControllerConfig {
        database_url,
        metrics_listen,
        identity,
        lease_duration,
        approval_sync_interval,
        checkpoint_interval,
        archive,
        settings,
    } = config;
    let namespace = settings.namespace.clone();
    let store = Store::connect(&database_url).await?;
    let metrics = Metrics::new();
    let health = Health::default();
    let server = tokio::spawn(crate::metrics::serve(
        metrics_listen,
        metrics.clone(),
        health.clone(),
    ));
    health.set_ready(true);

    let elector = LeaderElector::new(client.clone(), &namespace, identity, lease_duration);
    let renew = elector.lease_duration() / 3;
    tokio::select! {
        r = elector.acquire(renew) => r?,
        () = &mut shutdown => return Ok(()),
    }
    metrics.leader.set(1);

    let key = crate::keys::ensure_signing_key(&client, &namespace).await?;
    crate::keys::ensure_trust(&client, &namespace, &key).await?;
    tracing::info!(keyid = %key.key_id(), "signing bundles");

    let ctx = Arc::new(Context::new(
        client.clone(),
        store,
        key,
        metrics.clone(),
        settings,
    ));
    ctx.mark_trusted(&namespace);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let controllers = tokio::spawn(run_reconcilers(
        ctx.clone(),
        approval_sync_interval,
        stop_rx.clone(),
    ));
    let checkpoints = checkpoint_interval.map(|interval| {
        tokio::spawn(crate::checkpoint::run_checkpoints(
            ctx.clone(),
            interval,
            stop_rx.clone(),
        ))
    });
    let archives = archive.map(|schedule| {
        tokio::spawn(crate::archive::schedule::run_archives(
            ctx.clone(),
            schedule,
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
    for task in [checkpoints, archives].into_iter().flatten() {
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
        .watches(
            Api::<PolicyProfile>::all(ctx.client.clone()),
            watcher::Config::default(),
            {
                let cache = profile_cache.clone();
                move |p: PolicyProfile| crate::profile::candidate::shadowing(cache.state(), &p)
            },
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

    let notify_ctx = ctx.clone();
    let notify_profiles = profile_cache.clone();
    // A task of its own: its pass (Secrets, the store, HTTP) is polled from
    // the runtime, not nested inside the joined controllers below.
    let notify = tokio::spawn(every(
        ctx.settings.notify_interval,
        stop_rx.clone(),
        move || {
            let ctx = notify_ctx.clone();
            let profiles = notify_profiles.state();
            async move {
                let retention = ctx.settings.notify_retention;
                match Box::pin(crate::notify::deliver_once(&ctx, &profiles, retention)).await {
                    Ok(report) if report.delivered + report.failed > 0 => {
                        tracing::info!(?report, "approval notifications sent")
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(code = e.code(), error = %e, "approval notifications failed")
                    }
                }
            }
        },
    ));

    let sync_ctx = ctx.clone();
    let mirror = every(interval, stop_rx.clone(), move || {
        let ctx = sync_ctx.clone();
        let approvals = approval_cache.state();
        let profiles = profile_cache.state();
        async move {
            match crate::approval::sync_once(&ctx, &approvals, &profiles).await {
                Ok(report) if report != Default::default() => {
                    tracing::info!(?report, "approvals mirrored")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(code = e.code(), error = %e, "approval sync failed"),
            }
        }
    });

    let (.., notified) = tokio::join!(profiles, approvals, cancellations, mirror, notify);
    if let Err(e) = notified {
        tracing::warn!(error = %e, "approval notifications stopped");
    }
}

/// Runs `pass` at once and then every `interval` (a late pass delays the
/// next rather than bunching up) until `stop` turns true: the controller's
/// periodic jobs (approval mirror, checkpoints, archive).
pub(crate) async fn every<F, Fut>(
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        pass().await;
    }
}
