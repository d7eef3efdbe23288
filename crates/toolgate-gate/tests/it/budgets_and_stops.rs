//! Budgets and stops at the gate: a run's budget is charged once per
//! allowed call in the shared database and the call over it is denied
//! `budget_exhausted`; a cancelled run (or pod) gets nothing more, in
//! every mode, on every sidecar that can see the cancellation.

use serde_json::json;
use toolgate_gate::runs::CancelRequest;
use toolgate_policy::{Decision, Reason};

use crate::common::*;

fn read(i: usize) -> serde_json::Value {
    json!({"path": format!("f{i}")})
}

/// Each allowed call uses one call of the budget, a refused one none; the
/// call over the limit is denied with the budget named, recorded with it,
/// and another run's budget is its own.
#[tokio::test]
async fn the_call_budget_is_charged_per_allowed_call() {
    let spec = with_budgets("{maxCallsPerRun: 2}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let used = async || {
            let status = g.gate.run_status(&run_id(&run)).await.unwrap();
            (status.budgets.calls.used, status.budgets.calls.left)
        };
        assert_eq!(used().await, (0, Some(2)));
        // Denied calls are not charged.
        let v = g
            .authorize("bash", json!({"command": "rm -rf x"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::DenyRule));
        assert_eq!(used().await, (0, Some(2)));
        for i in 0..2 {
            let v = g.authorize("reader", read(i), &run).await;
            assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
            assert_eq!(used().await, (i as u64 + 1, Some(1 - i as u64)));
        }
        let v = g.authorize("reader", read(9), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("budget:maxCallsPerRun=2")
        );
        let rec = g.logged(&v.decision_id).await;
        assert_eq!(rec.reason, "budget_exhausted");
        assert_eq!(
            rec.message.as_deref(),
            Some("run budget used up (budget:maxCallsPerRun=2)")
        );
        assert_eq!(used().await, (2, Some(0)));
        // An escalation the budget could not pay for asks no one.
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert!(v.approval_id.is_none());
        assert!(g.approvals().await.is_empty());
        // Another run starts afresh.
        let v = g.authorize("reader", read(0), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
    });
}

/// The budget is the run's, not the sidecar's: two sidecars of the tenant
/// charge one count, and the high-risk budget counts high-risk calls only.
#[tokio::test]
async fn budgets_are_shared_and_counted_by_risk() {
    let spec = with_budgets("{maxCallsPerRun: 3, maxHighRiskCallsPerRun: 1}");
    each_backend!(|url| {
        let one = TestGate::start(url, Bundle::Live(&spec)).await;
        let two = one.peer(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let v = one.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let v = two
            .authorize("bash", json!({"command": "ls -l"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("budget:maxHighRiskCallsPerRun=1")
        );
        // The high-risk refusal is in the log before the answer.
        assert!(
            two.log()
                .await
                .iter()
                .any(|r| r.record.decision_id == v.decision_id)
        );
        for g in [&two, &one] {
            let v = g.authorize("reader", read(1), &run).await;
            assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        }
        let v = two.authorize("reader", read(2), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        let status = one.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.budgets.calls.used, 3);
        assert_eq!(status.budgets.high_risk_calls.used, 1);
    });
}

/// A spent high-risk budget refuses a high-risk call the tiers escalate
/// (no human is asked), while a write-risk escalation is still put to one.
#[tokio::test]
async fn a_spent_high_risk_budget_refuses_high_risk_escalations_only() {
    let spec = with_budgets("{maxHighRiskCallsPerRun: 1}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let v = g.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let v = g.authorize("bash", json!({"command": "make"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("budget:maxHighRiskCallsPerRun=1")
        );
        assert!(v.approval_id.is_none());
        assert!(g.approvals().await.is_empty());
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::EscalateRule));
        assert_eq!(g.approvals().await.len(), 1);
    });
}

/// A run cancelled through the gate is refused `run_cancelled` at once,
/// whatever the call (allowed, escalated); its pending approvals are
/// cancelled; other runs go on.
#[tokio::test]
async fn a_cancelled_runs_calls_are_denied() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let pending = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(
            outcome(&pending),
            (Decision::Escalate, Reason::EscalateRule)
        );
        let req = CancelRequest {
            reason: Some("operator stop".into()),
        };
        let done = g.gate.cancel_run(&run_id(&run), &req).await.unwrap();
        assert!(done.newly_cancelled);
        assert_eq!(done.approvals_cancelled, 1);
        let again = g.gate.cancel_run(&run_id(&run), &req).await.unwrap();
        assert!(!again.newly_cancelled, "cancelling is idempotent");
        for (tool, args) in [
            ("reader", read(0)),
            ("bash", json!({"command": "ls"})),
            ("deploy", json!({"env": "prod"})),
            ("deploy", json!({"env": "staging"})),
        ] {
            let v = g.authorize(tool, args, &run).await;
            assert_eq!(
                outcome(&v),
                (Decision::Deny, Reason::RunCancelled),
                "{tool}"
            );
        }
        // Only the first escalation ever asked a human.
        assert_eq!(g.approvals().await.len(), 1);
        let status = g.gate.run_status(&run_id(&run)).await.unwrap();
        assert!(status.cancel_requested);
        assert_eq!(status.cancel_reason.as_deref(), Some("operator stop"));
        let v = g.authorize("reader", read(0), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
    });
}

