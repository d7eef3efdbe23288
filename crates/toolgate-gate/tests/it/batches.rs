//! Batches at the gate: each call decided and recorded as `authorize`
//! would, and the batch parallel only when every call may run at once.

use serde_json::json;
use toolgate_gate::runs::{BatchCall, BatchRequest};
use toolgate_policy::{Decision, Id, Reason};

use crate::common::*;

fn batch_call(tool: &str, arguments: serde_json::Value) -> BatchCall {
    BatchCall {
        tool: Id::parse(tool).unwrap(),
        action: None,
        arguments: object(arguments),
        step_id: None,
        definition_digest: None,
    }
}

/// Read-only, parallel-safe allowed calls run at once; an escalated call
/// keeps the batch sequential, named by its index, and every call gets
/// its own verdict, each in the log.
#[tokio::test]
async fn a_batch_is_parallel_only_when_every_call_may_be() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let reads = BatchRequest {
            run_id: run_id(&run),
            tenant: None,
            calls: vec![
                batch_call("reader", json!({"path": "a"})),
                batch_call("reader", json!({"path": "b"})),
            ],
        };
        let answer = g.gate.authorize_batch(reads).await.unwrap();
        assert!(answer.parallel);
        assert_eq!(answer.reason, "batch_parallel");
        let mixed = BatchRequest {
            run_id: run_id(&run),
            tenant: None,
            calls: vec![
                batch_call("reader", json!({"path": "a"})),
                batch_call("deploy", json!({"env": "prod"})),
                batch_call("bash", json!({"command": "rm x"})),
            ],
        };
        let answer = g.gate.authorize_batch(mixed).await.unwrap();
        assert!(!answer.parallel);
        assert_eq!(
            (answer.reason.as_str(), answer.call_index),
            ("batch_escalated", Some(1))
        );
        let outcomes: Vec<_> = answer.verdicts.iter().map(outcome).collect();
        assert_eq!(
            outcomes,
            [
                (Decision::Allow, Reason::AllowRule),
                (Decision::Escalate, Reason::EscalateRule),
                (Decision::Deny, Reason::DenyRule),
            ]
        );
        for v in &answer.verdicts {
            g.logged(&v.decision_id).await;
        }
        assert!(answer.verdicts[1].approval_id.is_some());
    });
}

/// A batch names the first call that keeps it sequential: an allowed
/// effectful call (`batch_not_read_only`), a budget used up mid-batch
/// (`batch_budget`: the later call is refused, never a subset run at
/// once), a denied call (`batch_denied`).
#[tokio::test]
async fn a_batch_names_why_it_is_sequential() {
    let spec = with_budgets("{maxCallsPerRun: 3}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let read = || batch_call("reader", json!({"path": "a"}));
        let batch = |run: &str, calls| BatchRequest {
            run_id: run_id(run),
            tenant: None,
            calls,
        };
        let run = unique("run");
        let bash = batch_call("bash", json!({"command": "ls"}));
        let answer = g
            .gate
            .authorize_batch(batch(&run, vec![read(), bash]))
            .await;
        let answer = answer.unwrap();
        assert!(!answer.parallel);
        assert_eq!(
            (answer.reason.as_str(), answer.call_index),
            ("batch_not_read_only", Some(1))
        );
        assert!(answer.verdicts[1].verdict.intent_required);
        let answer = g
            .gate
            .authorize_batch(batch(&run, vec![read(), read()]))
            .await;
        let answer = answer.unwrap();
        assert_eq!(
            (answer.parallel, answer.reason.as_str(), answer.call_index),
            (false, "batch_budget", Some(1))
        );
        assert_eq!(
            outcome(&answer.verdicts[1]),
            (Decision::Deny, Reason::BudgetExhausted)
        );
        let unknown = batch_call("browser", json!({}));
        let answer = g
            .gate
            .authorize_batch(batch(&unique("run"), vec![read(), unknown]));
        let answer = answer.await.unwrap();
        assert_eq!(
            (answer.parallel, answer.reason.as_str()),
            (false, "batch_denied")
        );
        assert_eq!(
            outcome(&answer.verdicts[1]),
            (Decision::Deny, Reason::UnknownTool)
        );
    });
}

/// A batch decides an escalation as `authorize` does: one its run's spent
/// high-risk budget could not pay for is refused `budget_exhausted` and
/// asks no one (no approval row), while a write-risk escalation of the
/// same batch is still put to a human.
#[tokio::test]
async fn a_batch_escalation_the_budget_cannot_pay_for_asks_no_one() {
    let spec = with_budgets("{maxHighRiskCallsPerRun: 1}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let v = g.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        // `make` escalates, and bash is high risk: the run cannot pay.
        let req = BatchRequest {
            run_id: run_id(&run),
            tenant: None,
            calls: vec![
                batch_call("bash", json!({"command": "make"})),
                batch_call("deploy", json!({"env": "prod"})),
            ],
        };
        let answer = g.gate.authorize_batch(req).await.unwrap();
        assert_eq!(
            (answer.parallel, answer.reason.as_str(), answer.call_index),
            (false, "batch_budget", Some(0))
        );
        let refused = &answer.verdicts[0];
        assert_eq!(outcome(refused), (Decision::Deny, Reason::BudgetExhausted));
        assert_eq!(
            refused.verdict.matched_rule.as_deref(),
            Some("budget:maxHighRiskCallsPerRun=1")
        );
        assert!(refused.approval_id.is_none());
        let asked = &answer.verdicts[1];
        assert_eq!(outcome(asked), (Decision::Escalate, Reason::EscalateRule));
        // The only approval is the write-risk call's: bash asked no one.
        let approvals = g.approvals().await;
        assert_eq!(approvals.len(), 1, "{approvals:?}");
        assert_eq!(Some(&approvals[0].id), asked.approval_id.as_ref());
        assert_eq!(approvals[0].tool, "deploy");
    });
}

/// An empty batch, or one naming another tenant, is refused before any
/// call is decided: nothing is recorded.
#[tokio::test]
async fn a_malformed_batch_records_nothing() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        for (tenant, calls) in [
            (None, vec![]),
            (
                Some(unique("other")),
                vec![batch_call("bash", json!({"command": "ls"}))],
            ),
        ] {
            let req = BatchRequest {
                run_id: run_id(&run),
                tenant,
                calls,
            };
            let err = g.gate.authorize_batch(req).await.unwrap_err();
            assert_eq!(err.code(), "invalid_request");
        }
        assert!(g.log().await.is_empty());
    });
}
