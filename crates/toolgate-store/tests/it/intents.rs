//! Intents on both engines: their lifecycle, and the pending
//! classification a restarted sidecar resumes from.

use crate::common::builders::new_intent;
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_store::{IntentOutcome, IntentStatus, ResumeClass};

both_backends!(intent_lifecycle, |db| {
    let intents = db.store.intents();
    let run = unique("run");
    let begun = intents
        .begin(new_intent(&run, "s1"), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(begun.status, IntentStatus::Pending);
    assert!(uuid::Uuid::parse_str(&begun.id).is_ok());
    // Committed before begin returned: visible through a different handle.
    let fetched = intents.get("acme", &begun.id).await.unwrap();
    assert_eq!(fetched, begun);
    assert_eq!(
        fetched.verification_probe,
        Some(serde_json::json!({"kind": "imap_sent", "message_id": "m1"}))
    );

    let t0 = Timestamp::now();
    let sent = intents
        .mark_effect_sent("acme", &begun.id, t0)
        .await
        .unwrap();
    let first_mark = sent.effect_sent_at.expect("watermark set");
    let later = t0 + SignedDuration::from_millis(5);
    let again = intents
        .mark_effect_sent("acme", &begun.id, later)
        .await
        .unwrap();
    assert_eq!(
        again.effect_sent_at,
        Some(first_mark),
        "first watermark wins"
    );

    let done = intents
        .complete(
            "acme",
            &begun.id,
            IntentOutcome::Completed,
            Some("sent".into()),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, IntentStatus::Completed);
    assert_eq!(done.detail.as_deref(), Some("sent"));
    assert!(done.completed_at.is_some());

    // Same outcome again: idempotent, row unchanged.
    let repeat = intents
        .complete(
            "acme",
            &begun.id,
            IntentOutcome::Completed,
            Some("other".into()),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(repeat, done);
    // Different outcome: conflict, row unchanged.
    let err = intents
        .complete(
            "acme",
            &begun.id,
            IntentOutcome::Error,
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    // Watermark after completion is refused.
    let err = intents
        .mark_effect_sent("acme", &begun.id, Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict");
    assert_eq!(intents.get("acme", &begun.id).await.unwrap(), done);

    let err = intents.get("acme", "no-such-intent").await.unwrap_err();
    assert_eq!(err.code(), "not_found");
    let err = intents
        .complete(
            "acme",
            "no-such-intent",
            IntentOutcome::Completed,
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
    assert!(intents.pending("acme", &run).await.unwrap().is_empty());
});

both_backends!(intent_pending_classification_survives_restart, |db| {
    let run = unique("run");
    let (fresh, sent, closed) = {
        let intents = db.store.intents();
        let fresh = intents
            .begin(new_intent(&run, "s1"), Timestamp::now())
            .await
            .unwrap();
        let sent = intents
            .begin(new_intent(&run, "s2"), Timestamp::now())
            .await
            .unwrap();
        intents
            .mark_effect_sent("acme", &sent.id, Timestamp::now())
            .await
            .unwrap();
        let closed = intents
            .begin(new_intent(&run, "s3"), Timestamp::now())
            .await
            .unwrap();
        intents
            .complete(
                "acme",
                &closed.id,
                IntentOutcome::NotCompleted,
                None,
                Timestamp::now(),
            )
            .await
            .unwrap();
        // Another run's intent must not appear.
        intents
            .begin(new_intent(&unique("run"), "x"), Timestamp::now())
            .await
            .unwrap();
        (fresh, sent, closed)
    };

    db.reconnect().await;

    let pending = db.store.intents().pending("acme", &run).await.unwrap();
    let summary: Vec<(String, ResumeClass)> = pending
        .iter()
        .map(|p| (p.intent.id.clone(), p.class))
        .collect();
    assert_eq!(
        summary,
        vec![
            (fresh.id.clone(), ResumeClass::SafeToRetry),
            (sent.id.clone(), ResumeClass::Uncertain),
        ]
    );
    assert!(!pending.iter().any(|p| p.intent.id == closed.id));
});