/// A cancellation made on another sidecar is seen without any poll by a
/// high-risk call (read before its append) and, under budgets, by every
/// call (read where the run is charged).
#[tokio::test]
async fn a_cancellation_made_elsewhere_is_seen() {
    let budgets = with_budgets("{maxCallsPerRun: 100}");
    each_backend!(|url| {
        for (spec, low_risk_sees_it) in [(SPEC, false), (budgets.as_str(), true)] {
            let one = TestGate::start(url, Bundle::Live(spec)).await;
            let two = one.peer(url, Bundle::Live(spec)).await;
            let run = unique("run");
            two.gate
                .cancel_run(&run_id(&run), &CancelRequest::default())
                .await
                .unwrap();
            let v = one.authorize("bash", json!({"command": "ls"}), &run).await;
            assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
            let v = one.authorize("deploy", json!({"env": "x"}), &run).await;
            assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
            // Once seen, the run is remembered: every later call is refused.
            let v = one.authorize("reader", read(0), &run).await;
            assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
            if low_risk_sees_it {
                let fresh = one.peer(url, Bundle::Live(spec)).await;
                let v = fresh.authorize("reader", read(1), &run).await;
                assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
            }
        }
    });
}

/// Cancelling the pod stops every run id the pod uses, including ones it
/// never used before; another pod of the tenant goes on.
#[tokio::test]
async fn a_cancelled_pod_gets_nothing_under_any_run_id() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let other = g.peer(url, Bundle::Live(SPEC)).await;
        let done = g.gate.cancel_pod(&CancelRequest::default()).await.unwrap();
        assert_eq!(done.scope, "pod pod-a");
        for run in [unique("run"), unique("fresh")] {
            let v = g.authorize("reader", read(0), &run).await;
            assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
            let v = other.authorize("reader", read(0), &run).await;
            assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        }
    });
}

/// A pod's stop outlives its sidecar: the pod's next sidecar (a restart,
/// with an empty memory) refuses a high-risk call or an escalation of any
/// run id at once, reading the stop where it reads the run.
#[tokio::test]
async fn a_pod_stop_binds_the_pods_next_sidecar() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        g.gate.cancel_pod(&CancelRequest::default()).await.unwrap();
        let next = TestGate::start_as(url, Bundle::Live(SPEC), &g.tenant, "pod-a").await;
        let run = unique("fresh");
        let v = next.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
        let v = next.authorize("deploy", json!({"env": "x"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
        assert!(next.approvals().await.is_empty());
        let status = next.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.cancelled_scope.as_deref(), Some("pod pod-a"));
    });
}

/// The pod's budget counts every run of the pod together (a new run id
/// does not reset it), and another pod's calls are its own; the run's
/// time budget runs from its first counted call.
#[tokio::test]
async fn pod_and_time_budgets_bind() {
    let per_pod = with_budgets("{perPod: {maxCalls: 2}}");
    let timed = with_budgets("{maxRunSeconds: 1}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&per_pod)).await;
        let other = g.peer(url, Bundle::Live(&per_pod)).await;
        for i in 0..2 {
            let v = g.authorize("reader", read(i), &unique("run")).await;
            assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        }
        let v = g.authorize("reader", read(3), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("budget:perPod.maxCalls=2")
        );
        // An escalation the pod could not pay for asks no one.
        let v = g
            .authorize("deploy", json!({"env": "x"}), &unique("run"))
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert!(g.approvals().await.is_empty());
        let v = other.authorize("reader", read(3), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));

        let g = TestGate::start(url, Bundle::Live(&timed)).await;
        let run = unique("run");
        let v = g.authorize("reader", read(0), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
        let v = g.authorize("reader", read(1), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("budget:maxRunSeconds=1")
        );
    });
}

/// `runs::read_run`, what `toolgate runs status` prints, reads the stops
/// and budgets as the pod's sidecar does when given the pod, and without
/// one sees no pod stop and no pod budgets; the run's own cancellation is
/// reported even while a wider stop is the one shown.
#[tokio::test]
async fn a_run_is_read_as_its_pod_sees_it_only_with_the_pod() {
    let spec = with_budgets("{perPod: {maxCalls: 5}}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        g.authorize("reader", read(0), &run).await;
        g.gate.cancel_pod(&CancelRequest::default()).await.unwrap();
        let enforced = g.gate.enforced().expect("a bundle is held");
        let read_run = async |pod| {
            let policy = Some(&enforced.policy);
            toolgate_gate::runs::read_run(&g.store, &g.tenant, &run_id(&run), pod, policy)
                .await
                .unwrap()
        };
        let seen = read_run(Some("pod-a")).await;
        assert_eq!(seen.status.cancelled_scope.as_deref(), Some("pod pod-a"));
        assert_eq!(
            seen.scope.map(|s| s.to_string()).as_deref(),
            Some("pod pod-a")
        );
        assert!(seen.status.cancel_requested && !seen.run_cancelled);
        let pod_calls = seen.status.budgets.pod_calls.expect("the pod's budget");
        assert_eq!((pod_calls.used, pod_calls.left), (1, Some(4)));
        let alone = read_run(None).await;
        assert!(!alone.status.cancel_requested && alone.scope.is_none());
        assert!(alone.status.budgets.pod_calls.is_none());
        assert_eq!(alone.status.budgets.calls.used, 1);

        g.gate
            .cancel_run(&run_id(&run), &CancelRequest::default())
            .await
            .unwrap();
        let seen = read_run(Some("pod-a")).await;
        assert!(seen.run_cancelled && seen.scope.is_some());
        assert!(read_run(None).await.run_cancelled);
    });
}
