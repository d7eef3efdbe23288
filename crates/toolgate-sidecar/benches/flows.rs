//! What flow rules cost: `POST /v1/authorize` over loopback HTTP, one call
//! at a time, against a sidecar whose profile declares flows beside one
//! whose profile is the same without them, in one run, phases interleaved.
//!
//!   cargo bench -p toolgate-sidecar --bench flows
//!
//! Two calls: a read no flow rule can select (its verdict cannot depend on
//! the run's labels, so the sidecar reads none) and a send a rule selects,
//! on a run without labels (every decision reads the run's labels from the
//! store). SQLite by default; PostgreSQL with `TOOLGATE_BENCH_DATABASE_URL`.

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_sidecar::{Sidecar, SidecarConfig};

const PLAIN: &str = r#"
mode: rules
rules:
  reader: {allow: ["*"]}
  fetch: {allow: ["*"]}
  send: {allow: ["*"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  fetch: {sideEffect: NETWORK_READ, risk: low}
  send: {sideEffect: NETWORK_WRITE, risk: write}
egress: {allowHosts: ["*.example"]}
"#;

const FLOWS: &str = r#"
flows:
  labels:
    untrusted: {sideEffects: [NETWORK_READ]}
    private: {tools: [reader], match: ["*/secrets/*"]}
  rules:
    - when: [untrusted, private]
      deny: {sideEffects: [NETWORK_WRITE]}
"#;

async fn start(dir: &std::path::Path, spec: &str, url: &str, name: &str) -> Sidecar {
    let key = SigningKey::from_seed(&[2; 32]);
    let (_, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: name.into(),
                namespace: Some(format!("bench-{}", uuid::Uuid::now_v7().simple())),
            },
            spec: toolgate_policy::load::from_str(spec).unwrap(),
            grants: vec![],
            sequence: 1,
            issued_at: Timestamp::now(),
            expires_at: Timestamp::now() + SignedDuration::from_hours(1),
        },
        &key,
    )
    .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("bundle.json"), bytes).unwrap();
    std::fs::write(
        dir.join("trust.pem"),
        key.public_key().to_spki_pem().unwrap(),
    )
    .unwrap();
    let mut config = SidecarConfig::new(
        dir.join("bundle.json"),
        dir.join("trust.pem"),
        url.to_owned(),
    );
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.workspace_base = dir.join("ws");
    config.tenant = format!("bench-{name}");
    Sidecar::start(config).await.unwrap()
}

async fn call(client: &reqwest::Client, url: &str, body: &Value) -> bool {
    client
        .post(url)
        .json(body)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Calls of `body` one at a time for `secs`: (p50, p99, calls).
async fn sequential(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    secs: u64,
) -> (Duration, Duration, usize) {
    let start = Instant::now();
    let mut lat = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        let t = Instant::now();
        if call(client, url, body).await {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    let at = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99), lat.len())
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
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
    let database = std::env::var("TOOLGATE_BENCH_DATABASE_URL").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url_of = |name: &str| {
        database.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}?mode=rwc",
                dir.path().join(format!("{name}.db")).display()
            )
        })
    };
    let (plain, flows) = rt.block_on(async {
        let plain = start(&dir.path().join("plain"), PLAIN, &url_of("plain"), "plain").await;
        let flows = start(
            &dir.path().join("flows"),
            &format!("{PLAIN}{FLOWS}"),
            &url_of("flows"),
            "flows",
        )
        .await;
        (plain, flows)
    });
    let client = reqwest::Client::new();
    let plain_url = format!("http://{}/v1/authorize", plain.addr);
    let flows_url = format!("http://{}/v1/authorize", flows.addr);
    let read =
        |run: &str| json!({"tool": "reader", "arguments": {"path": "src/main.rs"}, "run_id": run});
    let send = |run: &str| json!({"tool": "send", "arguments": {"url": "https://hooks.example/x"}, "run_id": run});
    client_rt.block_on(async {
        let _ = sequential(&client, &plain_url, &read("warm"), 1).await;
        let _ = sequential(&client, &flows_url, &read("warm"), 1).await;
    });
    println!(
        "backend: {}",
        if database.is_some() {
            "postgres"
        } else {
            "sqlite"
        }
    );
    println!(
        "{:<44} {:>10} {:>10} {:>8}",
        "call, profile", "p50", "p99", "calls"
    );
    for round in 1..=rounds {
        let run = format!("run-{}", uuid::Uuid::now_v7().simple());
        for (name, url, body) in [
            ("read, without flows", &plain_url, read(&run)),
            ("read, flows (no rule selects it)", &flows_url, read(&run)),
            ("send, without flows", &plain_url, send(&run)),
            (
                "send, flows (a rule selects it: reads)",
                &flows_url,
                send(&run),
            ),
        ] {
            let (p50, p99, n) = client_rt.block_on(sequential(&client, url, &body, secs));
            println!(
                "{name:<44} {:>10} {:>10} {n:>8}   (round {round})",
                us(p50),
                us(p99)
            );
        }
    }
    drop((plain, flows));
}
