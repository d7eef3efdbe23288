//! Atomicity on both engines: an approval request or a profile load that
//! fails midway (an injected INSERT failure) leaves nothing behind.

use std::time::Duration;

use crate::common::builders::{new_approval, profile_load};
use crate::common::faults::{fail_inserts, stop_failing};
use crate::common::unique;
use jiff::Timestamp;
use toolgate_store::{ApprovalDecision, ApprovalStatus};

both_backends!(approval_request_failure_leaves_nothing, |db| {
    fail_inserts(&db, "run_events", None).await;
    let inv = unique("inv");
    let err = db
        .store
        .approvals()
        .request(
            new_approval("acme", &inv, Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "database_error", "{err}");
    assert!(
        db.store
            .approvals()
            .list_all(None, Timestamp::now())
            .await
            .unwrap()
            .is_empty(),
        "no orphan approval"
    );
    stop_failing(&db, "run_events").await;

    // The retry is a fresh request and gets both rows.
    let a = db
        .store
        .approvals()
        .request(
            new_approval("acme", &inv, Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let events = db
        .store
        .approvals()
        .run_events("acme", "run-1")
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].subject_id, a.id);

    // A failing resolution event rolls the resolution back too.
    fail_inserts(&db, "run_events", None).await;
    db.store
        .approvals()
        .resolve(
            "acme",
            &a.id,
            ApprovalDecision::Approved,
            "alice",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    stop_failing(&db, "run_events").await;
    assert_eq!(
        db.store
            .approvals()
            .get("acme", &a.id, Timestamp::now())
            .await
            .unwrap()
            .status,
        ApprovalStatus::Pending
    );
});

both_backends!(profile_load_failure_leaves_nothing, |db| {
    fail_inserts(&db, "process_events", None).await;
    let err = db
        .store
        .profiles()
        .record_profile_load(
            profile_load("default@aaaaaaaaaaaa+hbbbbbbbb", "pod-1"),
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "database_error");
    stop_failing(&db, "process_events").await;
    assert!(
        db.store
            .profiles()
            .list_profile_versions(None)
            .await
            .unwrap()
            .is_empty()
    );
});
