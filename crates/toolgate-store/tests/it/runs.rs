//! Run budgets and cancellation, on SQLite and PostgreSQL (see `common`).

/// The decision stream admissions are recorded in.
const S: &str = "pod-a/0001";

use crate::common::{rid, unique};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use toolgate_store::{
    Admission, ApprovalStatus, Budget, DecisionRecord, NewApproval, NewIntent, PodLimits,
    ResumeClass, RunLimits, Store,
};

fn record(run: &str, verdict: &str, reason: &str) -> DecisionRecord {
    DecisionRecord {
        decision_id: unique("dec"),
        run_id: run.into(),
        step_id: "s".into(),
        tool: "deploy".into(),
        verdict: verdict.into(),
        reason: reason.into(),
        message: None,
        matched_rule: None,
        policy_version: "p@0123456789ab+h01234567".into(),
        risk: "high".into(),
        args_digest: "sha256:a".into(),
        call_digest: Some("sha256:c".into()),
        definition_digest: None,
        created_at: Timestamp::now(),
    }
}

const CALLS: RunLimits = RunLimits {
    max_calls: Some(3),
    max_high_risk_calls: Some(1),
    max_run_seconds: None,
    per_pod: PodLimits {
        max_calls: None,
        max_high_risk_calls: None,
    },
};

