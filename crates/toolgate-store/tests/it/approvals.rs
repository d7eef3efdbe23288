//! Approvals on both engines: requesting (idempotent, evented, with action
//! and preview), tenant isolation, resolving and the expiry sweep.

use std::time::Duration;

use crate::common::builders::{call, new_approval};
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_store::{ApprovalDecision, ApprovalStatus, NewApproval};

both_backends!(approval_request_is_idempotent_and_evented, |db| {
    let approvals = db.store.approvals();
    let inv = unique("inv");
    let first = approvals
        .request(
            new_approval("acme", &inv, Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(first.status, ApprovalStatus::Pending);
    let second = approvals
        .request(
            new_approval("acme", &inv, Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(second.id, first.id);
    assert_eq!(
        approvals
            .list("acme", None, Timestamp::now())
            .await
            .unwrap()
            .len(),
        1
    );

    let events = approvals.run_events("acme", "run-1").await.unwrap();
    let requested: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "approval.requested")
        .collect();
    assert_eq!(requested.len(), 1, "one event despite two requests");
    assert_eq!(requested[0].subject_id, first.id);
    assert_eq!(requested[0].payload["invocation_id"], inv.as_str());

    // Same invocation, different arguments: refused, not silently merged.
    let mut other = new_approval("acme", &inv, Duration::from_secs(60));
    other.args_digest = "sha256:different".into();
    assert_eq!(
        approvals
            .request(other, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "conflict"
    );

    // Explicit ids are honoured.
    let mut explicit = new_approval("acme", &unique("inv"), Duration::from_secs(60));
    explicit.approval_id = Some("apr-explicit".into());
    assert_eq!(
        approvals
            .request(explicit, Timestamp::now())
            .await
            .unwrap()
            .id,
        "apr-explicit"
    );
});

both_backends!(approval_action_and_preview_round_trip, |db| {
    let approvals = db.store.approvals();
    let mut req = new_approval("acme", &unique("inv"), Duration::from_secs(60));
    req.action = Some("delete".into());
    // 512 characters, 1024 bytes: the limit counts characters.
    req.preview = Some("\u{e9}".repeat(512));
    let created = approvals
        .request(req.clone(), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(created.action.as_deref(), Some("delete"));
    assert_eq!(created.preview, req.preview);
    let got = approvals
        .get("acme", &created.id, Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        (got.action.clone(), got.preview.clone()),
        (req.action.clone(), req.preview.clone())
    );
    let listed = approvals
        .list("acme", None, Timestamp::now())
        .await
        .unwrap();
    assert_eq!(listed[0].preview, req.preview);
    let all = approvals
        .list_all(Some(ApprovalStatus::Pending), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(all[0].action.as_deref(), Some("delete"));
    let resolved = approvals
        .resolve(
            "acme",
            &created.id,
            ApprovalDecision::Approved,
            "alice",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(resolved.preview, req.preview);
    let waited = approvals
        .wait("acme", &created.id, Duration::from_millis(10))
        .await
        .unwrap();
    assert_eq!(waited.action.as_deref(), Some("delete"));
    // A repeat request returns the stored fields.
    assert_eq!(
        approvals
            .request(req, Timestamp::now())
            .await
            .unwrap()
            .preview,
        created.preview
    );
    // Both are optional (and default to None when absent from JSON).
    let plain = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!((plain.action, plain.preview), (None, None));
    let json = serde_json::to_value(new_approval("acme", "i", Duration::from_secs(1))).unwrap();
    let mut obj = json.as_object().unwrap().clone();
    obj.remove("action");
    obj.remove("preview");
    let parsed: NewApproval = serde_json::from_value(obj.into()).unwrap();
    assert_eq!((parsed.action, parsed.preview), (None, None));
    // Too long a preview is refused.
    let mut long = new_approval("acme", &unique("inv"), Duration::from_secs(60));
    long.preview = Some("x".repeat(513));
    assert_eq!(
        approvals
            .request(long, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    let mut bad = new_approval("acme", &unique("inv"), Duration::from_secs(60));
    bad.action = Some("bad\naction".into());
    assert_eq!(
        approvals
            .request(bad, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
});

both_backends!(approval_tenant_isolation, |db| {
    let approvals = db.store.approvals();
    let a = approvals
        .request(
            new_approval("tenant-a", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let b = approvals
        .request(
            new_approval("tenant-b", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    // Same invocation id in two tenants: two approvals.
    let shared = unique("inv");
    let a2 = approvals
        .request(
            new_approval("tenant-a", &shared, Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let b2 = approvals
        .request(
            new_approval("tenant-b", &shared, Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_ne!(a2.id, b2.id);

    assert_eq!(
        approvals
            .get("tenant-b", &a.id, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "not_found"
    );
    let err = approvals
        .resolve(
            "tenant-b",
            &a.id,
            ApprovalDecision::Approved,
            "mallory",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "not_found");
    assert_eq!(
        approvals
            .get("tenant-a", &a.id, Timestamp::now())
            .await
            .unwrap()
            .status,
        ApprovalStatus::Pending
    );
    let err = approvals
        .consume(
            "tenant-b",
            &a.id,
            &call("fs.delete", "sha256:args", &a.policy_version),
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "not_found");

    let ids = |v: Vec<toolgate_store::Approval>| v.into_iter().map(|x| x.id).collect::<Vec<_>>();
    assert_eq!(
        ids(approvals
            .list("tenant-a", None, Timestamp::now())
            .await
            .unwrap()),
        vec![a.id.clone(), a2.id.clone()]
    );
    assert_eq!(
        ids(approvals
            .list("tenant-b", None, Timestamp::now())
            .await
            .unwrap()),
        vec![b.id.clone(), b2.id.clone()]
    );
    assert_eq!(
        approvals
            .list_all(None, Timestamp::now())
            .await
            .unwrap()
            .len(),
        4
    );
    assert!(
        approvals
            .run_events("tenant-b", "run-1")
            .await
            .unwrap()
            .iter()
            .all(|e| e.tenant == "tenant-b")
    );
});

both_backends!(approval_resolve_semantics, |db| {
    let approvals = db.store.approvals();
    let a = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(60)),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let approved = approvals
        .resolve(
            "acme",
            &a.id,
            ApprovalDecision::Approved,
            "alice",
            Some("looks fine"),
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(approved.status, ApprovalStatus::Approved);
    assert_eq!(approved.resolved_by.as_deref(), Some("alice"));
    assert_eq!(approved.reason.as_deref(), Some("looks fine"));

    // Same decision again (even by someone else): no-op, first answer kept.
    let again = approvals
        .resolve(
            "acme",
            &a.id,
            ApprovalDecision::Approved,
            "bob",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(again, approved);
    // Opposite decision: conflict.
    let err = approvals
        .resolve(
            "acme",
            &a.id,
            ApprovalDecision::Denied,
            "bob",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict");
    assert_eq!(
        approvals
            .get("acme", &a.id, Timestamp::now())
            .await
            .unwrap(),
        approved
    );

    let resolved_events = approvals
        .run_events("acme", "run-1")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "approval.resolved")
        .count();
    assert_eq!(resolved_events, 1);

    // Expired without any sweeper: resolve says approval_expired.
    let t0 = Timestamp::now();
    let short = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_millis(30)),
            t0,
        )
        .await
        .unwrap();
    // 60 ms later: past the 30 ms time to live.
    let after = t0 + SignedDuration::from_millis(60);
    assert_eq!(
        approvals
            .get("acme", &short.id, after)
            .await
            .unwrap()
            .status,
        ApprovalStatus::Expired
    );
    let err = approvals
        .resolve(
            "acme",
            &short.id,
            ApprovalDecision::Approved,
            "alice",
            None,
            after,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "approval_expired");
    let err = approvals
        .resolve(
            "acme",
            &short.id,
            ApprovalDecision::Denied,
            "alice",
            None,
            after,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "approval_expired");
    let list = approvals
        .list("acme", Some(ApprovalStatus::Expired), after)
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, short.id);
    assert_eq!(
        approvals
            .list("acme", Some(ApprovalStatus::Pending), after)
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        approvals
            .list("acme", Some(ApprovalStatus::Approved), after)
            .await
            .unwrap()
            .len(),
        1
    );
});

both_backends!(approval_expire_sweep, |db| {
    let approvals = db.store.approvals();
    let t0 = Timestamp::now();
    let short1 = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_millis(20)),
            t0,
        )
        .await
        .unwrap();
    approvals
        .request(
            new_approval("other", &unique("inv"), Duration::from_millis(20)),
            t0,
        )
        .await
        .unwrap();
    let long = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_secs(3600)),
            t0,
        )
        .await
        .unwrap();
    let resolved = approvals
        .request(
            new_approval("acme", &unique("inv"), Duration::from_millis(20)),
            t0,
        )
        .await
        .unwrap();
    approvals
        .resolve(
            "acme",
            &resolved.id,
            ApprovalDecision::Denied,
            "alice",
            None,
            t0,
        )
        .await
        .unwrap();
    // 50 ms later: past the short ones' 20 ms time to live.
    let after = t0 + SignedDuration::from_millis(50);

    assert_eq!(approvals.expire(after).await.unwrap(), 2);
    assert_eq!(
        approvals.expire(after).await.unwrap(),
        0,
        "sweep is idempotent"
    );
    assert_eq!(
        approvals
            .get("acme", &short1.id, after)
            .await
            .unwrap()
            .status,
        ApprovalStatus::Expired
    );
    assert_eq!(
        approvals.get("acme", &long.id, after).await.unwrap().status,
        ApprovalStatus::Pending
    );
    assert_eq!(
        approvals
            .get("acme", &resolved.id, after)
            .await
            .unwrap()
            .status,
        ApprovalStatus::Denied
    );
    let expired_events = approvals
        .run_events("acme", "run-1")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "approval.expired")
        .count();
    assert_eq!(expired_events, 1);
    // A sweep with a future "now" expires the long one too.
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(2);
    assert_eq!(approvals.expire(later).await.unwrap(), 1);
});
