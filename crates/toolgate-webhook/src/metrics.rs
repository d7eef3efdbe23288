//! Prometheus metrics of the webhook, served as plain HTTP on their own
//! port (`--metrics-listen`, default `0.0.0.0:8081`), apart from the TLS
//! port the API server calls: Prometheus then needs no CA bundle, and a
//! scrape never competes with admission for the TLS listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::routing::get;
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::tls::ReloadingCert;

/// The `webhook` label values, one per route.
pub const WEBHOOKS: [&str; 4] = [
    "mutate-pods",
    "validate-pods",
    "validate-policyprofiles",
    "validate-approvals",
];

/// Every metric the webhook exports.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `toolgate_admission_requests_total{webhook,allowed}`; `allowed` is
    /// `true`, `false`, or `error` for a request that got no AdmissionReview
    /// answer (too large, undecodable).
    pub requests: IntCounterVec,
    /// `toolgate_admission_duration_seconds{webhook}`: from the request's
    /// first byte to the answer.
    pub duration: HistogramVec,
    cert_expiry: Gauge,
    certs: Option<Arc<ReloadingCert>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Metrics {
    /// Creates and registers every metric, every (webhook, allowed) series
    /// at 0. With `certs`, the serving certificate's expiry is read from
    /// the pair held at each scrape, so a rotation shows at once.
    pub fn new(certs: Option<Arc<ReloadingCert>>) -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "toolgate_admission_requests_total",
                "AdmissionReview requests by webhook and answer (allowed true/false, or error).",
            ),
            &["webhook", "allowed"],
        )
        .expect("static metric definition");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "toolgate_admission_duration_seconds",
                "Time to answer an AdmissionReview request.",
            )
            .buckets(vec![
                0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                0.5, 1.0, 2.5,
            ]),
            &["webhook"],
        )
        .expect("static metric definition");
        let cert_expiry = Gauge::new(
            "toolgate_webhook_certificate_expiry_timestamp_seconds",
            "When the webhook's serving certificate expires (Unix seconds).",
        )
        .expect("static metric definition");
        for webhook in WEBHOOKS {
            for allowed in ["true", "false", "error"] {
                requests.with_label_values(&[webhook, allowed]);
            }
            duration.with_label_values(&[webhook]);
        }
        // The certificate gauge is always listed; only a served pair (the
        // [`crate::Server`]'s) sets it.
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(requests.clone()),
            Box::new(duration.clone()),
            Box::new(cert_expiry.clone()),
        ];
        for c in collectors {
            registry.register(c).expect("unique metric names");
        }
        toolgate_k8s::telemetry::register_common(&registry, "webhook");
        Self {
            registry,
            requests,
            duration,
            cert_expiry,
            certs,
        }
    }

    /// Records one answered request.
    pub(crate) fn observe(&self, webhook: &str, allowed: &str, elapsed: Duration) {
        self.requests.with_label_values(&[webhook, allowed]).inc();
        self.duration
            .with_label_values(&[webhook])
            .observe(elapsed.as_secs_f64());
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(certs) = &self.certs
            && let Some(leaf) = certs.current().cert.first()
            && let Some(not_after) = not_after(leaf.as_ref())
        {
            self.cert_expiry.set(not_after as f64);
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// `notAfter` of a DER certificate, in Unix seconds.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// `GET /metrics` and `GET /healthz` over plain HTTP.
pub fn router(metrics: Metrics) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Metrics>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    m.render(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(metrics)
}

/// The bound address of a metrics listener, for logs.
pub(crate) fn describe(listener: &tokio::net::TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}
