//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use axum::serve::ListenerExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::crd::{ConditionType, Phase, PolicyProfileStatus};
use crate::error::ControllerError;

/// Controller label values.
pub const CONTROLLERS: [&str; 2] = ["policyprofile", "approval"];

/// The controller's metrics, registered in their own registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `toolgate_reconcile_total{controller,result}`; result is `ok` or `error`.
    pub reconcile_total: IntCounterVec,
    /// `toolgate_reconcile_errors_total{controller,error}`; error is one of [`ControllerError::CODES`].
    pub reconcile_errors: IntCounterVec,
    /// `toolgate_reconcile_duration_seconds{controller}`.
    pub reconcile_duration: HistogramVec,
    /// `toolgate_approvals{phase}`: Approval objects by phase.
    pub approvals: IntGaugeVec,
    /// `toolgate_controller_leader`: 1 while this replica leads.
    pub leader: IntGauge,
    /// `toolgate_approvals_overdue`: Approvals still Pending past their `expiresAt`.
    pub approvals_overdue: IntGauge,
    /// `toolgate_approvals_unmirrored`: approvals the mirror could not
    /// follow: pending ones with no Approval object because creating it
    /// failed (no such namespace, no RBAC), and those whose row does not
    /// read back (a value a tenant wrote out of range), with no object or
    /// with an earlier one left as it was.
    pub approvals_unmirrored: IntGauge,
    /// `toolgate_profile_valid{profile_namespace,profile}`: 1 when the spec compiles.
    pub profile_valid: IntGaugeVec,
    /// `toolgate_profile_ready{profile_namespace,profile}`: 1 when a signed bundle is published.
    pub profile_ready: IntGaugeVec,
    /// `toolgate_profile_bundle_expiry_timestamp_seconds{profile_namespace,profile}`.
    pub profile_expiry: GaugeVec,
    /// `toolgate_profile_pods{profile_namespace,profile,state}`: fleet, `current` or `stale`.
    pub profile_pods: IntGaugeVec,
    /// `toolgate_checkpoint_broken_chains`: decision streams that failed
    /// verification in the last checkpoint pass (never signed).
    pub checkpoint_broken_chains: IntGauge,
    /// `toolgate_checkpoint_invalid_streams`: decision streams skipped by
    /// the last checkpoint pass because their tenant or stream name is one
    /// the store refuses (never signed; every other stream still is).
    pub checkpoint_invalid_streams: IntGauge,
    /// `toolgate_checkpoint_last_success_timestamp_seconds`: end of the last
    /// checkpoint pass that completed.
    pub checkpoint_last_success: prometheus::Gauge,
    /// `toolgate_archive_rows_total`: decision rows the scheduled archive
    /// (`--archive-after`) moved out of the database.
    pub archive_rows: prometheus::IntCounter,
    /// `toolgate_archive_last_success_timestamp_seconds`: end of the last
    /// scheduled archive pass that completed (0: none yet, or off).
    pub archive_last_success: prometheus::Gauge,
    /// `toolgate_notifications_delivered_total{format}`: approval
    /// notifications a receiver accepted.
    pub notifications_delivered: IntCounterVec,
    /// `toolgate_notification_failures_total{format}`: failed attempts
    /// (each is retried with backoff).
    pub notification_failures: IntCounterVec,
    /// `toolgate_notifications_oldest_undelivered_seconds`: age of the
    /// oldest event a channel has not accepted yet (0: none waiting).
    pub notifications_oldest_undelivered: IntGauge,
    /// `toolgate_unreadable_rows_total{pass}`: rows a pass over every
    /// tenant's records skipped because they do not read back (a value a
    /// tenant wrote out of range), each counted once; `fleet` (sidecar
    /// heartbeats) or `archive` (decision streams).
    pub unreadable_rows: IntCounterVec,
}

