//! What shadowing a candidate costs: `POST /v1/authorize` over loopback
//! HTTP, one call at a time, against a sidecar whose bundle carries a
//! candidate beside one whose bundle is the same without it, in one run,
//! phases interleaved. The profile has 100 bash globs per tier and the
//! candidate the same with one more deny, so both evaluations do the same
//! work; low-risk calls, whose record is written in the background.
//!
//!   cargo bench -p toolgate-sidecar --bench shadow

mod common;

use common::{sequential, start, us};
use serde_json::json;

/// A profile whose bash tiers hold `n` globs each (`deny` `extra` first).
fn spec(n: usize, extra: &str) -> String {
    let globs = |prefix: &str| {
        (0..n)
            .map(|i| format!("\"{prefix}{i} *\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "mode: rules\nrules:\n  bash: {{deny: [{extra}{}], allow: [{}, \"echo *\"], escalate: [{}]}}\n\
         effects:\n  bash: {{sideEffect: PROCESS_EXEC, risk: low, matchArgs: [command]}}\n",
        globs("rm-"),
        globs("git-"),
        globs("deploy-"),
    )
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = |name: &str| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join(format!("{name}.db")).display()
        )
    };
    let active = spec(100, "");
    let candidate = spec(100, "\"echo secret*\", ");
    let (plain, shadowed) = rt.block_on(async {
        let plain = start(
            &dir.path().join("plain"),
            &active,
            None,
            &db("plain"),
            "plain",
        )
        .await;
        let shadowed = start(
            &dir.path().join("shadow"),
            &active,
            Some(&candidate),
            &db("shadow"),
            "shadow",
        )
        .await;
        (plain, shadowed)
    });
    let client = reqwest::Client::new();
    let plain_url = format!("http://{}/v1/authorize", plain.addr);
    let shadow_url = format!("http://{}/v1/authorize", shadowed.addr);
    let body =
        |run: &str| json!({"tool": "bash", "arguments": {"command": "echo hello"}, "run_id": run});
    client_rt.block_on(async {
        let _ = sequential(&client, &plain_url, &body("warm"), 1).await;
        let _ = sequential(&client, &shadow_url, &body("warm"), 1).await;
    });
    println!(
        "{:<32} {:>10} {:>10} {:>8}",
        "bundle", "p50", "p99", "calls"
    );
    for round in 1..=rounds {
        let run = format!("run-{}", uuid::Uuid::now_v7().simple());
        for (name, url) in [
            ("without a candidate", &plain_url),
            ("shadowing a candidate", &shadow_url),
        ] {
            let (p50, p99, n) = client_rt.block_on(sequential(&client, url, &body(&run), secs));
            println!(
                "{name:<32} {:>10} {:>10} {n:>8}   (round {round})",
                us(p50),
                us(p99)
            );
        }
    }
    drop((plain, shadowed));
}
