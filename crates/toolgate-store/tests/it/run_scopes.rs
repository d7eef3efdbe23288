//! Stops an agent cannot step around by choosing a new run id: scoped
//! cancellations (pod, profile, namespace) and per-pod budgets, on SQLite
//! and PostgreSQL; and what a tenant's own role can do to them.

use std::sync::Arc;

use crate::common::rid;
use crate::common::tenants::*;
use jiff::Timestamp;
use toolgate_policy::Scope;
use toolgate_store::{Admission, Budget, Caller, PodLimits, RunLimits, Store};

fn fresh_run() -> toolgate_policy::RunId {
    rid(&format!("run-{}", uuid::Uuid::now_v7().simple()))
}

const POD_A: Caller<'static> = Caller {
    tenant: "acme",
    pod: Some("agent-a"),
    profile: Some("coding"),
};
const POD_B: Caller<'static> = Caller {
    tenant: "acme",
    pod: Some("agent-b"),
    profile: Some("review"),
};

fn per_pod(max_calls: Option<u64>, max_high: Option<u64>) -> RunLimits {
    RunLimits {
        per_pod: PodLimits {
            max_calls,
            max_high_risk_calls: max_high,
        },
        ..RunLimits::default()
    }
}

async fn admitted(store: &Store, caller: Caller<'_>, limits: &RunLimits) -> Admission {
    store
        .runs()
        .admit(caller, &fresh_run(), false, limits, Timestamp::now())
        .await
        .unwrap()
}

fn is_cancelled(a: &Admission) -> bool {
    matches!(a, Admission::Cancelled { .. })
}

both_backends!(
    a_cancelled_pod_refuses_every_run_id_of_that_pod_only,
    |db| {
        let runs = db.store.runs();
        let none = RunLimits::default();
        let pod = Scope::parse("pod", Some("agent-a")).unwrap();
        let first = runs
            .cancel_scope("acme", &pod, Some("loop"), "alice", Timestamp::now())
            .await
            .unwrap();
        assert!(first.newly_cancelled);
        // A new run id, as an agent would pick to step around a run stop.
        for _ in 0..3 {
            assert!(is_cancelled(&admitted(&db.store, POD_A, &none).await));
        }
        // The same checks the sidecar makes without charging.
        let run = fresh_run();
        assert!(runs.cancelled_at(POD_A, &run).await.unwrap().is_some());
        assert!(is_cancelled(
            &runs
                .would_refuse(POD_A, &run, true, &none, Timestamp::now())
                .await
                .unwrap()
                .expect("refused")
        ));
        // Another pod, and the same pod name in another tenant, are untouched.
        assert!(admitted(&db.store, POD_B, &none).await.is_admitted());
        let elsewhere = Caller {
            tenant: "other",
            ..POD_A
        };
        assert!(admitted(&db.store, elsewhere, &none).await.is_admitted());
        assert!(runs.cancelled_at(POD_B, &run).await.unwrap().is_none());
        // Idempotent: the first request's time stands.
        let again = runs
            .cancel_scope("acme", &pod, None, "bob", Timestamp::now())
            .await
            .unwrap();
        assert!(!again.newly_cancelled);
        assert_eq!(again.requested_at, first.requested_at);
        let listed = runs.scope_cancellations("acme").await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].scope, pod);
        assert_eq!(listed[0].reason.as_deref(), Some("loop"));
        assert_eq!(listed[0].cancelled_by, "alice");
    }
);

both_backends!(
    profile_and_namespace_scopes_hold_every_pod_under_them,
    |db| {
        let runs = db.store.runs();
        let none = RunLimits::default();
        let profile = Scope::parse("profile", Some("coding")).unwrap();
        runs.cancel_scope("acme", &profile, None, "alice", Timestamp::now())
            .await
            .unwrap();
        assert!(is_cancelled(&admitted(&db.store, POD_A, &none).await));
        assert!(admitted(&db.store, POD_B, &none).await.is_admitted());
        // A caller without pod or profile is held by the namespace scope only.
        assert!(
            admitted(&db.store, Caller::from("acme"), &none)
                .await
                .is_admitted()
        );
        runs.cancel_scope(
            "acme",
            &Scope::Namespace,
            Some("incident"),
            "alice",
            Timestamp::now(),
        )
        .await
        .unwrap();
        for caller in [POD_A, POD_B, Caller::from("acme")] {
            assert!(is_cancelled(&admitted(&db.store, caller, &none).await));
        }
        // A charge recorded with its decision is refused the same way.
        let (admission, _) = runs
            .admit_and_record(
                POD_B,
                S,
                &fresh_run(),
                true,
                &none,
                Timestamp::now(),
                None,
                |_, _| record(1),
            )
            .await
            .unwrap();
        assert!(is_cancelled(&admission));
        assert!(
            admitted(&db.store, Caller::from("other"), &none)
                .await
                .is_admitted()
        );
    }
);