/// `pass` label values of [`Metrics::unreadable_rows`].
pub const UNREADABLE_PASSES: [&str; 2] = ["fleet", "archive"];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric, with every label combination
    /// pre-initialised so dashboards see zeros rather than gaps.
    pub fn new() -> Self {
        let registry = Registry::new();
        let reconcile_total = IntCounterVec::new(
            Opts::new(
                "toolgate_reconcile_total",
                "Reconciliations by controller and result.",
            ),
            &["controller", "result"],
        )
        .expect("valid metric");
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "toolgate_reconcile_errors_total",
                "Failed reconciliations by controller and error code.",
            ),
            &["controller", "error"],
        )
        .expect("valid metric");
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "toolgate_reconcile_duration_seconds",
                "Time spent in one reconciliation.",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["controller"],
        )
        .expect("valid metric");
        let approvals = IntGaugeVec::new(
            Opts::new("toolgate_approvals", "Approval objects by phase."),
            &["phase"],
        )
        .expect("valid metric");
        let leader = IntGauge::new(
            "toolgate_controller_leader",
            "1 while this replica holds the leader lease.",
        )
        .expect("valid metric");
        // `profile_namespace`, not `namespace`: the scrape target's own
        // `namespace` (the controller's) would otherwise rename it.
        let approvals_overdue = IntGauge::new(
            "toolgate_approvals_overdue",
            "Approval objects still Pending after their expiresAt (their TTL).",
        )
        .expect("valid metric");
        let approvals_unmirrored = IntGauge::new(
            "toolgate_approvals_unmirrored",
            "Approvals not mirrored: pending with no Approval object (it could not be created in their namespace), or their row does not read back.",
        )
        .expect("valid metric");
        let profile_labels = &["profile_namespace", "profile"];
        let profile_valid = IntGaugeVec::new(
            Opts::new(
                "toolgate_profile_valid",
                "1 when the PolicyProfile's spec compiles (condition Valid).",
            ),
            profile_labels,
        )
        .expect("valid metric");
        let profile_ready = IntGaugeVec::new(
            Opts::new(
                "toolgate_profile_ready",
                "1 when a signed bundle of the PolicyProfile is published (condition Ready).",
            ),
            profile_labels,
        )
        .expect("valid metric");
        let profile_expiry = GaugeVec::new(
            Opts::new(
                "toolgate_profile_bundle_expiry_timestamp_seconds",
                "When the published bundle of the PolicyProfile expires (Unix seconds).",
            ),
            profile_labels,
        )
        .expect("valid metric");
        let profile_pods = IntGaugeVec::new(
            Opts::new(
                "toolgate_profile_pods",
                "Sidecars reporting for the PolicyProfile: current (enforcing its version) or stale.",
            ),
            &["profile_namespace", "profile", "state"],
        )
        .expect("valid metric");
        let checkpoint_broken_chains = IntGauge::new(
            "toolgate_checkpoint_broken_chains",
            "Decision streams whose hash chain failed verification in the last checkpoint pass.",
        )
        .expect("valid metric");
        let checkpoint_invalid_streams = IntGauge::new(
            "toolgate_checkpoint_invalid_streams",
            "Decision streams the last checkpoint pass skipped: a name the store refuses.",
        )
        .expect("valid metric");
        let checkpoint_last_success = prometheus::Gauge::new(
            "toolgate_checkpoint_last_success_timestamp_seconds",
            "When the last checkpoint pass completed (Unix seconds).",
        )
        .expect("valid metric");
        let archive_rows = prometheus::IntCounter::new(
            "toolgate_archive_rows_total",
            "Decision rows the scheduled archive moved out of the database.",
        )
        .expect("valid metric");
        let archive_last_success = prometheus::Gauge::new(
            "toolgate_archive_last_success_timestamp_seconds",
            "When the last scheduled archive pass completed (Unix seconds).",
        )
        .expect("valid metric");
        let notifications_delivered = IntCounterVec::new(
            Opts::new(
                "toolgate_notifications_delivered_total",
                "Approval notifications a receiver accepted, by channel format.",
            ),
            &["format"],
        )
        .expect("valid metric");
        let notification_failures = IntCounterVec::new(
            Opts::new(
                "toolgate_notification_failures_total",
                "Failed attempts to deliver an approval notification (each is retried).",
            ),
            &["format"],
        )
        .expect("valid metric");
        let notifications_oldest_undelivered = IntGauge::new(
            "toolgate_notifications_oldest_undelivered_seconds",
            "Age of the oldest approval event a channel has not accepted yet (0: none waiting).",
        )
        .expect("valid metric");
        let unreadable_rows = IntCounterVec::new(
            Opts::new(
                "toolgate_unreadable_rows_total",
                "Rows skipped because they do not read back (each counted once), by pass.",
            ),
            &["pass"],
        )
        .expect("valid metric");
        for pass in UNREADABLE_PASSES {
            unreadable_rows.with_label_values(&[pass]);
        }
        for format in toolgate_policy::NotifyFormat::ALL {
            notifications_delivered.with_label_values(&[format.as_str()]);
            notification_failures.with_label_values(&[format.as_str()]);
        }
        for c in [
            Box::new(notifications_delivered.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(notification_failures.clone()),
            Box::new(notifications_oldest_undelivered.clone()),
            Box::new(unreadable_rows.clone()),
            Box::new(profile_valid.clone()),
            Box::new(approvals_overdue.clone()),
            Box::new(approvals_unmirrored.clone()),
            Box::new(profile_ready.clone()),
            Box::new(profile_expiry.clone()),
            Box::new(profile_pods.clone()),
            Box::new(checkpoint_broken_chains.clone()),
            Box::new(checkpoint_invalid_streams.clone()),
            Box::new(checkpoint_last_success.clone()),
            Box::new(archive_rows.clone()),
            Box::new(archive_last_success.clone()),
            Box::new(reconcile_total.clone()),
            Box::new(reconcile_errors.clone()),
            Box::new(reconcile_duration.clone()),
            Box::new(approvals.clone()),
            Box::new(leader.clone()),
        ] {
            registry.register(c).expect("metric registered once");
        }
        toolgate_k8s::telemetry::register_common(&registry, "controller");
        for controller in CONTROLLERS {
            for result in ["ok", "error"] {
                reconcile_total.with_label_values(&[controller, result]);
            }
            for code in ControllerError::CODES {
                reconcile_errors.with_label_values(&[controller, code]);
            }
            reconcile_duration.with_label_values(&[controller]);
        }
        for phase in Phase::ALL {
            approvals.with_label_values(&[phase.as_str()]);
        }
        Self {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_duration,
            approvals,
            leader,
            approvals_overdue,
            approvals_unmirrored,
            profile_valid,
            profile_ready,
            profile_expiry,
            profile_pods,
            checkpoint_broken_chains,
            checkpoint_invalid_streams,
            checkpoint_last_success,
            archive_rows,
            archive_last_success,
            notifications_delivered,
            notification_failures,
            notifications_oldest_undelivered,
            unreadable_rows,
        }
    }

    /// Sets the per-profile gauges from the status the reconciler computed.
    pub fn observe_profile(&self, namespace: &str, profile: &str, status: &PolicyProfileStatus) {
        let labels = [namespace, profile];
        let is_true = |kind: ConditionType| {
            status
                .conditions
                .iter()
                .any(|c| c.is(kind) && c.status == "True")
        };
        self.profile_valid
            .with_label_values(&labels)
            .set(i64::from(is_true(ConditionType::Valid)));
        self.profile_ready
            .with_label_values(&labels)
            .set(i64::from(is_true(ConditionType::Ready)));
        match status
            .expires_at
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        {
            Some(t) => self
                .profile_expiry
                .with_label_values(&labels)
                .set(t.as_millisecond() as f64 / 1000.0),
            None => {
                let _ = self.profile_expiry.remove_label_values(&labels);
            }
        }
        let fleet = status.fleet.unwrap_or_default();
        for (state, n) in [("current", fleet.current), ("stale", fleet.stale)] {
            self.profile_pods
                .with_label_values(&[namespace, profile, state])
                .set(i64::from(n));
        }
    }

    /// Drops the series of a deleted profile.
    pub fn forget_profile(&self, namespace: &str, profile: &str) {
        let labels = [namespace, profile];
        let _ = self.profile_valid.remove_label_values(&labels);
        let _ = self.profile_ready.remove_label_values(&labels);
        let _ = self.profile_expiry.remove_label_values(&labels);
        for state in ["current", "stale"] {
            let _ = self
                .profile_pods
                .remove_label_values(&[namespace, profile, state]);
        }
    }

    /// Starts timing one reconciliation; call [`ReconcileTimer::finish`] with its outcome.
    pub fn start(&self, controller: &'static str) -> ReconcileTimer {
        ReconcileTimer {
            metrics: self.clone(),
            controller,
            started: Instant::now(),
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding never fails");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}

/// Times one reconciliation.
pub struct ReconcileTimer {
    metrics: Metrics,
    controller: &'static str,
    started: Instant,
}

impl ReconcileTimer {
    /// Records duration, result and (for failures) the error code.
    pub fn finish<T>(self, result: &Result<T, ControllerError>) {
        let elapsed = self.started.elapsed().as_secs_f64();
        self.metrics
            .reconcile_duration
            .with_label_values(&[self.controller])
            .observe(elapsed);
        let outcome = if result.is_ok() { "ok" } else { "error" };
        self.metrics
            .reconcile_total
            .with_label_values(&[self.controller, outcome])
            .inc();
        if let Err(e) = result {
            self.metrics
                .reconcile_errors
                .with_label_values(&[self.controller, e.code()])
                .inc();
        }
    }
}

/// Shared health state for `/healthz` and `/readyz`.
#[derive(Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the process ready (store reachable, Kubernetes client built).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }
    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// The HTTP router: `/metrics`, `/healthz` (always 200 while serving), `/readyz`.
pub fn router(metrics: Metrics, health: Health) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State((m, _)): State<(Metrics, Health)>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    m.render(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State((_, h)): State<(Metrics, Health)>| async move {
                if h.is_ready() {
                    (StatusCode::OK, "ready").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
                }
            }),
        )
        .with_state((metrics, health))
}

