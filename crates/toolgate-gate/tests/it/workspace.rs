//! The governed workspace at the gate: each operation is the call
//! `workspace.<op>`, decided, recorded and refused like any other; a path
//! the workspace itself refuses is a `workspace_refused` denial in the log.

use std::path::PathBuf;

use toolgate_gate::{PathRequest, WriteRequest};
use toolgate_policy::Id;

use crate::common::*;

const WORKSPACE: &str = r#"
mode: rules
rules:
  workspace.read: {allow: ["*"]}
  workspace.list: {allow: ["*"]}
  workspace.stat: {allow: ["*"]}
  workspace.write: {deny: ["locked/*"], allow: ["*.txt"], escalate: ["*"]}
hardline: {paths: ["**/.env"]}
effects:
  workspace.read: {sideEffect: WORKSPACE_READ, risk: low}
  workspace.list: {sideEffect: WORKSPACE_READ, risk: low}
  workspace.stat: {sideEffect: WORKSPACE_READ, risk: low}
  workspace.write: {sideEffect: WORKSPACE_WRITE, risk: high}
approvals: {ttlSeconds: 600}
"#;

fn write(run: &str, path: &str, content: &str) -> WriteRequest {
    WriteRequest {
        run_id: run_id(run),
        path: path.into(),
        content: content.into(),
        step_id: Some(Id::parse("s1").unwrap()),
    }
}

fn path(run: &str, path: &str) -> PathRequest {
    PathRequest {
        run_id: run_id(run),
        path: path.into(),
        step_id: None,
    }
}

/// The run's workspace directory on disk.
fn run_dir(g: &TestGate, run: &str) -> PathBuf {
    g.workspaces.path().join(&g.tenant).join(run)
}

/// An allowed write and read are each one decision in the log (a
/// high-risk write with its intent, closed); the read returns what was
/// written.
#[tokio::test]
async fn allowed_operations_are_recorded_decisions() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(WORKSPACE)).await;
        let run = unique("run");
        let written = g
            .gate
            .workspace_write(write(&run, "notes/a.txt", "hello"))
            .await
            .unwrap();
        let rec = g.logged(&written.decision_id).await;
        assert_eq!(
            (rec.tool.as_str(), rec.verdict.as_str()),
            ("workspace.write", "allow")
        );
        // The high-risk write's intent was begun and closed around it.
        assert!(
            g.gate
                .pending_intents(&run_id(&run))
                .await
                .unwrap()
                .is_empty()
        );
        let read = g
            .gate
            .workspace_read(path(&run, "notes/a.txt"))
            .await
            .unwrap();
        assert_eq!(read.result.content, "hello");
        let rec = g.logged(&read.decision_id).await;
        assert_eq!(
            (rec.tool.as_str(), rec.verdict.as_str()),
            ("workspace.read", "allow")
        );
        assert_ne!(read.decision_id, written.decision_id);
    });
}

/// A denied, hardlined or escalated operation is refused with the verdict
/// (`policy_denied`, `approval_required`), recorded, and touches nothing.
#[tokio::test]
async fn refused_operations_touch_nothing() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(WORKSPACE)).await;
        let run = unique("run");
        for (file, code, reason) in [
            ("locked/a", "policy_denied", "deny_rule"),
            ("app/.env", "policy_denied", "hardline_path"),
            ("review/a", "approval_required", "escalate_rule"),
        ] {
            let err = g
                .gate
                .workspace_write(write(&run, file, "x"))
                .await
                .unwrap_err();
            assert_eq!(err.code(), code, "{file}");
            let toolgate_gate::GateError::PolicyDenied { verdict, .. } = err else {
                panic!("{file}: not a policy refusal");
            };
            assert_eq!(verdict.verdict.reason.as_str(), reason, "{file}");
            assert_eq!(g.logged(&verdict.decision_id).await.reason, reason);
            assert!(!run_dir(&g, &run).join(file).exists(), "{file} written");
        }
        assert_eq!(g.approvals().await.len(), 1);
    });
}

/// A path that leaves the run's root through a link is refused by the
/// workspace (`workspace_escape`) and recorded as a `workspace_refused`
/// denial naming that check; the chain verifies.
#[tokio::test]
async fn a_workspace_refusal_is_in_the_log() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(WORKSPACE)).await;
        let run = unique("run");
        g.gate
            .workspace_write(write(&run, "a.txt", "x"))
            .await
            .unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), run_dir(&g, &run).join("out")).unwrap();
        let err = g
            .gate
            .workspace_read(path(&run, "out/secret"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "workspace_escape");
        let log = g.log().await;
        let refused: Vec<_> = log
            .iter()
            .filter(|r| r.record.reason == "workspace_refused")
            .collect();
        assert_eq!(refused.len(), 1, "{log:?}");
        let rec = &refused[0].record;
        assert_eq!(rec.tool, "workspace.read");
        assert_eq!(rec.verdict, "deny");
        assert_eq!(
            rec.matched_rule.as_deref(),
            Some("workspace:workspace_escape")
        );
        assert_eq!(rec.run_id, run);
        assert!(g.verified_rows().await >= 2);
    });
}

/// A path through a link inside the root is decided once on both the name
/// and where it leads: a link to a hardlined file is `hardline_path`, and
/// the one decision records both paths.
#[tokio::test]
async fn a_link_is_decided_on_both_its_name_and_target() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(WORKSPACE)).await;
        let run = unique("run");
        g.gate
            .workspace_write(write(&run, "a.txt", "x"))
            .await
            .unwrap();
        std::fs::write(run_dir(&g, &run).join(".env"), "KEY=1").unwrap();
        std::os::unix::fs::symlink(".env", run_dir(&g, &run).join("cfg")).unwrap();
        let rows_before = g.log().await.len();
        let err = g.gate.workspace_read(path(&run, "cfg")).await.unwrap_err();
        assert_eq!(err.code(), "policy_denied");
        let toolgate_gate::GateError::PolicyDenied { verdict, .. } = err else {
            unreachable!()
        };
        assert_eq!(verdict.verdict.reason.as_str(), "hardline_path");
        let rec = g.logged(&verdict.decision_id).await;
        let both = object(serde_json::json!({"path": ["cfg", ".env"]}));
        assert_eq!(rec.args_digest, toolgate_policy::args_digest(&both));
        assert_eq!(g.log().await.len(), rows_before + 1, "one decision");
    });
}

/// A path whose text climbs out of the root is denied by the policy
/// (`path_escapes`), recorded, and never reaches the disk.
#[tokio::test]
async fn a_climbing_path_is_a_recorded_policy_denial() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(WORKSPACE)).await;
        let run = unique("run");
        let err = g
            .gate
            .workspace_read(path(&run, "../other/a.txt"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "policy_denied");
        let toolgate_gate::GateError::PolicyDenied { verdict, .. } = err else {
            unreachable!()
        };
        assert_eq!(verdict.verdict.reason.as_str(), "path_escapes");
        let rec = g.logged(&verdict.decision_id).await;
        assert_eq!(
            (rec.tool.as_str(), rec.verdict.as_str()),
            ("workspace.read", "deny")
        );
    });
}
