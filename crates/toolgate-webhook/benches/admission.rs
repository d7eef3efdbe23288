//! AdmissionReview throughput and latency over loopback HTTPS with
//! keep-alive: a few concurrent clients, each on one TLS connection, send a
//! bounded number of reviews; per-request latency is measured client side.
//!
//! `cargo bench -p toolgate-webhook --bench admission` runs the full load;
//! without `--bench` (e.g. `cargo test --benches`) it runs a short smoke.

// The integration tests' harness, of which the benchmark needs only the
// server, client and fixtures. Unused helpers are caught where the harness
// lives: the tests/it binary, which has no such allow.
#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::{TestServer, fixture, inject_config};
use toolgate_webhook::SidecarMode;

const CONNECTIONS: usize = 4;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let per_connection = if full { 1500 } else { 25 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = TestServer::start(
            inject_config(SidecarMode::Native, Some("baseline")),
            Duration::from_secs(5),
        )
        .await;
        for (name, path, body) in [
            (
                "mutate-pods (inject, deployment pod)",
                "/mutate-pods",
                fixture("pod-deployment-generatename.json"),
            ),
            (
                "mutate-pods (already injected)",
                "/mutate-pods",
                fixture("pod-already-injected.json"),
            ),
            (
                "validate-policyprofiles (good)",
                "/validate-policyprofiles",
                fixture("policyprofile-good.json"),
            ),
        ] {
            let label = if full {
                name.to_owned()
            } else {
                format!("smoke (not a measurement): {name}")
            };
            run(&server, &label, path, body, per_connection).await;
        }
        server.stop().await;
    });
}

async fn run(
    server: &TestServer,
    name: &str,
    path: &'static str,
    body: Vec<u8>,
    per_connection: usize,
) {
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let mut client = server.client().await;
        // Warm-up, not measured.
        for _ in 0..20 {
            assert_eq!(client.request("POST", path, body.clone()).await.0, 200);
        }
        clients.push(client);
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let body = body.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_connection);
                for _ in 0..per_connection {
                    let t = Instant::now();
                    let (status, _) = client.request("POST", path, body.clone()).await;
                    latencies.push(t.elapsed());
                    assert_eq!(status, 200);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client task"));
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1)];
    println!(
        "{name}: {} requests over {CONNECTIONS} keep-alive connections, {} B body: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        latencies.len(),
        body.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}
