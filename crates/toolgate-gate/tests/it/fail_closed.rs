//! The gate fails closed when the database is gone: a decision that cannot
//! be recorded, charged, asked about or read against the run's labels is
//! a denial (`audit_unavailable`), never an allow.

use serde_json::json;
use toolgate_gate::RefusalRequest;
use toolgate_policy::{Decision, Id, Reason};

use crate::common::*;

/// With the database closed, every call that needs it is denied
/// `audit_unavailable`: a high-risk allow (appended before the answer), an
/// escalation (no approval can be asked for), and under budgets any allow.
#[tokio::test]
async fn a_lost_database_denies_what_needs_it() {
    let budgets = with_budgets("{maxCallsPerRun: 100}");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let b = TestGate::start(url, Bundle::Live(&budgets)).await;
        let run = unique("run");
        g.store.close().await;
        b.store.close().await;
        let v = g.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::AuditUnavailable));
        assert!(!v.verdict.intent_required);
        let v = g.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::AuditUnavailable));
        assert!(v.approval_id.is_none());
        let v = b.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::AuditUnavailable));
        // An edge refusal that cannot be recorded says so (it stands anyway).
        let refusal = RefusalRequest {
            tool: Id::parse("fs.delete").unwrap(),
            arguments: None,
            run_id: run_id(&run),
            step_id: None,
            reason: Reason::ToolNotListed,
            check: Id::parse("mcp:tool_not_listed").unwrap(),
            definition_digest: None,
        };
        let err = g.gate.refuse(&refusal).await.unwrap_err();
        assert_eq!(err.code(), "store_unavailable");
        assert!(!g.gate.database_reachable().await);
    });
}

/// Under a profile with flows, a call a flow rule could select is denied
/// `audit_unavailable` when the run's labels cannot be read.
#[tokio::test]
async fn unreadable_labels_deny_the_call() {
    let flows = "mode: rules\nrules:\n  send: {allow: [\"*\"]}\neffects:\n  \
                 send: {sideEffect: NETWORK_WRITE, risk: low}\negress: {allowHosts: [\"*\"]}\n\
                 flows:\n  labels:\n    seen: {tools: [send]}\n  rules:\n    - when: [seen]\n      \
                 deny: {tools: [send]}\n";
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(flows)).await;
        let run = unique("run");
        let v = g
            .authorize("send", json!({"url": "https://a.example/"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let run = unique("run");
        g.store.close().await;
        let v = g
            .authorize("send", json!({"url": "https://a.example/"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::AuditUnavailable));
        assert!(v.flow_labels_set.is_empty());
    });
}