both_backends!(pod_and_namespace_stops_reap_their_pending_approvals, |db| {
    let a = db.store.approvals();
    let now = Timestamp::now();
    // Asked by the pod's sidecar, named by its namespace (not the tenant).
    let mut mine = approval("acme", "inv-1");
    mine.requested_by = "sidecar:agents/pod-1".into();
    let mine = a.request(mine, now).await.unwrap();
    let mut other = approval("acme", "inv-2");
    other.requested_by = "sidecar:acme/pod-2".into();
    let other = a.request(other, now).await.unwrap();
    let pod = Scope::parse("pod", Some("pod-1")).unwrap();
    let runs = db.store.runs();
    let done = runs
        .cancel_scope("acme", &pod, None, "alice", now)
        .await
        .unwrap();
    assert_eq!(done.approvals_cancelled, 1);
    let status = |id: String| async move { a.get("acme", &id, now).await.unwrap().status };
    assert_eq!(status(mine.id.clone()).await.as_str(), "cancelled");
    assert_eq!(status(other.id.clone()).await.as_str(), "pending");
    let done = runs
        .cancel_scope("acme", &Scope::Namespace, None, "alice", now)
        .await
        .unwrap();
    assert_eq!(done.approvals_cancelled, 1);
    assert_eq!(status(other.id).await.as_str(), "cancelled");
});

both_backends!(a_pod_budget_counts_every_run_of_the_pod_together, |db| {
    let runs = db.store.runs();
    let limits = per_pod(Some(3), Some(1));
    for _ in 0..3 {
        assert!(admitted(&db.store, POD_A, &limits).await.is_admitted());
    }
    // A fourth run id changes nothing: the pod has spent its calls.
    let run = fresh_run();
    let refused = runs
        .admit(POD_A, &run, false, &limits, Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        refused,
        Admission::Exhausted {
            budget: Budget::PodCalls,
            limit: 3
        }
    );
    // Both or neither: the refused call was not charged to its run.
    assert_eq!(runs.state("acme", &run).await.unwrap().calls, 0);
    assert_eq!(
        runs.would_refuse(POD_A, &fresh_run(), false, &limits, Timestamp::now())
            .await
            .unwrap(),
        Some(refused)
    );
    // Other pods keep their own budget; no pod, no pod budget.
    assert!(admitted(&db.store, POD_B, &limits).await.is_admitted());
    assert!(
        admitted(&db.store, Caller::from("acme"), &limits)
            .await
            .is_admitted()
    );
    // High-risk calls are counted per pod too.
    let high = |caller| async move {
        runs.admit(
            caller,
            &fresh_run(),
            true,
            &per_pod(None, Some(1)),
            Timestamp::now(),
        )
        .await
        .unwrap()
    };
    let pod_c = Caller {
        pod: Some("agent-c"),
        ..POD_A
    };
    assert!(high(pod_c).await.is_admitted());
    assert_eq!(
        high(pod_c).await,
        Admission::Exhausted {
            budget: Budget::PodHighRiskCalls,
            limit: 1
        }
    );
});

both_backends!(a_pod_budget_is_never_overshot_by_concurrent_runs, |db| {
    let store = Arc::new(db.store.clone());
    let limits = per_pod(Some(25), None);
    let mut tasks = Vec::new();
    for _ in 0..60 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            admitted(&store, POD_A, &limits).await.is_admitted()
        }));
    }
    let mut admitted_count = 0;
    for t in tasks {
        admitted_count += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted_count, 25);
});

/// A tenant's own role cannot lift a scoped cancellation, cancel another
/// tenant's scope, or lower its pod counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_role_cannot_lift_a_stop_or_reset_a_pod_budget() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("sa-{}", suffix()), format!("sb-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b = fx.tenant_store(&tb).await;
    let pod = Scope::parse("pod", Some("agent-a")).unwrap();
    fx.admin
        .runs()
        .cancel_scope(&ta, &pod, None, "admin", Timestamp::now())
        .await
        .unwrap();
    let pool = a.as_postgres().unwrap();
    for sql in [
        "DELETE FROM cancelled_scopes",
        "UPDATE cancelled_scopes SET target = 'nobody'",
        "UPDATE cancelled_scopes SET requested_at = requested_at + 1",
    ] {
        assert!(sqlx::query(sql).execute(pool).await.is_err(), "{sql}");
    }
    let caller = Caller::new(&ta, "agent-a", None);
    assert!(
        a.runs()
            .cancelled_at(caller, &fresh_run())
            .await
            .unwrap()
            .is_some()
    );
    // Cancelling another tenant's namespace is refused.
    let err = b
        .runs()
        .cancel_scope(&ta, &Scope::Namespace, None, "mallory", Timestamp::now())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot cancel a scope"), "{err}");
    // B sees none of A's stops.
    assert!(b.runs().scope_cancellations(&ta).await.unwrap().is_empty());
    // Pod counters only go up.
    let limits = per_pod(Some(1), None);
    let b_pod = Caller::new(&tb, "agent-b", None);
    assert!(
        b.runs()
            .admit(b_pod, &fresh_run(), false, &limits, Timestamp::now())
            .await
            .unwrap()
            .is_admitted()
    );
    let pool = b.as_postgres().unwrap();
    assert!(
        sqlx::query("UPDATE pod_budgets SET calls = 0")
            .execute(pool)
            .await
            .is_err()
    );
    assert!(
        sqlx::query("DELETE FROM pod_budgets")
            .execute(pool)
            .await
            .is_err()
    );
    assert!(
        !b.runs()
            .admit(b_pod, &fresh_run(), false, &limits, Timestamp::now())
            .await
            .unwrap()
            .is_admitted()
    );
    a.close().await;
    b.close().await;
}

