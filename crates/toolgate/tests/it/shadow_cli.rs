//! Shadow mode through a real sidecar: a bundle built with `--candidate`
//! enforces only the active profile, records the candidate's verdict
//! beside each decision (in the chained message: `audit verify` still
//! passes), counts it in `toolgate_shadow_decisions_total`, and `audit log
//! --shadow-changed` lists exactly the calls the two decide differently.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{free_port, record_calls, signed_bundle, toolgate};
use crate::replay_cli::{ACTIVE, CALLS, CANDIDATE};

fn build_shadow_bundle(dir: &Path) {
    let active = dir.join("active.yaml");
    let text = ACTIVE
        .replace("NAMESPACE", "shadow")
        .replace("RECORDING", "full");
    std::fs::write(&active, text).unwrap();
    let candidate = dir.join("candidate.yaml");
    std::fs::write(&candidate, CANDIDATE).unwrap();
    let built = signed_bundle(dir, &active, Some(&candidate));
    assert!(
        built["candidate_version"]
            .as_str()
            .unwrap()
            .starts_with("replay-candidate@"),
        "{built}"
    );
}

fn shadow_changed(database: &str) -> Vec<Value> {
    let out = toolgate(&[
        "audit",
        "log",
        "--database",
        database,
        "--shadow-changed",
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_shadowed_candidate_is_recorded_counted_and_never_enforced() {
    let dir = tempfile::tempdir().unwrap();
    build_shadow_bundle(dir.path());
    let database = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("shadow.db").display()
    );
    // Only the active profile binds: `rm` stays denied, `deploy` escalated.
    let ops = free_port();
    let (_sidecar, _) = record_calls(dir.path(), &database, "shadow", Some(ops), &CALLS).await;

    let deadline = Instant::now() + Duration::from_secs(15);
    // Every decision logged first, so a late false positive cannot hide.
    loop {
        let out = toolgate(&["audit", "log", "--database", &database, "--format", "json"]);
        let logged = String::from_utf8_lossy(&out.stdout).lines().count();
        if logged == CALLS.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{logged} of {} logged",
            CALLS.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let changed = shadow_changed(&database);
    // The live candidate sees the active profile's labels by name, and the
    // active profile declares none: only the two tier flips differ here
    // (replay, which rebuilds the candidate's labels, also finds the curl).
    let flips: Vec<(String, String, String)> = changed
        .iter()
        .map(|r| {
            (
                r["reason"].as_str().unwrap().to_owned(),
                r["shadow"]["verdict"].as_str().unwrap().to_owned(),
                r["shadow"]["candidate_version"].as_str().unwrap()[..17].to_owned(),
            )
        })
        .collect();
    assert_eq!(
        flips,
        [
            (
                "deny_rule".into(),
                "allow".into(),
                "replay-candidate@".into()
            ),
            (
                "escalate_rule".into(),
                "deny".into(),
                "replay-candidate@".into()
            ),
        ],
        "{changed:#?}"
    );

    let metrics = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{ops}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (active, candidate, count) in [
        ("allow", "allow", 5),
        ("deny", "allow", 1),
        ("escalate", "deny", 1),
    ] {
        let line = format!(
            "toolgate_shadow_decisions_total{{active=\"{active}\",candidate=\"{candidate}\",profile=\"replay-active\"}} {count}"
        );
        assert!(metrics.contains(&line), "{line} not in\n{metrics}");
    }

    // Inputs were recorded beside the shadow: the chain vouches for both.
    let candidate = dir.path().join("candidate.yaml");
    let replayed = toolgate(&[
        "replay",
        "--database",
        &database,
        "--candidate",
        candidate.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(
        (replayed.status.code(), &report["replayed"]),
        (Some(3), &json!(7)),
        "{report:#}"
    );
    let out = toolgate(&["audit", "verify", "--database", &database]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
