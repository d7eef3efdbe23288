//! Escalations are charged (issue #31, item 9): a human is never asked
//! about a call the run's budget would refuse, and an approved call is
//! charged once, when it passes.

use serde_json::json;
use toolgate_store::{ApprovalDecision, ApprovalStatus};

use crate::common::*;

#[tokio::test]
async fn escalations_with_a_spent_budget_ask_no_one() {
    let spec = format!("{SPEC}budgets: {{maxCallsPerRun: 2}}\n");
    each_backend!(&spec, |h| {
        let run = unique("run");
        for i in 0..2 {
            let v = h
                .authorize("reader", json!({"path": format!("f{i}")}), &run)
                .await;
            assert_eq!(v["verdict"], "allow", "{v}");
        }
        for i in 0..50 {
            let v = h
                .authorize("deploy", json!({"env": format!("prod-{i}")}), &run)
                .await;
            assert_eq!(
                (v["verdict"].as_str(), v["reason"].as_str()),
                (Some("deny"), Some("budget_exhausted")),
                "{v}"
            );
            assert!(v.get("approval_id").is_none(), "{v}");
            assert_eq!(v["matched_rule"], "budget:maxCallsPerRun=2");
        }
        // The batch endpoint decides through the same path.
        let (_, batch) = h
            .post(
                "/v1/authorize/batch",
                json!({"run_id": run, "calls": [{"tool": "deploy", "arguments": {"env": "x"}}]}),
            )
            .await;
        assert_eq!(
            batch["verdicts"][0]["reason"], "budget_exhausted",
            "{batch}"
        );
        assert!(h.approvals().await.is_empty(), "a human was asked");
        // Another run's escalation is still put to a human.
        let v = h
            .authorize("deploy", json!({"env": "prod"}), &unique("run"))
            .await;
        assert_eq!(v["verdict"], "escalate", "{v}");
        assert_eq!(h.approvals().await.len(), 1);
    });
}

#[tokio::test]
async fn a_spent_high_risk_budget_refuses_high_risk_escalations_only() {
    let spec = format!("{SPEC}budgets: {{maxHighRiskCallsPerRun: 1}}\n");
    each_backend!(&spec, |h| {
        let run = unique("run");
        let v = h.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(v["verdict"], "allow", "{v}");
        // `make` escalates, and bash is high risk: the run cannot pay.
        let v = h.authorize("bash", json!({"command": "make"}), &run).await;
        assert_eq!(
            (v["reason"].as_str(), v["matched_rule"].as_str()),
            (
                Some("budget_exhausted"),
                Some("budget:maxHighRiskCallsPerRun=1")
            ),
            "{v}"
        );
        // `deploy` (risk write) still escalates.
        let v = h.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(v["verdict"], "escalate", "{v}");
        assert_eq!(h.approvals().await.len(), 1);
    });
}

#[tokio::test]
async fn an_approved_call_is_charged_once_when_it_passes() {
    let spec = format!("{SPEC}budgets: {{maxCallsPerRun: 2}}\n");
    each_backend!(&spec, |h| {
        let run = unique("run");
        let used = |state: &serde_json::Value| state["budgets"]["calls"]["used"].clone();
        let v = h.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(v["verdict"], "escalate", "{v}");
        let (_, state) = h.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(used(&state), 0, "an escalation is not charged: {state}");
        let approval = v["approval_id"].as_str().unwrap().to_owned();
        h.store
            .approvals()
            .resolve(
                &h.tenant,
                &approval,
                ApprovalDecision::Approved,
                "alice",
                None,
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
        let v = h.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(
            (v["verdict"].as_str(), v["reason"].as_str()),
            (Some("allow"), Some("approved"))
        );
        let (_, state) = h.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(used(&state), 1, "charged once, when it passed: {state}");
        // One call left: another escalation is asked for and approved…
        let v = h.authorize("deploy", json!({"env": "staging"}), &run).await;
        assert_eq!(v["verdict"], "escalate", "a new call is asked for: {v}");
        let second = v["approval_id"].as_str().unwrap().to_owned();
        h.store
            .approvals()
            .resolve(
                &h.tenant,
                &second,
                ApprovalDecision::Approved,
                "alice",
                None,
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
        // …but a read spends the last call first: the approved call is
        // refused, and its approval is kept unused.
        let v = h.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(v["verdict"], "allow", "{v}");
        let v = h.authorize("deploy", json!({"env": "staging"}), &run).await;
        assert_eq!(v["reason"], "budget_exhausted", "{v}");
        let left = h
            .store
            .approvals()
            .get(&h.tenant, &second, jiff::Timestamp::now())
            .await
            .unwrap();
        assert_eq!(left.status, ApprovalStatus::Approved);
        assert!(left.consumed_at.is_none(), "refused calls use no approval");
        let (_, state) = h.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(used(&state), 2, "{state}");
    });
}
