//! `toolgate replay` against a log a real sidecar wrote under a profile
//! recording its inputs (`spec.audit.recordInputs`), on both engines: a
//! candidate with known flips gives the exact transition matrix (one of
//! them only through the run's history), loosenings listed first and exit
//! 3; the active profile itself changes nothing (exit 0); an input edited
//! in the database is refused by replay and by `audit verify`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::audit_log_cli::engines;
use crate::common::{AgentCall, record_calls, signed_bundle, toolgate};

pub(crate) const ACTIVE: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: replay-active, namespace: NAMESPACE}
spec:
  mode: rules
  rules:
    bash: {deny: ["rm *"], allow: ["echo *", "git *", "curl *"], escalate: ["deploy *"]}
    reader: {allow: ["*"]}
  effects:
    bash: {sideEffect: PROCESS_EXEC, risk: low, matchArgs: [command]}
    reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [path]}
  audit: {recordInputs: RECORDING}
"#;

/// Loosens `rm`, denies `deploy`, and denies `curl` in a run that read
/// something: only the history of run r1 makes its curl a flip.
pub(crate) const CANDIDATE: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: replay-candidate}
spec:
  mode: rules
  rules:
    bash: {deny: ["deploy *"], allow: ["echo *", "git *", "curl *", "rm *"]}
    reader: {allow: ["*"]}
  effects:
    bash: {sideEffect: PROCESS_EXEC, risk: low, matchArgs: [command]}
    reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [path]}
  flows:
    labels:
      private: {tools: [reader]}
    rules:
      - name: no-exfiltration
        when: [private]
        deny: {tools: [bash], match: ["curl *"]}
"#;

/// The calls the agent makes, with the verdicts [`ACTIVE`] enforces.
pub(crate) const CALLS: [AgentCall; 7] = [
    ("r1", "bash", "echo hi", "allow"),
    ("r1", "bash", "rm -rf build", "deny"),
    ("r1", "bash", "deploy prod", "escalate"),
    ("r1", "reader", "notes/key.pem", "allow"),
    ("r1", "bash", "curl https://example.com", "allow"),
    ("r2", "bash", "curl https://example.com", "allow"),
    ("r2", "bash", "git status", "allow"),
];

/// Keys and a signed bundle of [`ACTIVE`] in `dir`, recording inputs as
/// `recording`, with `extra_spec` lines appended to its spec.
fn write_bundle(dir: &Path, recording: &str, namespace: &str, extra_spec: &str) {
    let profile = dir.join("active.yaml");
    let text = ACTIVE
        .replace("NAMESPACE", namespace)
        .replace("RECORDING", recording)
        + extra_spec;
    std::fs::write(&profile, text).unwrap();
    signed_bundle(dir, &profile, None);
}

/// `toolgate replay` as JSON: its exit code and report.
fn replay(database: &str, tenant: &str, candidate: &Path) -> (i32, Value) {
    let out = toolgate(&[
        "replay",
        "--database",
        database,
        "--tenant",
        tenant,
        "--candidate",
        candidate.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|_| panic!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), report)
}

/// Replays until the background log has written every decision and input.
async fn settled_replay(database: &str, tenant: &str, candidate: &Path) -> (i32, Value) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, report) = replay(database, tenant, candidate);
        if report["replayed"] == CALLS.len() || Instant::now() > deadline {
            return (code, report);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_candidate_replayed_on_a_real_sidecars_log_gives_the_exact_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let candidate = dir.path().join("candidate.yaml");
    std::fs::write(&candidate, CANDIDATE).unwrap();
    for (i, (database, _schema)) in engines(dir.path()).await.iter().enumerate() {
        let run_dir = dir.path().join(format!("engine{i}"));
        std::fs::create_dir_all(&run_dir).unwrap();
        let namespace = format!("replay-{}-{i}", std::process::id());
        write_bundle(&run_dir, "full", &namespace, "");
        let tenant = format!("replay-{i}");
        let (_sidecar, _) = record_calls(&run_dir, database, &tenant, None, &CALLS).await;

        let (code, report) = settled_replay(database, &tenant, &candidate).await;
        assert_eq!(code, 3, "{report:#}");
        assert_eq!(report["decisions"], 7, "{report:#}");
        assert_eq!(report["replayed"], 7);
        assert_eq!(
            report["transitions"],
            json!({"allow→allow": 4, "deny→allow": 1, "escalate→deny": 1, "allow→deny": 1}),
            "{report:#}"
        );
        assert_eq!(report["changed"], 3);
        assert_eq!(report["loosened"], 1);
        let changes = report["changes"].as_array().unwrap();
        assert_eq!(changes[0]["old"]["verdict"], "deny", "deny→allow first");
        assert_eq!(changes[0]["new"]["verdict"], "allow");
        assert_eq!(changes[0]["old"]["rule"], "deny:bash:rm *");
        // The curl of r1 is denied only because r1 read a file first.
        let curl = changes
            .iter()
            .find(|c| c["new"]["reason"] == "flow_rule")
            .expect("the history-dependent flip");
        assert_eq!(curl["run_id"], "r1");

        // The active profile itself changes nothing.
        let active = run_dir.join("active.yaml");
        let (code, same) = replay(database, &tenant, &active);
        assert_eq!((code, &same["changed"]), (0, &json!(0)), "{same:#}");
        assert_eq!(same["replayed"], 7);
    }
}

