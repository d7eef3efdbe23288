//! Approval notifications' bookkeeping on both engines: every approval
//! change is an event to tell people about, and deliveries are remembered
//! per (channel, event) — accepted ones for good, failed ones with when to
//! try again.

use std::time::Duration;

use crate::common::builders::new_approval;
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_store::ApprovalDecision;

both_backends!(every_approval_change_is_an_event_to_notify, |db| {
    let (approvals, notifications) = (db.store.approvals(), db.store.notifications());
    let tenant = unique("notify");
    let since = Timestamp::now() - SignedDuration::from_secs(5);
    let a = approvals
        .request(
            new_approval(&tenant, &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    approvals
        .resolve(
            &tenant,
            &a.id,
            ApprovalDecision::Approved,
            "alice",
            Some("ok"),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let until = Timestamp::now() + SignedDuration::from_secs(60);
    let ours: Vec<_> = notifications
        .events(since, until, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.tenant == tenant)
        .collect();
    let kinds: Vec<&str> = ours.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["approval.requested", "approval.resolved"]);
    assert!(ours.iter().all(|e| e.approval_id == a.id));
    assert!(ours[1].payload.contains("alice"), "{}", ours[1].payload);
    // Paging by the last id seen, and the window's start, both hold.
    let after = notifications
        .events(since, until, ours[0].id, 1000)
        .await
        .unwrap();
    assert!(after.iter().all(|e| e.id > ours[0].id));
    let later = notifications
        .events(until, until + SignedDuration::from_secs(60), 0, 1000)
        .await
        .unwrap();
    assert!(later.is_empty(), "nothing is newer than the future");
    // A row far outside any window (a tenant role writes its own events)
    // is not read: the page holds only what can be sent.
    let insert = "INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at) \
        VALUES ($1, 'run-1', 'approval.requested', 'forged', '{}', $2)";
    for at in [i64::MAX, -1] {
        match db.pg() {
            Some(pg) => sqlx::query(insert)
                .bind(&tenant)
                .bind(at)
                .execute(pg)
                .await
                .map(|_| ()),
            None => sqlx::query(insert)
                .bind(&tenant)
                .bind(at)
                .execute(db.store.as_sqlite().unwrap())
                .await
                .map(|_| ()),
        }
        .unwrap();
    }
    let read = notifications.events(since, until, 0, 1000).await.unwrap();
    assert!(
        read.iter().all(|e| e.approval_id != "forged"),
        "out-of-range rows stay unread"
    );
});

both_backends!(deliveries_are_remembered_per_channel_and_event, |db| {
    let (approvals, notifications) = (db.store.approvals(), db.store.notifications());
    let tenant = unique("notify");
    let since = Timestamp::now() - SignedDuration::from_secs(5);
    approvals
        .request(
            new_approval(&tenant, &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let event = notifications
        .events(
            since,
            Timestamp::now() + SignedDuration::from_secs(60),
            0,
            1000,
        )
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.tenant == tenant)
        .unwrap();
    let (slack, oncall) = (
        format!("{tenant}/p/slack:url"),
        format!("{tenant}/p/standard:url"),
    );
    let now = Timestamp::now();
    let retry_at = now + SignedDuration::from_secs(4);
    notifications
        .failed(&slack, event.id, "HTTP 500", retry_at)
        .await
        .unwrap();
    notifications
        .failed(&slack, event.id, "HTTP 503", retry_at)
        .await
        .unwrap();
    notifications
        .delivered(&oncall, event.id, now)
        .await
        .unwrap();
    let done = notifications.deliveries(event.id, event.id).await.unwrap();
    let s = &done[&(slack.clone(), event.id)];
    assert_eq!(
        (s.attempts, s.delivered_at, s.last_error.as_deref()),
        (2, None, Some("HTTP 503"))
    );
    assert_eq!(
        s.next_attempt_at.as_millisecond(),
        retry_at.as_millisecond()
    );
    assert!(done[&(oncall.clone(), event.id)].delivered_at.is_some());
    // Accepted is final: a late failure report does not reopen it.
    notifications
        .failed(&oncall, event.id, "HTTP 500", retry_at)
        .await
        .unwrap();
    let done = notifications.deliveries(event.id, event.id).await.unwrap();
    assert!(done[&(oncall, event.id)].delivered_at.is_some());
    notifications
        .delivered(&slack, event.id, now)
        .await
        .unwrap();
    let done = notifications.deliveries(event.id, event.id).await.unwrap();
    assert_eq!(done[&(slack.clone(), event.id)].attempts, 3);
    assert!(done[&(slack, event.id)].last_error.is_none());
    // Bad input is refused, not stored.
    assert_eq!(
        notifications
            .delivered("", event.id, now)
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    let long = "c".repeat(601);
    assert!(notifications.delivered(&long, event.id, now).await.is_err());
});