both_backends!(budgets_count_and_refuse_without_counting, |db| {
    let runs = db.store.runs();
    let run = unique("run");
    let now = Timestamp::now();
    let first = runs
        .admit("acme", &rid(&run), true, &CALLS, now)
        .await
        .unwrap();
    assert_eq!(
        first,
        Admission::Admitted {
            calls: 1,
            high_risk_calls: 1
        }
    );
    // The one high-risk call is used; low-risk calls still fit.
    assert_eq!(
        runs.admit("acme", &rid(&run), true, &CALLS, now)
            .await
            .unwrap(),
        Admission::Exhausted {
            budget: Budget::HighRiskCalls,
            limit: 1
        }
    );
    for expected in 2..=3 {
        match runs
            .admit("acme", &rid(&run), false, &CALLS, now)
            .await
            .unwrap()
        {
            Admission::Admitted { calls, .. } => assert_eq!(calls, expected),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        runs.admit("acme", &rid(&run), false, &CALLS, now)
            .await
            .unwrap(),
        Admission::Exhausted {
            budget: Budget::Calls,
            limit: 3
        }
    );
    let state = runs.state("acme", &rid(&run)).await.unwrap();
    assert_eq!(
        (state.calls, state.high_risk_calls),
        (3, 1),
        "refusals count nothing"
    );
    // Another tenant's run of the same id has its own budget.
    assert!(
        runs.admit("other", &rid(&run), true, &CALLS, now)
            .await
            .unwrap()
            .is_admitted()
    );
    // A zero high-risk budget refuses the very first one.
    let zero = RunLimits {
        max_high_risk_calls: Some(0),
        ..RunLimits::default()
    };
    assert_eq!(
        runs.admit("acme", &rid(&unique("run")), true, &zero, now)
            .await
            .unwrap(),
        Admission::Exhausted {
            budget: Budget::HighRiskCalls,
            limit: 0
        }
    );
});

both_backends!(run_time_budget_starts_at_the_first_call, |db| {
    let runs = db.store.runs();
    let run = unique("run");
    let limits = RunLimits {
        max_run_seconds: Some(60),
        ..RunLimits::default()
    };
    let start = Timestamp::now();
    assert!(
        runs.admit("acme", &rid(&run), false, &limits, start)
            .await
            .unwrap()
            .is_admitted()
    );
    let later = start + SignedDuration::from_secs(59);
    assert!(
        runs.admit("acme", &rid(&run), false, &limits, later)
            .await
            .unwrap()
            .is_admitted()
    );
    let past = start + SignedDuration::from_secs(60);
    assert_eq!(
        runs.admit("acme", &rid(&run), false, &limits, past)
            .await
            .unwrap(),
        Admission::Exhausted {
            budget: Budget::RunSeconds,
            limit: 60
        }
    );
});

both_backends!(would_refuse_reads_the_budget_without_charging, |db| {
    let runs = db.store.runs();
    let run = rid(&unique("run"));
    let now = Timestamp::now();
    // A run never charged would be admitted.
    assert_eq!(
        runs.would_refuse("acme", &run, true, &CALLS, now)
            .await
            .unwrap(),
        None
    );
    assert!(
        runs.admit("acme", &run, true, &CALLS, now)
            .await
            .unwrap()
            .is_admitted()
    );
    // The high-risk budget is spent, the call budget is not.
    assert_eq!(
        runs.would_refuse("acme", &run, true, &CALLS, now)
            .await
            .unwrap(),
        Some(Admission::Exhausted {
            budget: Budget::HighRiskCalls,
            limit: 1
        })
    );
    for _ in 0..5 {
        assert_eq!(
            runs.would_refuse("acme", &run, false, &CALLS, now)
                .await
                .unwrap(),
            None
        );
    }
    assert_eq!(
        runs.state("acme", &run).await.unwrap().calls,
        1,
        "nothing charged"
    );
    runs.cancel("acme", &run, Some("stop"), "user:a", now)
        .await
        .unwrap();
    assert_eq!(
        runs.would_refuse("acme", &run, false, &CALLS, now)
            .await
            .unwrap(),
        Some(Admission::Cancelled {
            reason: Some("stop".into()),
            scoped: false,
        })
    );
});

both_backends!(records_refuse_run_ids_not_in_canonical_spelling, |db| {
    for bad in ["Run-1", "run-1.", "run-1 ", "run\u{200b}-1"] {
        let err = db
            .store
            .intents()
            .begin(
                NewIntent {
                    tenant: "acme".into(),
                    run_id: bad.into(),
                    step_id: "s1".into(),
                    tool: "deploy".into(),
                    args_digest: "sha256:a".into(),
                    call_digest: None,
                    decision_id: unique("dec"),
                    risk: "high".into(),
                    verification_probe: None,
                },
                Timestamp::now(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, toolgate_store::StoreError::InvalidInput(_)),
            "{bad:?}: {err}"
        );
    }
});

both_backends!(concurrent_sidecars_never_overshoot_a_budget, |db| {
    // Sixty calls racing on separate pooled connections, as the sidecars
    // sharing one run do.
    let store = Arc::new(db.store.clone());
    let run = unique("run");
    let limits = RunLimits {
        max_calls: Some(25),
        ..RunLimits::default()
    };
    let mut tasks = Vec::new();
    for _ in 0..60 {
        let store = store.clone();
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            store
                .runs()
                .admit("acme", &rid(&run), false, &limits, Timestamp::now())
                .await
                .unwrap()
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        if t.await.unwrap().is_admitted() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 25);
    assert_eq!(
        db.store
            .runs()
            .state("acme", &rid(&run))
            .await
            .unwrap()
            .calls,
        25
    );
});

both_backends!(admission_and_record_commit_together, |db| {
    let runs = db.store.runs();
    let run = unique("run");
    let (admission, chained) = runs
        .admit_and_record(
            "acme",
            S,
            &rid(&run),
            true,
            &CALLS,
            Timestamp::now(),
            None,
            |a, _| {
                assert!(a.is_admitted());
                record(&run, "allow", "allow_rule")
            },
        )
        .await
        .unwrap();
    assert!(admission.is_admitted());
    assert_eq!(chained.seq, 1);
    // The refusal is recorded as the caller decided to record it.
    let (refused, chained) = runs
        .admit_and_record(
            "acme",
            S,
            &rid(&run),
            true,
            &CALLS,
            Timestamp::now(),
            None,
            |a, _| match a {
                Admission::Exhausted { .. } => record(&run, "deny", "budget_exhausted"),
                other => panic!("{other:?}"),
            },
        )
        .await
        .unwrap();
    assert!(!refused.is_admitted());
    assert_eq!(chained.record.reason, "budget_exhausted");
    // A record the log refuses rolls the charge back.
    let err = runs
        .admit_and_record(
            "acme",
            S,
            &rid(&run),
            false,
            &CALLS,
            Timestamp::now(),
            None,
            |_, _| {
                let mut r = record(&run, "allow", "allow_rule");
                r.tool = String::new();
                r
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input");
    assert_eq!(runs.state("acme", &rid(&run)).await.unwrap().calls, 1);
    let report = db.store.decisions().verify(Some("acme")).await.unwrap();
    assert!(report.iter().all(|r| r.ok), "{report:?}");
    assert_eq!(report[0].rows, 2);
});

both_backends!(
    cancellation_is_durable_reaps_approvals_and_keeps_intents,
    |db| {
        let store = &db.store;
        let run = unique("run");
        let now = Timestamp::now();
        assert!(
            store
                .runs()
                .admit("acme", &rid(&run), false, &RunLimits::default(), now)
                .await
                .unwrap()
                .is_admitted()
        );
        let pending = store
            .approvals()
            .request(
                NewApproval {
                    approval_id: None,
                    invocation_id: unique("inv"),
                    tenant: "acme".into(),
                    run_id: run.clone(),
                    tool: "deploy".into(),
                    args_digest: "sha256:a".into(),
                    call_digest: Some("sha256:c".into()),
                    policy_version: "p@0123456789ab+h01234567".into(),
                    decision_id: unique("dec"),
                    requested_by: "sidecar:acme/pod".into(),
                    ttl: Duration::from_secs(600),
                    action: None,
                    preview: Some("deploy prod".into()),
                },
                Timestamp::now(),
            )
            .await
            .unwrap();
        let intent = store
            .intents()
            .begin(
                NewIntent {
                    tenant: "acme".into(),
                    run_id: run.clone(),
                    step_id: "s1".into(),
                    tool: "deploy".into(),
                    args_digest: "sha256:a".into(),
                    call_digest: Some("sha256:c".into()),
                    decision_id: unique("dec"),
                    risk: "high".into(),
                    verification_probe: None,
                },
                Timestamp::now(),
            )
            .await
            .unwrap();
        store
            .intents()
            .mark_effect_sent("acme", &intent.id, Timestamp::now())
            .await
            .unwrap();

        // A waiter on the approval is woken by the cancellation.
        let waiter = {
            let store = store.clone();
            let id = pending.id.clone();
            tokio::spawn(async move {
                store
                    .approvals()
                    .wait("acme", &id, Duration::from_secs(20))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let cancel = store
            .runs()
            .cancel(
                "acme",
                &rid(&run),
                Some("runaway loop"),
                "user:alice",
                Timestamp::now(),
            )
            .await
            .unwrap();
        assert!(cancel.newly_cancelled);
        assert_eq!(cancel.approvals_cancelled, 1);
        let woken = waiter.await.unwrap().unwrap();
        assert_eq!(woken.status, ApprovalStatus::Cancelled);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        // Calls of the run are refused from now on; nothing is counted.
        assert_eq!(
            store
                .runs()
                .admit(
                    "acme",
                    &rid(&run),
                    false,
                    &RunLimits::default(),
                    Timestamp::now()
                )
                .await
                .unwrap(),
            Admission::Cancelled {
                reason: Some("runaway loop".into()),
                scoped: false,
            }
        );
        // Cancelling again changes nothing.
        let again = store
            .runs()
            .cancel(
                "acme",
                &rid(&run),
                Some("other"),
                "user:bob",
                Timestamp::now(),
            )
            .await
            .unwrap();
        assert!(!again.newly_cancelled);
        assert_eq!(again.requested_at, cancel.requested_at);

        let state = store.runs().state("acme", &rid(&run)).await.unwrap();
        assert_eq!(state.cancel_reason.as_deref(), Some("runaway loop"));
        assert_eq!(state.cancelled_by.as_deref(), Some("user:alice"));
        assert_eq!(state.calls, 1);
        // The open intent keeps its classification; nothing was replayed.
        assert_eq!(state.open_intents.len(), 1);
        assert_eq!(state.open_intents[0].intent.id, intent.id);
        assert_eq!(state.open_intents[0].class, ResumeClass::Uncertain);

        let events = store.approvals().run_events("acme", &run).await.unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert!(kinds.contains(&"run.cancelled"), "{kinds:?}");
        assert!(kinds.contains(&"approval.cancelled"), "{kinds:?}");
        let since = store
            .runs()
            .cancelled_since("acme", cancel.requested_at)
            .await
            .unwrap();
        assert_eq!(since, vec![(run.clone(), cancel.requested_at)]);
        assert!(
            store
                .runs()
                .cancelled_since("other", cancel.requested_at)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store.runs().cancelled_at("acme", &rid(&run)).await.unwrap(),
            Some(toolgate_store::Stopped {
                at: cancel.requested_at,
                scoped: false
            })
        );
        assert_eq!(
            store
                .runs()
                .cancelled_at("other", &rid(&run))
                .await
                .unwrap(),
            None
        );
        // A run never seen has an empty state.
        let unseen = store.runs().state("acme", &rid("never")).await.unwrap();
        assert_eq!(
            (unseen.calls, unseen.started_at, unseen.open_intents.len()),
            (0, None, 0)
        );
    }
);

/// A `Store` can be shared between tasks and threads (checked at compile
/// time).
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Store>();
};
