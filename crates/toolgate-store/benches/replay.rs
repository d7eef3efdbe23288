//! `toolgate replay` at scale: N recorded decisions (default 1,000,000;
//! `TOOLGATE_REPLAY_N`) with their inputs in a temporary SQLite database,
//! replayed against a candidate that flips one call in a hundred. Beside
//! it, in the same run, the peer: reading the same pages without deciding
//! anything (what replay costs beyond reading the log).
//!
//! `cargo bench -p toolgate-store --bench replay` (release build; one
//! measurement per line, not a criterion loop: seeding a million rows is
//! the slow part).

use std::time::Instant;

use jiff::Timestamp;
use toolgate_policy::audit::RecordedCall;
use toolgate_policy::digest::sha256_hex;
use toolgate_store::{DecisionFilter, DecisionInput, DecisionRecord, INPUT_SHA256_MEMBER, Store};

const ACTIVE: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: bench}
spec:
  mode: rules
  rules:
    bash: {deny: ["rm *"], allow: ["echo *", "git *"]}
  effects:
    bash: {sideEffect: PROCESS_EXEC, risk: low, matchArgs: [command]}
  audit: {recordInputs: full}
"#;

const TENANT: &str = "bench";
const BATCH: usize = 10_000;
const CALLS_PER_RUN: u64 = 100;

/// The i-th call: one in a hundred is `git push`, which the candidate denies.
fn command(i: u64) -> String {
    if i % 100 == 7 {
        format!("git push origin b{i}")
    } else {
        format!("echo step {i}")
    }
}

fn seeded(i: u64, at: Timestamp) -> (DecisionRecord, DecisionInput) {
    let arguments = serde_json::json!({"command": command(i)});
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    let call = RecordedCall {
        tool: "bash".into(),
        action: None,
        arguments: arguments.clone(),
        provenance: None,
    }
    .to_canonical();
    let decision_id = format!("d-{i:010}");
    let message = serde_json::json!({ INPUT_SHA256_MEMBER: sha256_hex(call.as_bytes()) });
    let record = DecisionRecord {
        decision_id: decision_id.clone(),
        run_id: format!("run-{}", i / CALLS_PER_RUN),
        step_id: format!("s{i}"),
        tool: "bash".into(),
        verdict: "allow".into(),
        reason: "allow_rule".into(),
        message: Some(message.to_string()),
        matched_rule: Some("allow:bash:echo *".into()),
        policy_version: "bench@000000000000+h00000000".into(),
        risk: "low".into(),
        args_digest: toolgate_policy::args_digest(&arguments),
        call_digest: None,
        definition_digest: None,
        created_at: at,
    };
    let input = DecisionInput {
        decision_id,
        call,
        masked: false,
        recorded_at: at,
        expires_at: at + jiff::SignedDuration::from_hours(24 * 30),
    };
    (record, input)
}

#[tokio::main]
async fn main() {
    let n: u64 = std::env::var("TOOLGATE_REPLAY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("replay.db").display()
    );
    let store = Store::connect(&url).await.expect("store");

    let started = Instant::now();
    let t0 = Timestamp::now();
    let mut i = 0;
    while i < n {
        let end = (i + BATCH as u64).min(n);
        let (records, inputs): (Vec<_>, Vec<_>) = (i..end)
            .map(|k| seeded(k, t0 + jiff::SignedDuration::from_millis(k as i64)))
            .unzip();
        store
            .decisions()
            .append_batch(TENANT, "bench/1", records)
            .await
            .expect("append");
        store
            .decision_inputs()
            .put_batch(TENANT, &inputs)
            .await
            .expect("inputs");
        i = end;
    }
    println!(
        "replay/seed: {n} decisions with inputs in {:.1?}",
        started.elapsed()
    );

    let candidate_text = ACTIVE.replace(
        "bash: {deny: [\"rm *\"]",
        "bash: {deny: [\"rm *\", \"git push *\"]",
    );
    let candidate = toolgate_policy::compile_manifest(&candidate_text).expect("candidate");
    let filter = DecisionFilter {
        tenant: Some(TENANT.into()),
        ..DecisionFilter::default()
    };

    // The peer: the same pages read, nothing decided.
    let started = Instant::now();
    let mut after = None;
    let mut read = 0u64;
    loop {
        let page = store
            .decisions()
            .query(&filter, after.as_ref(), 5_000)
            .await
            .expect("page");
        let ids: Vec<&str> = page
            .rows
            .iter()
            .map(|r| r.decision.record.decision_id.as_str())
            .collect();
        read += store
            .decision_inputs()
            .get_many(TENANT, &ids)
            .await
            .expect("inputs")
            .len() as u64;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let read_time = started.elapsed();
    println!("replay/read_only (peer): {read} decisions and inputs read in {read_time:.1?}");

    let started = Instant::now();
    let report = toolgate_store::replay::replay(&store, &candidate, &filter)
        .await
        .expect("replay");
    let replay_time = started.elapsed();
    assert_eq!(report.replayed, n);
    assert_eq!(report.changed, n / 100 + u64::from(n % 100 > 7));
    println!(
        "replay/replay: {} decisions replayed, {} changed, in {replay_time:.1?} ({:.0} decisions/s; reading alone {read_time:.1?})",
        report.replayed,
        report.changed,
        n as f64 / replay_time.as_secs_f64()
    );
    store.close().await;
}
