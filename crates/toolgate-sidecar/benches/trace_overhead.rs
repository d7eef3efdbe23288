//! What traces cost: `POST /v1/authorize` over loopback HTTP one call at a
//! time and at fixed rates, with tracing off, sampling 1 % and 100 %, exporting over
//! OTLP/HTTP (the production exporter: batched, reqwest) to a sink on
//! loopback, phases interleaved in one run so each is measured beside the
//! others.
//!
//!   cargo bench -p toolgate-sidecar --bench trace_overhead
//!
//! "Off" is what a sidecar without an OTLP endpoint runs: no layer wants
//! the spans, so each call site is one cached interest check. The filter is
//! switched with a reload handle, which rebuilds that cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue, trace::Link, trace::SpanKind, trace::TraceId};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SamplingResult, SdkTracerProvider, ShouldSample};
use serde_json::json;
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_contract::TRACE_TARGET;
use toolgate_sidecar::{Sidecar, SidecarConfig};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, reload};

const SPEC: &str = r#"
mode: rules
rules:
  reader: {allow: ["src/*", "docs/*"], deny: ["*secret*"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
"#;

/// A trace-id ratio sampler whose ratio the bench turns between phases.
#[derive(Debug, Clone)]
struct Turnable(Arc<AtomicU64>);

impl ShouldSample for Turnable {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let ratio = f64::from_bits(self.0.load(Ordering::Relaxed));
        Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
            .should_sample(parent, trace_id, name, kind, attributes, links)
    }
}

/// CPU time this process has used (every thread: the sidecar, its
/// exporter, and the load generator, whose share is the same in each mode).
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// Open loop at `rate`/s for `secs`: (p50, p99, answered).
async fn fixed_rate(
    client: &reqwest::Client,
    url: &str,
    rate: u32,
    secs: u64,
) -> (Duration, Duration, usize) {
    let body = json!({"tool": "reader", "arguments": {"path": "src/main.rs"}, "run_id": "bench", "step_id": "s1"});
    let total = u64::from(rate) * secs;
    let start = Instant::now();
    let mut handles = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / f64::from(rate));
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let (client, url, body) = (client.clone(), url.to_owned(), body.clone());
        handles.push(tokio::spawn(async move {
            let t = Instant::now();
            let ok = client
                .post(&url)
                .json(&body)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            ok.then(|| t.elapsed())
        }));
    }
    let mut lat = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(Some(d)) = h.await {
            lat.push(d);
        }
    }
    lat.sort();
    (percentile(&lat, 0.5), percentile(&lat, 0.99), lat.len())
}

/// One call at a time for `secs`: what a call costs with nothing queued
/// ahead of it and no timer between calls. (p50, p99, answered).
async fn sequential(client: &reqwest::Client, url: &str, secs: u64) -> (Duration, Duration, usize) {
    let body = json!({"tool": "reader", "arguments": {"path": "src/main.rs"}, "run_id": "bench", "step_id": "s1"});
    let start = Instant::now();
    let mut lat = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        let t = Instant::now();
        let ok = client
            .post(url)
            .json(&body)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    (percentile(&lat, 0.5), percentile(&lat, 0.99), lat.len())
}

/// An OTLP/HTTP receiver that only counts what it is sent.
async fn sink(received: Arc<AtomicUsize>) -> String {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: axum::body::Bytes| {
            let received = received.clone();
            async move {
                received.fetch_add(body.len(), Ordering::Relaxed);
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/v1/traces")
}

async fn start_sidecar(dir: &std::path::Path) -> Sidecar {
    let key = SigningKey::from_seed(&[1; 32]);
    let (_, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: "bench".into(),
                namespace: None,
            },
            spec: toolgate_policy::load::from_str(SPEC).unwrap(),
            grants: vec![],
            sequence: 1,
            issued_at: Timestamp::now(),
            expires_at: Timestamp::now() + SignedDuration::from_hours(1),
        },
        &key,
    )
    .unwrap();
    std::fs::write(dir.join("bundle.json"), bytes).unwrap();
    std::fs::write(
        dir.join("trust.pem"),
        key.public_key().to_spki_pem().unwrap(),
    )
    .unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("bench.db").display());
    let mut config = SidecarConfig::new(dir.join("bundle.json"), dir.join("trust.pem"), url);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.workspace_base = dir.join("ws");
    Sidecar::start(config).await.unwrap()
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let secs: u64 = std::env::var("TOOLGATE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rounds: usize = std::env::var("TOOLGATE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let received = Arc::new(AtomicUsize::new(0));

    // The sink and the load generator share one thread; the sidecar has a
    // worker of its own, as in the load bench.
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let endpoint = client_rt.block_on(sink(received.clone()));

    let ratio = Arc::new(AtomicU64::new(0f64.to_bits()));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .build()
        .unwrap();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Turnable(ratio.clone()))
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let (filter, switch) = reload::Layer::new(Targets::new());
    tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                .with_tracer(provider.tracer("toolgate"))
                .with_filter(filter),
        )
        .init();

    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let addr = server.block_on(async {
        let sidecar = start_sidecar(dir.path()).await;
        let addr = sidecar.addr;
        std::mem::forget(sidecar);
        addr
    });
    let url = format!("http://{addr}/v1/authorize");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .unwrap();
    let modes: [(&str, Option<f64>); 3] = [
        ("off", None),
        ("sampled 1%", Some(0.01)),
        ("sampled 100%", Some(1.0)),
    ];
    let set = |mode: Option<f64>| {
        ratio.store(mode.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
        let targets = match mode {
            Some(_) => Targets::new().with_target(TRACE_TARGET, tracing::Level::TRACE),
            None => Targets::new(),
        };
        switch.reload(targets).unwrap();
    };
    client_rt.block_on(async {
        let _ = fixed_rate(&client, &url, 1000, 1).await; // warm up
    });
    println!(
        "{:<14} {:>6} {:>10} {:>10} {:>8} {:>12} {:>10}",
        "tracing", "rate/s", "p50", "p99", "answered", "OTLP bytes", "CPU/call"
    );
    // What the process spends idle over a drain (its pollers), taken out
    // of each phase's CPU so that CPU/call is the calls' own.
    const DRAIN: Duration = Duration::from_millis(5_500);
    let idle = process_cpu();
    client_rt.block_on(async { tokio::time::sleep(DRAIN).await });
    let idle = process_cpu() - idle;
    for round in 0..rounds {
        for rate in [None, Some(1000u32), Some(5000)] {
            for (name, mode) in modes {
                set(mode);
                let before = received.load(Ordering::Relaxed);
                let cpu = process_cpu();
                let (p50, p99, n) = client_rt.block_on(async {
                    match rate {
                        Some(rate) => fixed_rate(&client, &url, rate, secs).await,
                        None => sequential(&client, &url, secs).await,
                    }
                });
                // Let the batch processor deliver this phase's spans; its
                // CPU is counted with the phase's.
                client_rt.block_on(async { tokio::time::sleep(DRAIN).await });
                let cpu = (process_cpu() - cpu).saturating_sub(idle) / n.max(1) as u32;
                let sent = received.load(Ordering::Relaxed) - before;
                let rate = rate.map_or_else(|| "1 by 1".to_owned(), |r| r.to_string());
                println!(
                    "{name:<14} {rate:>6} {:>10} {:>10} {n:>8} {sent:>12} {:>10}   (round {})",
                    us(p50),
                    us(p99),
                    us(cpu),
                    round + 1
                );
            }
        }
    }
    let _ = provider.shutdown();
    drop(server);
}
