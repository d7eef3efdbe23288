//! Bad input to every part of the store is refused with a typed error, on
//! both engines, and leaves nothing behind.

use std::time::Duration;

use crate::common::builders::{S, new_approval, new_intent, profile_load, record};
use jiff::Timestamp;
use toolgate_store::{ApprovalDecision, IntentOutcome};

both_backends!(bad_input_is_typed, |db| {
    assert_eq!(
        "finished".parse::<IntentOutcome>().unwrap_err().code(),
        "invalid_input"
    );
    // One closed set of decisions: no legacy verbs, nothing else.
    for unknown in ["maybe", "approve", "deny", "Approved"] {
        assert_eq!(ApprovalDecision::from_wire(unknown), None, "{unknown}");
    }

    let mut intent = new_intent("run", "s");
    intent.tenant = String::new();
    assert_eq!(
        db.store
            .intents()
            .begin(intent, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    let mut intent = new_intent("run", "s");
    intent.run_id = "  ".into();
    assert_eq!(
        db.store
            .intents()
            .begin(intent, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    let mut intent = new_intent("run", "s");
    intent.tool = "x\0y".into();
    assert_eq!(
        db.store
            .intents()
            .begin(intent, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    assert_eq!(
        db.store.intents().get("acme", "").await.unwrap_err().code(),
        "invalid_input"
    );

    let a = db.store.approvals();
    assert_eq!(
        a.request(
            new_approval("", "inv", Duration::from_secs(1)),
            Timestamp::now()
        )
        .await
        .unwrap_err()
        .code(),
        "invalid_input"
    );
    assert_eq!(
        a.request(
            new_approval("acme", "inv", Duration::ZERO),
            Timestamp::now()
        )
        .await
        .unwrap_err()
        .code(),
        "invalid_input"
    );
    assert_eq!(
        a.request(
            new_approval("acme", "inv", Duration::from_secs(u64::MAX)),
            Timestamp::now()
        )
        .await
        .unwrap_err()
        .code(),
        "invalid_input"
    );
    assert_eq!(
        a.list("", None, Timestamp::now()).await.unwrap_err().code(),
        "invalid_input"
    );
    assert_eq!(
        a.resolve(
            "acme",
            "x",
            ApprovalDecision::Approved,
            "",
            None,
            Timestamp::now()
        )
        .await
        .unwrap_err()
        .code(),
        "invalid_input"
    );

    let d = db.store.decisions();
    assert_eq!(
        d.append("", S, record(1)).await.unwrap_err().code(),
        "invalid_input"
    );
    let mut r = record(1);
    r.verdict = String::new();
    assert_eq!(
        d.append("acme", S, r).await.unwrap_err().code(),
        "invalid_input"
    );
    assert_eq!(
        d.verify(Some("")).await.unwrap_err().code(),
        "invalid_input"
    );

    let mut p = profile_load("default@x", "pod");
    p.spec_sha256 = "abc".into();
    assert_eq!(
        db.store
            .profiles()
            .record_profile_load(p, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    let mut p = profile_load("default@x", "pod");
    p.hardline_sha256 = "B".repeat(64);
    assert_eq!(
        db.store
            .profiles()
            .record_profile_load(p, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );

    // Nothing was written by any of the refused calls.
    assert!(a.list_all(None, Timestamp::now()).await.unwrap().is_empty());
    assert!(d.verify(None).await.unwrap().is_empty());
});
