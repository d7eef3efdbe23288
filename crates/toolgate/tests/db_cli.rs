//! `toolgate approvals`, `toolgate audit verify` and `toolgate migrate`
//! against a real SQLite file.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use toolgate_store::{DecisionRecord, NewApproval, Store};

fn toolgate(args: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate");
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out.stdout).into_owned()));
    (out.status.code(), json)
}

fn record(i: usize) -> DecisionRecord {
    DecisionRecord {
        decision_id: format!("d{i}"),
        run_id: "r".into(),
        step_id: "s".into(),
        tool: "bash".into(),
        verdict: "deny".into(),
        reason: "deny_rule".into(),
        message: None,
        matched_rule: Some("deny:bash:rm *".into()),
        policy_version: "p@000000000000+h00000000".into(),
        risk: "high".into(),
        args_digest: "sha256:00".into(),
        call_digest: None,
        definition_digest: None,
        created_at: jiff::Timestamp::now(),
    }
}

#[tokio::test]
async fn approvals_and_audit_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let (code, out) = toolgate(&["migrate", "--database", &url]);
    assert_eq!(
        (code, &out["migrated"]),
        (Some(0), &Value::Bool(true)),
        "{out}"
    );

    let store = Store::connect(&url).await.unwrap();
    let approval = store
        .approvals()
        .request(NewApproval {
            approval_id: None,
            invocation_id: "inv-1".into(),
            tenant: "team-a".into(),
            run_id: "r".into(),
            tool: "deploy".into(),
            args_digest: "sha256:ab".into(),
            call_digest: None,
            policy_version: "p@000000000000+h00000000".into(),
            decision_id: "d0".into(),
            requested_by: "sidecar:agents/pod-1".into(),
            ttl: Duration::from_secs(600),
            action: None,
            preview: None,
        })
        .await
        .unwrap();

    let (code, list) = toolgate(&[
        "approvals",
        "list",
        "--database",
        &url,
        "--status",
        "pending",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(list[0]["id"], approval.id.as_str());
    let (_, other) = toolgate(&[
        "approvals",
        "list",
        "--database",
        &url,
        "--tenant",
        "team-b",
    ]);
    assert_eq!(
        other.as_array().map(Vec::len),
        Some(0),
        "tenants are isolated"
    );

    let (code, resolved) = toolgate(&[
        "approvals",
        "approve",
        &approval.id,
        "--database",
        &url,
        "--by",
        "alice",
        "--reason",
        "ok",
    ]);
    assert_eq!(code, Some(0), "{resolved}");
    assert_eq!(resolved["status"], "approved");
    assert_eq!(resolved["resolved_by"], "alice");
    let (code, err) = toolgate(&[
        "approvals",
        "deny",
        &approval.id,
        "--database",
        &url,
        "--by",
        "bob",
    ]);
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (Some(2), Some("conflict")),
        "{err}"
    );
    let (code, err) = toolgate(&["approvals", "list", "--database", &url, "--status", "maybe"]);
    assert_eq!(
        (code, err["error"]["code"].as_str()),
        (Some(2), Some("invalid_input"))
    );

    for i in 0..5 {
        store.decisions().append("team-a", record(i)).await.unwrap();
    }
    let (code, report) = toolgate(&["audit", "verify", "--database", &url]);
    assert_eq!(
        (code, &report["ok"]),
        (Some(0), &Value::Bool(true)),
        "{report}"
    );
    assert_eq!(report["chains"][0]["rows"], 5);

    sqlx::query("UPDATE decisions SET verdict = 'allow' WHERE seq = 3")
        .execute(store.as_sqlite().unwrap())
        .await
        .unwrap();
    let (code, report) = toolgate(&["audit", "verify", "--database", &url, "--tenant", "team-a"]);
    assert_eq!(code, Some(1), "a broken chain fails the command: {report}");
    assert_eq!(report["chains"][0]["first_broken_seq"], 3);
}
