//! Reading decisions back on both engines: one decision at the instant it
//! was made (what an Approval shows as the why of its escalation), and a
//! run's latest decisions within a window, newest first.

use crate::common::builders::record;
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};

both_backends!(a_decision_and_a_runs_history_are_read_back, |db| {
    let decisions = db.store.decisions();
    let tenant = unique("lookup");
    let t0 = Timestamp::from_millisecond(Timestamp::now().as_millisecond()).unwrap();
    let at = |i: i64| t0 + SignedDuration::from_secs(i);
    for i in 0..6 {
        let mut r = record(i);
        r.created_at = at(i as i64);
        r.run_id = if i == 4 {
            "run-2".into()
        } else {
            "run-1".into()
        };
        decisions.append(&tenant, "pod/s", r).await.unwrap();
    }
    let found = decisions
        .at(&tenant, "dec-3", at(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.tool.as_str(), found.run_id.as_str()),
        ("shell.exec", "run-1")
    );
    assert_eq!(found.matched_rule.as_deref(), Some("r1"));
    // Another instant, another tenant: nothing.
    assert!(
        decisions
            .at(&tenant, "dec-3", at(2))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        decisions
            .at("someone-else", "dec-3", at(3))
            .await
            .unwrap()
            .is_none()
    );
    let ids = |rs: Vec<toolgate_store::DecisionRecord>| {
        rs.into_iter().map(|r| r.decision_id).collect::<Vec<_>>()
    };
    let history = decisions
        .run_history(&tenant, "run-1", at(1), at(5), 3)
        .await
        .unwrap();
    assert_eq!(ids(history), ["dec-5", "dec-3", "dec-2"]);
    let history = decisions
        .run_history(&tenant, "run-1", at(0), at(2), 10)
        .await
        .unwrap();
    assert_eq!(ids(history), ["dec-2", "dec-1", "dec-0"]);
    assert!(decisions.at(&tenant, " ", at(3)).await.is_err());
});
