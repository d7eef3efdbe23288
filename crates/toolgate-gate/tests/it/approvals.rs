//! Approvals at the gate: an escalated call asks for an approval; once an
//! approver resolves it in the store, asking again lets exactly that call
//! through exactly once, and nothing else.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::json;
use toolgate_policy::{Decision, Id, Reason};
use toolgate_store::{ApprovalDecision, ApprovalStatus};

use crate::common::*;

/// An escalated call creates one pending approval bound to the call (its
/// run, tool, digests and decision); asking again before anyone answers
/// finds the same approval rather than a second one.
#[tokio::test]
async fn an_escalation_creates_a_pending_approval() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::EscalateRule));
        let id = v.approval_id.clone().expect("an approval is asked for");
        let a = g.gate.approval(&id, None).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Pending);
        assert_eq!(a.run_id, run);
        assert_eq!(a.tool, "deploy");
        assert_eq!(a.args_digest, v.verdict.args_digest);
        assert_eq!(
            a.call_digest.as_deref(),
            Some(v.verdict.call_digest.as_str())
        );
        assert_eq!(a.decision_id, v.decision_id);
        let again = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&again), (Decision::Escalate, Reason::EscalateRule));
        assert_eq!(again.approval_id.as_deref(), Some(id.as_str()));
        assert_eq!(g.approvals().await.len(), 1);
        // Recorded as an escalation.
        let rec = g.logged(&v.decision_id).await;
        assert_eq!(
            (rec.verdict.as_str(), rec.reason.as_str()),
            ("escalate", "escalate_rule")
        );
    });
}

/// An approved call passes once (`approved`, naming the approval); the
/// same call a second time asks again, under a new approval.
#[tokio::test]
async fn an_approval_lets_exactly_one_call_through() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let asked = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        let id = asked.approval_id.unwrap();
        g.resolve(&id, ApprovalDecision::Approved).await;
        assert_eq!(
            g.gate.approval(&id, None).await.unwrap().status,
            ApprovalStatus::Approved
        );

        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::Approved));
        assert_eq!(v.verdict.matched_rule, Some(format!("approval:{id}")));
        let rec = g.logged(&v.decision_id).await;
        assert_eq!(
            (rec.verdict.as_str(), rec.reason.as_str()),
            ("allow", "approved")
        );
        let a = g.gate.approval(&id, None).await.unwrap();
        assert!(a.consumed_at.is_some(), "the approval is used up");

        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::EscalateRule));
        let fresh = v.approval_id.expect("asked anew");
        assert_ne!(fresh, id);
        assert_eq!(g.approvals().await.len(), 2);
    });
}

/// An approval is for one call: other arguments, another action with the
/// same arguments, another run or another step are each asked about on
/// their own, and the approval stays unused for the call it was for.
#[tokio::test]
async fn an_approval_allows_no_other_call() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let asked = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        let id = asked.approval_id.unwrap();
        g.resolve(&id, ApprovalDecision::Approved).await;

        let mut others = vec![
            call("deploy", json!({"env": "staging"}), &run),
            call("deploy", json!({"env": "prod"}), &unique("run")),
        ];
        let mut action = call("deploy", json!({"env": "prod"}), &run);
        action.action = Some(Id::parse("destroy").unwrap());
        others.push(action);
        let mut step = call("deploy", json!({"env": "prod"}), &run);
        step.step_id = Some(Id::parse("s2").unwrap());
        others.push(step);
        for req in &others {
            let v = g.gate.authorize(req).await.unwrap();
            assert_eq!(
                outcome(&v),
                (Decision::Escalate, Reason::EscalateRule),
                "{req:?}"
            );
            assert_ne!(v.approval_id.as_deref(), Some(id.as_str()), "{req:?}");
        }
        assert!(
            g.gate
                .approval(&id, None)
                .await
                .unwrap()
                .consumed_at
                .is_none()
        );
        // The call it was for still passes.
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::Approved));
    });
}

/// A denied approval denies the call (`approval_denied`, naming it).
#[tokio::test]
async fn a_denied_approval_denies_the_call() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let id = g
            .authorize("deploy", json!({"env": "prod"}), &run)
            .await
            .approval_id
            .unwrap();
        g.resolve(&id, ApprovalDecision::Denied).await;
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::ApprovalDenied));
        assert_eq!(v.verdict.matched_rule, Some(format!("approval:{id}")));
    });
}

