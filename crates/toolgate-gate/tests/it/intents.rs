//! Intents at the gate: an allowed high-risk decision takes exactly one
//! intent, for exactly the call it allowed.

use serde_json::json;
use toolgate_gate::{BeginIntentRequest, CompleteRequest};
use toolgate_policy::{Decision, Id, Reason};
use toolgate_store::IntentOutcome;

use crate::common::*;

/// The intent of `answer`'s decision for the call it allowed.
fn intent_for(
    answer: &toolgate_gate::AuthorizeResponse,
    run: &str,
    tool: &str,
) -> BeginIntentRequest {
    BeginIntentRequest {
        decision_id: Id::parse(answer.decision_id.clone()).unwrap(),
        run_id: run_id(run),
        step_id: Id::parse("s1").unwrap(),
        tool: Id::parse(tool).unwrap(),
        args_digest: Id::parse(answer.verdict.args_digest.clone()).unwrap(),
        call_digest: Some(Id::parse(answer.verdict.call_digest.clone()).unwrap()),
        verification_probe: Some(json!({"kind": "exit_code"})),
    }
}

/// An allowed high-risk call needs an intent; the first `begin_intent`
/// records it (pending, bound to the call digest) and a second for the
/// same decision is `intent_exists`.
#[tokio::test]
async fn an_intent_begins_once_per_decision() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let v = g.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        assert!(v.verdict.intent_required);
        let intent = g
            .gate
            .begin_intent(intent_for(&v, &run, "bash"))
            .await
            .unwrap();
        assert_eq!(intent.decision_id, v.decision_id);
        assert_eq!(
            intent.call_digest.as_deref(),
            Some(v.verdict.call_digest.as_str())
        );
        let open = g.gate.pending_intents(&run_id(&run)).await.unwrap();
        assert_eq!(open.len(), 1);
        let err = g
            .gate
            .begin_intent(intent_for(&v, &run, "bash"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "intent_exists");

        // Watermarked and closed on the same row.
        g.gate.effect_sent(&intent.id).await.unwrap();
        let done = CompleteRequest {
            outcome: IntentOutcome::Completed,
            detail: None,
        };
        let closed = g.gate.complete_intent(&intent.id, done).await.unwrap();
        assert_eq!(closed.id, intent.id);
        assert!(
            g.gate
                .pending_intents(&run_id(&run))
                .await
                .unwrap()
                .is_empty()
        );
    });
}

/// An intent for a call other than the one its decision allowed (other
/// arguments, another call digest, tool or run) is
/// `intent_digest_mismatch`, and does not use up the decision.
#[tokio::test]
async fn an_intent_for_another_call_is_refused() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let v = g.authorize("bash", json!({"command": "ls"}), &run).await;
        let other = g
            .authorize("bash", json!({"command": "ls -la"}), &run)
            .await;
        let mut wrong = Vec::new();
        let mut args = intent_for(&v, &run, "bash");
        args.args_digest = Id::parse(other.verdict.args_digest.clone()).unwrap();
        wrong.push(args);
        let mut digest = intent_for(&v, &run, "bash");
        digest.call_digest = Some(Id::parse(other.verdict.call_digest.clone()).unwrap());
        wrong.push(digest);
        wrong.push(intent_for(&v, &run, "reader"));
        wrong.push(intent_for(&v, &unique("run"), "bash"));
        for req in wrong {
            let err = g.gate.begin_intent(req).await.unwrap_err();
            assert_eq!(err.code(), "intent_digest_mismatch");
        }
        assert!(
            g.gate
                .pending_intents(&run_id(&run))
                .await
                .unwrap()
                .is_empty()
        );
        g.gate
            .begin_intent(intent_for(&v, &run, "bash"))
            .await
            .unwrap();
    });
}

/// Only an allowed call that needs one takes an intent: a low-risk allow,
/// a denial, an escalation, an unknown decision and another sidecar's
/// decision are each `decision_not_allowed`.
#[tokio::test]
async fn only_allowed_high_risk_decisions_take_intents() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let peer = g.peer(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let low = g.authorize("reader", json!({"path": "a"}), &run).await;
        assert!(!low.verdict.intent_required);
        let denied = g.authorize("bash", json!({"command": "rm x"}), &run).await;
        let escalated = g
            .authorize("bash", json!({"command": "git push"}), &run)
            .await;
        let elsewhere = peer.authorize("bash", json!({"command": "ls"}), &run).await;
        let mut unknown = intent_for(&low, &run, "reader");
        unknown.decision_id = Id::parse(uuid::Uuid::now_v7().to_string()).unwrap();
        for req in [
            intent_for(&low, &run, "reader"),
            intent_for(&denied, &run, "bash"),
            intent_for(&escalated, &run, "bash"),
            intent_for(&elsewhere, &run, "bash"),
            unknown,
        ] {
            let err = g.gate.begin_intent(req).await.unwrap_err();
            assert_eq!(err.code(), "decision_not_allowed");
        }
        // The decision's own sidecar takes it.
        peer.gate
            .begin_intent(intent_for(&elsewhere, &run, "bash"))
            .await
            .unwrap();
    });
}

/// A high-risk call a human approved is an allowed high-risk call: it
/// needs its intent, and takes exactly one.
#[tokio::test]
async fn an_approved_high_risk_call_takes_its_intent() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let push = json!({"command": "git push"});
        let asked = g.authorize("bash", push.clone(), &run).await;
        assert!(
            !asked.verdict.intent_required,
            "an escalation needs no intent yet"
        );
        let id = asked.approval_id.unwrap();
        g.resolve(&id, toolgate_store::ApprovalDecision::Approved)
            .await;
        let v = g.authorize("bash", push, &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::Approved));
        assert!(v.verdict.intent_required);
        g.gate
            .begin_intent(intent_for(&v, &run, "bash"))
            .await
            .unwrap();
        let err = g
            .gate
            .begin_intent(intent_for(&v, &run, "bash"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), "intent_exists");
    });
}

/// Two intents begun at once for one decision: exactly one is recorded,
/// the other is `intent_exists` (the store's unique index decides).
#[tokio::test]
async fn concurrent_intents_for_one_decision_record_one() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let v = g.authorize("bash", json!({"command": "ls"}), &run).await;
        let (a, b) = tokio::join!(
            g.gate.begin_intent(intent_for(&v, &run, "bash")),
            g.gate.begin_intent(intent_for(&v, &run, "bash")),
        );
        let codes: Vec<_> = [&a, &b]
            .iter()
            .map(|r| r.as_ref().map_or_else(|e| e.code(), |_| "ok"))
            .collect();
        assert!(
            codes.contains(&"ok") && codes.contains(&"intent_exists"),
            "{codes:?}"
        );
        assert_eq!(
            g.gate.pending_intents(&run_id(&run)).await.unwrap().len(),
            1
        );
    });
}
