//! What the database decides when sidecars race: an approval is used by
//! one call, and a budget of N admits N calls however many ask at once.

use std::sync::Arc;

use serde_json::{Value, json};
use toolgate_gate::{AuthorizeResponse, Gate};
use toolgate_policy::{Decision, Reason};
use toolgate_store::ApprovalDecision;

use crate::common::*;

/// Decides `tool(arguments)` in `run` on each of `gates`, all at once.
async fn at_once(
    gates: &[Arc<Gate>],
    tool: &str,
    arguments: Value,
    run: &str,
) -> Vec<AuthorizeResponse> {
    let mut set = tokio::task::JoinSet::new();
    for gate in gates {
        let (gate, req) = (gate.clone(), call(tool, arguments.clone(), run));
        set.spawn(async move { gate.authorize(&req).await.unwrap() });
    }
    set.join_all().await
}

/// An approved call asked for by several sidecars at once passes on
/// exactly one of them; the others ask again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approval_is_used_by_one_racing_call() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let mut gates = vec![g.gate.clone()];
        let mut peers = Vec::new();
        for pod in ["pod-b", "pod-c", "pod-d"] {
            let peer = TestGate::start_as(url, Bundle::Live(SPEC), &g.tenant, pod).await;
            gates.push(peer.gate.clone());
            peers.push(peer);
        }
        let run = unique("run");
        let id = g
            .authorize("deploy", json!({"env": "prod"}), &run)
            .await
            .approval_id
            .unwrap();
        g.resolve(&id, ApprovalDecision::Approved).await;
        let answers = at_once(&gates, "deploy", json!({"env": "prod"}), &run).await;
        let passed: Vec<_> = answers
            .iter()
            .filter(|a| a.verdict.reason == Reason::Approved)
            .collect();
        assert_eq!(passed.len(), 1, "{answers:?}");
        for a in answers
            .iter()
            .filter(|a| a.verdict.reason != Reason::Approved)
        {
            assert_eq!(outcome(a), (Decision::Escalate, Reason::EscalateRule));
        }
    });
}

/// A run's call budget admits exactly its limit when sidecars charge it
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_admits_its_limit_under_a_race() {
    let spec = with_budgets("{maxCallsPerRun: 5}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let peer = g.peer(url, Bundle::Live(&spec)).await;
        let gates: Vec<_> = (0..6)
            .flat_map(|_| [g.gate.clone(), peer.gate.clone()])
            .collect();
        let run = unique("run");
        let answers = at_once(&gates, "reader", json!({"path": "a"}), &run).await;
        let allowed = answers
            .iter()
            .filter(|a| a.verdict.verdict == Decision::Allow)
            .count();
        assert_eq!(allowed, 5, "{answers:?}");
        for a in answers
            .iter()
            .filter(|a| a.verdict.verdict != Decision::Allow)
        {
            assert_eq!(outcome(a), (Decision::Deny, Reason::BudgetExhausted));
        }
        let status = g.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.budgets.calls.used, 5);
    });
}
