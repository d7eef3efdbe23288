//! Using an approval on both engines: it is consumed once, for the call it
//! approved, also when resolving and consuming race; waiting for a decision
//! wakes on it and times out without one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::builders::{call, new_approval};
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_store::{ApprovalDecision, ApprovalStatus, ApprovedCall};

both_backends!(approval_consume_once, |db| {
    let approvals = db.store.approvals();
    let a = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let pv = a.policy_version.clone();
    // Not yet approved.
    assert!(
        !approvals
            .consume(
                "acme",
                &a.id,
                &call("fs.delete", "sha256:args", &pv),
                Timestamp::now()
            )
            .await
            .unwrap()
    );
    approvals
        .resolve(
            "acme",
            &a.id,
            ApprovalDecision::Approved,
            "alice",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
    // Mismatches never consume.
    assert!(
        !approvals
            .consume(
                "acme",
                &a.id,
                &call("fs.write", "sha256:args", &pv),
                Timestamp::now()
            )
            .await
            .unwrap()
    );
    assert!(
        !approvals
            .consume(
                "acme",
                &a.id,
                &call("fs.delete", "sha256:other", &pv),
                Timestamp::now()
            )
            .await
            .unwrap()
    );
    assert!(
        !approvals
            .consume(
                "acme",
                &a.id,
                &call("fs.delete", "sha256:args", "v2"),
                Timestamp::now()
            )
            .await
            .unwrap()
    );
    // Same tool and arguments, another action: another call.
    let other_action = ApprovedCall {
        call_digest: "sha256:call-with-another-action",
        ..call("fs.delete", "sha256:args", &pv)
    };
    assert!(
        !approvals
            .consume("acme", &a.id, &other_action, Timestamp::now())
            .await
            .unwrap()
    );
    assert!(
        approvals
            .consume(
                "acme",
                &a.id,
                &call("fs.delete", "sha256:args", &pv),
                Timestamp::now()
            )
            .await
            .unwrap()
    );
    assert!(
        !approvals
            .consume(
                "acme",
                &a.id,
                &call("fs.delete", "sha256:args", &pv),
                Timestamp::now()
            )
            .await
            .unwrap()
    );
    assert!(
        approvals
            .get("acme", &a.id, Timestamp::now())
            .await
            .unwrap()
            .consumed_at
            .is_some()
    );

    // Denied approvals never consume.
    let d = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    approvals
        .resolve(
            "acme",
            &d.id,
            ApprovalDecision::Denied,
            "alice",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert!(
        !approvals
            .consume(
                "acme",
                &d.id,
                &call("fs.delete", "sha256:args", &pv),
                Timestamp::now()
            )
            .await
            .unwrap()
    );

    // Approved but expired before use: not consumable.
    let t0 = Timestamp::now();
    let e = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_millis(150)),
            t0,
        )
        .await
        .unwrap();
    approvals
        .resolve("acme", &e.id, ApprovalDecision::Approved, "alice", None, t0)
        .await
        .unwrap();
    // Used 200 ms later, past its 150 ms time to live.
    assert!(
        !approvals
            .consume(
                "acme",
                &e.id,
                &call("fs.delete", "sha256:args", &pv),
                t0 + SignedDuration::from_millis(200)
            )
            .await
            .unwrap()
    );
});

both_backends!(approval_concurrent_resolve_and_consume, |db| {
    let a = db
        .store
        .approvals()
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let store = Arc::new(db.store.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32 {
        let store = store.clone();
        let id = a.id.clone();
        let pv = a.policy_version.clone();
        tasks.spawn(async move {
            let approvals = store.approvals();
            let resolved = approvals
                .resolve(
                    "acme",
                    &id,
                    ApprovalDecision::Approved,
                    &format!("approver-{i}"),
                    None,
                    Timestamp::now(),
                )
                .await;
            assert!(resolved.is_ok(), "resolve {i}: {resolved:?}");
            approvals
                .consume(
                    "acme",
                    &id,
                    &call("fs.delete", "sha256:args", &pv),
                    Timestamp::now(),
                )
                .await
                .unwrap()
        });
    }
    let mut wins = 0;
    while let Some(r) = tasks.join_next().await {
        if r.unwrap() {
            wins += 1;
        }
    }
    assert_eq!(wins, 1, "exactly one consume succeeds");
    let events = db
        .store
        .approvals()
        .run_events("acme", "run-1")
        .await
        .unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == "approval.resolved")
            .count(),
        1
    );
});

both_backends!(approval_wait_wakes_and_times_out, |db| {
    let a = db
        .store
        .approvals()
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    // Times out at the deadline while pending.
    let started = Instant::now();
    let still = db
        .store
        .approvals()
        .wait("acme", &a.id, Duration::from_millis(300))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(still.status, ApprovalStatus::Pending);
    assert!(
        waited >= Duration::from_millis(300),
        "returned early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "overslept: {waited:?}");

    // Wakes on resolution from another task, well before the deadline.
    let store = db.store.clone();
    let id = a.id.clone();
    let resolver = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        store
            .approvals()
            .resolve(
                "acme",
                &id,
                ApprovalDecision::Denied,
                "alice",
                Some("no"),
                Timestamp::now(),
            )
            .await
            .unwrap();
    });
    let started = Instant::now();
    let done = db
        .store
        .approvals()
        .wait("acme", &a.id, Duration::from_secs(20))
        .await
        .unwrap();
    let waited = started.elapsed();
    resolver.await.unwrap();
    assert_eq!(done.status, ApprovalStatus::Denied);
    assert!(
        waited >= Duration::from_millis(150),
        "woke too early: {waited:?}"
    );
    // Well under the 1s PostgreSQL safety-net recheck: the notification woke it.
    assert!(
        waited < Duration::from_millis(900),
        "did not wake promptly: {waited:?}"
    );

    // Expiry also ends the wait, without a sweeper.
    let short = db
        .store
        .approvals()
        .request(
            new_approval("acme", &unique("inv"), Duration::from_millis(200)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let expired = db
        .store
        .approvals()
        .wait("acme", &short.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(expired.status, ApprovalStatus::Expired);
    assert!(started.elapsed() < Duration::from_secs(3));
});