/// Serves [`router`] on `addr` until the process ends.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
) -> Result<(), ControllerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ControllerError::Io(format!("bind {addr}: {e}")))?;
    tracing::info!(%addr, "serving /metrics /healthz /readyz");
    axum::serve(
        listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        }),
        router(metrics, health),
    )
    .await
    .map_err(|e| ControllerError::Io(format!("metrics server: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_labels_are_a_fixed_set() {
        let m = Metrics::new();
        m.start("policyprofile")
            .finish::<()>(&Err(ControllerError::Key("x".into())));
        let text = m.render();
        assert!(text.contains(
            r#"toolgate_reconcile_errors_total{controller="policyprofile",error="signing_key"} 1"#
        ));
        assert!(text.contains(r#"toolgate_reconcile_total{controller="approval",result="ok"} 0"#));
        assert!(text.contains(r#"toolgate_approvals{phase="Pending"} 0"#));
        let labels = text
            .lines()
            .filter(|l| l.starts_with("toolgate_reconcile_errors_total{"))
            .count();
        assert_eq!(labels, CONTROLLERS.len() * ControllerError::CODES.len());
        assert!(text.contains("toolgate_build_info{component=\"controller\""));
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes "));
    }

    #[test]
    fn profile_gauges_follow_the_status_and_go_with_the_profile() {
        use crate::crd::{Condition, FleetStatus};
        let m = Metrics::new();
        let cond = |t: &str, s: &str| Condition {
            type_: t.into(),
            status: s.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
            observed_generation: None,
        };
        let status = PolicyProfileStatus {
            expires_at: Some("2026-01-02T00:00:00Z".into()),
            fleet: Some(FleetStatus {
                current: 3,
                stale: 1,
                total: 4,
            }),
            conditions: vec![cond("Valid", "False"), cond("Ready", "True")],
            ..Default::default()
        };
        m.observe_profile("agents", "coding", &status);
        let text = m.render();
        for line in [
            r#"toolgate_profile_valid{profile="coding",profile_namespace="agents"} 0"#,
            r#"toolgate_profile_ready{profile="coding",profile_namespace="agents"} 1"#,
            r#"toolgate_profile_bundle_expiry_timestamp_seconds{profile="coding",profile_namespace="agents"} 1767312000"#,
            r#"toolgate_profile_pods{profile="coding",profile_namespace="agents",state="stale"} 1"#,
            r#"toolgate_profile_pods{profile="coding",profile_namespace="agents",state="current"} 3"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        m.forget_profile("agents", "coding");
        assert!(!m.render().contains("profile=\"coding\""));
    }
}
