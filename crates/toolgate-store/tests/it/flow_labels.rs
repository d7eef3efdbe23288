//! Flow labels on both engines: added once each (the first setter stays),
//! read per run or pod and tenant; and on PostgreSQL, what a tenant's own
//! role cannot do to them (remove a label to let an exfiltration through,
//! or label another tenant's run).

use crate::common::tenants::*;
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_policy::FlowScope;

both_backends!(labels_are_added_once_and_read_per_subject, |db| {
    let flows = db.store.flow_labels();
    let (tenant, run) = (unique("flows"), unique("run"));
    let t0 = Timestamp::now();
    let t1 = t0 + SignedDuration::from_secs(1);
    let added = flows
        .add(&tenant, FlowScope::Run, &run, &["private"], "d-1", t0)
        .await
        .unwrap();
    assert_eq!(added, ["private"]);
    // A label already there keeps its first setter; new ones are added,
    // and only they are reported.
    let added = flows
        .add(
            &tenant,
            FlowScope::Run,
            &run,
            &["untrusted", "private"],
            "d-2",
            t1,
        )
        .await
        .unwrap();
    assert_eq!(added, ["untrusted"]);
    let labels = flows.of(&tenant, FlowScope::Run, &run).await.unwrap();
    let seen: Vec<_> = labels
        .iter()
        .map(|l| (l.label.as_str(), l.decision_id.as_str()))
        .collect();
    assert_eq!(seen, [("private", "d-1"), ("untrusted", "d-2")]);
    assert_eq!(labels[0].set_at.as_millisecond(), t0.as_millisecond());
    // Another run, the pod scope and another tenant see none of them.
    for (t, scope, subject) in [
        (tenant.as_str(), FlowScope::Run, unique("run")),
        (tenant.as_str(), FlowScope::Pod, run.clone()),
        ("someone-else", FlowScope::Run, run.clone()),
    ] {
        assert!(flows.of(t, scope, &subject).await.unwrap().is_empty());
    }
    // Nothing to add is not a write; blank keys are refused.
    flows
        .add(&tenant, FlowScope::Run, &run, &[], "d-3", t1)
        .await
        .unwrap();
    assert!(
        flows
            .add(&tenant, FlowScope::Run, " ", &["x"], "d", t1)
            .await
            .is_err()
    );
    assert!(flows.of(&tenant, FlowScope::Run, "").await.is_err());
});

/// A tenant's own role can read and add its labels, never remove or
/// change one, and never touch another tenant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_role_cannot_remove_a_label_or_label_another_tenant() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("fa-{}", suffix()), format!("fb-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b = fx.tenant_store(&tb).await;
    let now = Timestamp::now();
    a.flow_labels()
        .add(&ta, FlowScope::Run, "r1", &["private"], "d-1", now)
        .await
        .unwrap();
    let pool = a.as_postgres().unwrap();
    for sql in [
        "DELETE FROM flow_labels",
        "UPDATE flow_labels SET label = 'harmless'",
        "UPDATE flow_labels SET subject = 'another-run'",
        "TRUNCATE flow_labels",
    ] {
        assert!(sqlx::query(sql).execute(pool).await.is_err(), "{sql}");
    }
    // Junk a sidecar could not have written is refused by the table.
    for label in ["Private", "", "-x", &"x".repeat(64)] {
        let r = sqlx::query(
            "INSERT INTO flow_labels (tenant, scope, subject, label, decision_id, set_at) \
             VALUES ($1, 'run', 'r2', $2, 'd', 0)",
        )
        .bind(&ta)
        .bind(label)
        .execute(pool)
        .await;
        assert!(r.is_err(), "{label:?} accepted");
    }
    let labels = a.flow_labels().of(&ta, FlowScope::Run, "r1").await.unwrap();
    assert_eq!(labels.len(), 1);
    // B can neither see A's labels nor add one to A's run.
    assert!(
        b.flow_labels()
            .of(&ta, FlowScope::Run, "r1")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        b.flow_labels()
            .add(&ta, FlowScope::Run, "r1", &["untrusted"], "d-x", now)
            .await
            .is_err()
    );
    assert_eq!(
        fx.admin
            .flow_labels()
            .of(&ta, FlowScope::Run, "r1")
            .await
            .unwrap()
            .len(),
        1
    );
    a.close().await;
    b.close().await;
}
