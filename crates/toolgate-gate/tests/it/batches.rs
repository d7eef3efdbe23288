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
