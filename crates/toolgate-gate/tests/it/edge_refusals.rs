//! Every refusal an edge makes on its own (the MCP gateway's checks, the
//! workspace's) is a denial in the hash-chained decision log, written
//! before the refusal is answered; nothing but an edge reason can be
//! written that way.

use serde_json::json;
use toolgate_gate::{NO_POLICY, RefusalRequest};
use toolgate_policy::{Id, Reason};

use crate::common::*;

/// The refusal of `tool` in `run` for `reason`, made by `check`.
fn refusal(tool: &str, run: &str, reason: Reason, check: &str) -> RefusalRequest {
    RefusalRequest {
        tool: Id::parse(tool).unwrap(),
        arguments: Some(object(json!({"path": "a", "n": 1}))),
        run_id: run_id(run),
        step_id: Some(Id::parse("s7").unwrap()),
        reason,
        check: Id::parse(check).unwrap(),
        definition_digest: None,
    }
}

/// The check each edge reason is recorded with (docs/sidecar.md's table).
fn check_of(reason: Reason) -> String {
    match reason {
        Reason::WorkspaceRefused => "workspace:workspace_escape".to_owned(),
        other => format!("mcp:{}", other.as_str()),
    }
}

/// Each of the six edge reasons is recorded as a denial with its check,
/// run, step, tool and digests, durably before `refuse` returns, and the
/// stream's chain verifies over all of them.
#[tokio::test]
async fn every_edge_refusal_is_in_the_chained_log() {
    assert_eq!(Reason::EDGE.len(), 6, "a new edge reason needs a case here");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let mut ids = Vec::new();
        for reason in Reason::EDGE {
            let r = refusal("files.delete", &run, reason, &check_of(reason));
            let recorded = g.gate.refuse(&r).await.expect("refusal recorded");
            // Durable now, not after a background write.
            let log = g.log().await;
            let row = log
                .iter()
                .find(|row| row.record.decision_id == recorded.decision_id)
                .unwrap_or_else(|| panic!("{reason:?} not in the log"));
            let rec = &row.record;
            assert_eq!(rec.verdict, "deny");
            assert_eq!(rec.reason, reason.as_str());
            assert_eq!(rec.matched_rule.as_deref(), Some(check_of(reason).as_str()));
            assert_eq!(
                (rec.run_id.as_str(), rec.step_id.as_str()),
                (run.as_str(), "s7")
            );
            assert_eq!(rec.tool, "files.delete");
            let args = object(json!({"path": "a", "n": 1}));
            assert_eq!(rec.args_digest, toolgate_policy::args_digest(&args));
            // A tool the profile does not declare is recorded as high risk.
            assert_eq!(rec.risk, "high");
            ids.push(recorded.decision_id);
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 6, "decision ids are unique");
        assert_eq!(g.verified_rows().await, 6);
        // Counted like any denial.
        let metrics = g.gate.render_metrics();
        for reason in Reason::EDGE {
            let series = format!("reason=\"{}\"", reason.as_str());
            assert!(
                metrics
                    .lines()
                    .any(|l| l.starts_with("toolgate_decisions_total{") && l.contains(&series)),
                "{reason:?} not counted"
            );
        }
    });
}

/// A refusal carries the profile's risk for a declared tool, the held
/// policy version (`none` without a bundle) and the tool's definition
/// digest when the gateway gave one.
#[tokio::test]
async fn a_refusal_records_what_the_gate_knows() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let mut r = refusal(
            "reader",
            &run,
            Reason::InvalidArguments,
            "mcp:invalid_arguments",
        );
        let digest = format!("sha256:{}", "c".repeat(64));
        r.definition_digest = Some(Id::parse(digest.clone()).unwrap());
        r.step_id = None;
        let id = g.gate.refuse(&r).await.unwrap().decision_id;
        let rec = g.logged(&id).await;
        assert_eq!(rec.risk, "low");
        assert_eq!(rec.step_id, toolgate_gate::NO_STEP);
        assert_eq!(rec.definition_digest.as_deref(), Some(digest.as_str()));
        let held = g.gate.enforced().unwrap();
        assert_eq!(rec.policy_version, held.policy_version);

        let bare = TestGate::start(url, Bundle::None).await;
        let r = refusal("reader", &run, Reason::ToolNotListed, "mcp:tool_not_listed");
        let id = bare.gate.refuse(&r).await.unwrap().decision_id;
        let rec = bare.logged(&id).await;
        assert_eq!(
            (rec.policy_version.as_str(), rec.risk.as_str()),
            (NO_POLICY, "high")
        );
        assert_eq!(bare.verified_rows().await, 1);
    });
}

/// Only an edge reason can be written through `refuse`: a policy reason
/// (which would forge an allow's neighbour, or a human's denial) is
/// `invalid_request` and nothing is written.
#[tokio::test]
async fn refuse_writes_nothing_but_edge_reasons() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        for reason in [
            Reason::AllowRule,
            Reason::Approved,
            Reason::ApprovalDenied,
            Reason::DenyRule,
            Reason::RunCancelled,
            Reason::FlowRule,
        ] {
            let err = g
                .gate
                .refuse(&refusal("reader", &run, reason, "mcp:x"))
                .await
                .unwrap_err();
            assert_eq!(err.code(), "invalid_request", "{reason:?}");
        }
        assert!(g.log().await.is_empty());
    });
}
