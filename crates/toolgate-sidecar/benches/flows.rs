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

mod common;

use common::{sequential, start, us};
use serde_json::json;

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
        let plain = start(
            &dir.path().join("plain"),
            PLAIN,
            None,
            &url_of("plain"),
            "plain",
        )
        .await;
        let flows = start(
            &dir.path().join("flows"),
            &format!("{PLAIN}{FLOWS}"),
            None,
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