/// Under budgets an approved call is charged once, when it passes; the
/// escalations before it cost nothing.
#[tokio::test]
async fn an_approved_call_is_charged_when_it_passes() {
    let spec = with_budgets("{maxCallsPerRun: 5}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let calls_used = async || {
            let s = g.gate.run_status(&run_id(&run)).await.unwrap();
            s.budgets.calls.used
        };
        let id = g
            .authorize("deploy", json!({"env": "prod"}), &run)
            .await
            .approval_id
            .unwrap();
        let _ = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(calls_used().await, 0);
        g.resolve(&id, ApprovalDecision::Approved).await;
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::Approved));
        assert_eq!(calls_used().await, 1);
    });
}

/// An approved call the run's budget can no longer pay for is refused
/// `budget_exhausted`; its approval stays approved and unused.
#[tokio::test]
async fn an_approved_call_the_budget_refuses_keeps_its_approval() {
    let spec = with_budgets("{maxCallsPerRun: 1}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let id = g
            .authorize("deploy", json!({"env": "prod"}), &run)
            .await
            .approval_id
            .unwrap();
        g.resolve(&id, ApprovalDecision::Approved).await;
        let v = g.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        let a = g.gate.approval(&id, None).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Approved);
        assert!(a.consumed_at.is_none(), "a refused call uses no approval");
        let status = g.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.budgets.calls.used, 1);
    });
}

/// An approval is bound to the policy version it was asked under: after a
/// new bundle is swapped in, the approved call is asked about afresh and
/// the old approval stays unused.
#[tokio::test]
async fn an_approval_does_not_survive_a_new_policy() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let asked = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        let id = asked.approval_id.unwrap();
        g.resolve(&id, ApprovalDecision::Approved).await;
        g.reload(&with_budgets("{maxCallsPerRun: 100}"));
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_ne!(v.verdict.policy_version, asked.verdict.policy_version);
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::EscalateRule));
        assert_ne!(v.approval_id.as_deref(), Some(id.as_str()));
        assert!(
            g.gate
                .approval(&id, None)
                .await
                .unwrap()
                .consumed_at
                .is_none()
        );
    });
}

/// Waiting on an approval returns as soon as an approver resolves it; an
/// approval of another tenant is not found through this gate.
#[tokio::test]
async fn an_approval_is_waited_on_within_its_tenant() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let other = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let id = g
            .authorize("deploy", json!({"env": "prod"}), &run)
            .await
            .approval_id
            .unwrap();
        let err = other.gate.approval(&id, None).await.unwrap_err();
        assert_eq!(err.code(), "not_found");
        let started = std::time::Instant::now();
        let (waited, ()) =
            tokio::join!(g.gate.approval(&id, Some(Duration::from_secs(30))), async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                g.resolve(&id, ApprovalDecision::Approved).await;
            });
        assert_eq!(waited.unwrap().status, ApprovalStatus::Approved);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the wait ran out"
        );
    });
}

/// An approval lapses with its TTL: an approved one not used in time lets
/// nothing through, and a pending one is not waited on forever; the call
/// is asked about afresh either way.
#[tokio::test]
async fn a_lapsed_approval_lets_nothing_through() {
    let spec = SPEC.replace("ttlSeconds: 600", "ttlSeconds: 1");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let approved = g
            .authorize("deploy", json!({"env": "prod"}), &run)
            .await
            .approval_id
            .unwrap();
        g.resolve(&approved, ApprovalDecision::Approved).await;
        let pending = g
            .authorize("deploy", json!({"env": "staging"}), &run)
            .await
            .approval_id
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        for (env, old) in [("prod", &approved), ("staging", &pending)] {
            let v = g.authorize("deploy", json!({ "env": env }), &run).await;
            assert_eq!(
                outcome(&v),
                (Decision::Escalate, Reason::EscalateRule),
                "{env}"
            );
            let fresh = v.approval_id.unwrap();
            assert_ne!(&fresh, old, "{env}");
        }
        let a = g.gate.approval(&approved, None).await.unwrap();
        assert!(a.consumed_at.is_none());
        let err = g
            .store
            .approvals()
            .resolve(
                &g.tenant,
                &pending,
                ApprovalDecision::Approved,
                "alice",
                None,
                Timestamp::now(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), "approval_expired");
    });
}