#[tokio::test]
async fn masked_inputs_replay_only_where_masking_changed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = &engines(dir.path()).await[0];
    write_bundle(
        dir.path(),
        "masked",
        &format!("replay-m-{}", std::process::id()),
        "",
    );
    let tenant = "masked";
    let (_sidecar, base) = record_calls(dir.path(), database, tenant, None, &CALLS).await;
    let client = reqwest::Client::new();
    let secret = json!({"tool": "bash", "run_id": "r3", "step_id": "s9",
        "arguments": {"command": "echo token=hunter2-secret"}});
    let r = client
        .post(format!("{base}/v1/authorize"))
        .json(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let active = dir.path().join("active.yaml");
    let deadline = Instant::now() + Duration::from_secs(15);
    let report = loop {
        let (_, report) = replay(database, tenant, &active);
        if report["decisions"] == 8 && report["not_replayed"]["masked"] == 1 {
            break report;
        }
        assert!(Instant::now() < deadline, "{report:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(report["replayed"], 7, "{report:#}");
    assert_eq!(report["not_replayed_list"][0]["why"], "masked");
    // The secret reached neither the inputs nor the log.
    let pool = sqlx::SqlitePool::connect(database).await.unwrap();
    let stored: Vec<(String,)> = sqlx::query_as(
        "SELECT call FROM decision_inputs UNION ALL SELECT COALESCE(message, '') FROM decisions",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert!(stored.len() >= 16, "{stored:?}");
    assert!(
        stored.iter().all(|(text,)| !text.contains("hunter2")),
        "the secret was stored: {stored:?}"
    );
}

#[tokio::test]
async fn an_input_edited_in_the_database_is_refused_by_replay_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = &engines(dir.path()).await[0];
    write_bundle(
        dir.path(),
        "full",
        &format!("replay-t-{}", std::process::id()),
        "",
    );
    let tenant = "tamper";
    let (_sidecar, _) = record_calls(dir.path(), database, tenant, None, &CALLS).await;
    let candidate = dir.path().join("active.yaml");
    let (_, before) = settled_replay(database, tenant, &candidate).await;
    assert_eq!(before["replayed"], 7, "{before:#}");

    // Rewrite the denied `rm` as a harmless echo: replaying it would show
    // deny→allow for a call never made.
    let pool = sqlx::SqlitePool::connect(database).await.unwrap();
    let done = sqlx::query(
        "UPDATE decision_inputs SET call = replace(call, 'rm -rf build', 'echo rm') \
         WHERE call LIKE '%rm -rf build%'",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(done.rows_affected(), 1);
    pool.close().await;

    let (code, after) = replay(database, tenant, &candidate);
    assert_eq!(code, 0, "{after:#}");
    assert_eq!(after["replayed"], 6);
    assert_eq!(after["not_replayed"]["input_mismatch"], 1, "{after:#}");

    let out = toolgate(&["audit", "verify", "--database", database]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let body: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        body["inputs"][0]["mismatched"].as_array().unwrap().len(),
        1,
        "{body:#}"
    );
    assert_eq!(body["inputs"][0]["matching"], 6);
}

#[tokio::test]
async fn a_warn_profile_replayed_against_itself_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = &engines(dir.path()).await[0];
    let ns = format!("replay-w-{}", std::process::id());
    write_bundle(dir.path(), "full", &ns, "  enforcement: warn\n");
    let tenant = "warn";
    // Warn enforces nothing: every call is let through.
    let calls = CALLS.map(|(run, tool, arg, _)| (run, tool, arg, "allow"));
    let (_sidecar, _) = record_calls(dir.path(), database, tenant, None, &calls).await;
    let active = dir.path().join("active.yaml");
    let (code, report) = settled_replay(database, tenant, &active).await;
    assert_eq!(report["replayed"], 7, "{report:#}");
    // Compared by what each side judged, not by the allow warn answered.
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["transitions"]["deny→deny"], 1, "{report:#}");
    assert_eq!(report["transitions"]["escalate→escalate"], 1);

    // The enforcing candidate sees the same verdicts.
    let (code, _) = replay(database, tenant, &dir.path().join("candidate.yaml"));
    assert_eq!(code, 1, "no such file: an error is exit 1, not 2 or 3");
    let out = toolgate(&[
        "replay",
        "--database",
        database,
        "--tenant",
        tenant,
        "--candidate",
        active.to_str().unwrap(),
        "--min-replayed",
        "8",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