/// A tenant's own role writing scope rows no sidecar could read (a name
/// Kubernetes would refuse, a time out of range) is refused by the table,
/// and a flood of other pods' stops does not hide the one that holds a pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_scope_rows_cannot_hide_a_stop() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let t = format!("sj-{}", suffix());
    let store = fx.tenant_store(&t).await;
    let pool = store.as_postgres().unwrap();
    for (target, at) in [
        ("X", 0_i64),
        ("agent-z", 9_000_000_000_000_000_000),
        ("a b", 0),
    ] {
        let err = sqlx::query("SELECT * FROM toolgate_cancel_scope($1, 'pod', $2, NULL, 'x', $3)")
            .bind(&t)
            .bind(target)
            .bind(at)
            .execute(pool)
            .await
            .expect_err("a row no sidecar can read");
        assert!(
            err.to_string().contains("check constraint"),
            "{target}: {err}"
        );
    }
    for i in 0..200 {
        sqlx::query("SELECT * FROM toolgate_cancel_scope($1, 'pod', $2, NULL, 'x', 0)")
            .bind(&t)
            .bind(format!("decoy-{i}"))
            .execute(pool)
            .await
            .unwrap();
    }
    let caller = Caller::new(&t, "agent-a", Some("coding"));
    let runs = store.runs();
    assert!(runs.scope_cancellation(caller).await.unwrap().is_none());
    runs.cancel_scope(
        &t,
        &Scope::parse("pod", Some("agent-a")).unwrap(),
        None,
        "admin",
        Timestamp::now(),
    )
    .await
    .unwrap();
    let held = runs
        .scope_cancellation(caller)
        .await
        .unwrap()
        .expect("held");
    assert_eq!(held.scope, Scope::Pod("agent-a".into()));
    store.close().await;
}

both_backends!(one_read_tells_a_sidecar_every_stop_that_holds_it, |db| {
    let runs = db.store.runs();
    let t0 = Timestamp::now();
    // Nothing stopped yet.
    let quiet = runs
        .stops(POD_A, t0 - jiff::SignedDuration::from_hours(1))
        .await;
    assert_eq!(quiet.unwrap(), toolgate_store::Stops::default());
    let old = fresh_run();
    runs.cancel(
        "acme",
        &old,
        None,
        "alice",
        t0 - jiff::SignedDuration::from_mins(10),
    )
    .await
    .unwrap();
    let recent = fresh_run();
    runs.cancel("acme", &recent, None, "alice", t0)
        .await
        .unwrap();
    // Another tenant's run and another pod's scope hold nobody here.
    runs.cancel("other", &fresh_run(), None, "mallory", t0)
        .await
        .unwrap();
    let pod_b = Scope::parse("pod", Some("agent-b")).unwrap();
    runs.cancel_scope("acme", &pod_b, None, "alice", t0)
        .await
        .unwrap();
    let read = runs
        .stops(POD_A, t0 - jiff::SignedDuration::from_mins(1))
        .await
        .unwrap();
    assert_eq!(read.scope, None);
    assert_eq!(
        read.runs
            .iter()
            .map(|(r, _)| r.as_str())
            .collect::<Vec<_>>(),
        [recent.as_str()]
    );
    // The profile of pod A is stopped: that scope holds it.
    let coding = Scope::parse("profile", Some("coding")).unwrap();
    runs.cancel_scope("acme", &coding, Some("bad rollout"), "alice", t0)
        .await
        .unwrap();
    let read = runs
        .stops(POD_A, t0 - jiff::SignedDuration::from_hours(1))
        .await
        .unwrap();
    let scope = read.scope.clone().expect("the profile's stop holds pod A");
    assert_eq!(scope.scope, coding);
    assert_eq!(scope.reason.as_deref(), Some("bad rollout"));
    assert_eq!(read.runs.len(), 2, "{read:?}");
    assert_eq!(
        runs.stops(POD_B, t0).await.unwrap().scope.unwrap().scope,
        pod_b
    );
});
