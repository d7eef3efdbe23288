//! One tenant's heartbeat or decision row that does not read back (a time
//! outside what a timestamp holds, or on SQLite a value of the wrong type)
//! holds back only itself: a profile's fleet is read from its own namespace
//! row by row, and on PostgreSQL a tenant can no longer write such a time
//! (migration 0022). Review finding: one tenant stalled the fleet status of
//! every profile of the same name, and the archive of every tenant's log.

use crate::common::tenants::{Fixture, heartbeat, sqlstate};
use toolgate_store::HeartbeatListing;

const FAR: i64 = i64::MAX;

/// A heartbeat of pod `pod` in `namespace` on profile `default`, written
/// around the store, seen at `seen` (SQL text).
fn planted(namespace: &str, pod: &str, seen: &str) -> String {
    format!(
        "INSERT INTO sidecar_heartbeats (pod_namespace, pod_name, profile, policy_version, \
         sequence, last_seen) VALUES ('{namespace}', '{pod}', 'default', 'p@v1', 1, {seen})"
    )
}

/// A decision row of `tenant` chained by the database, created at `at`.
fn decision(tenant: &str, at: &str) -> String {
    format!(
        "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, verdict, \
         reason, policy_version, risk, args_digest, created_at) \
         VALUES ('{tenant}', 'pod/x', 'd', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'a', {at})"
    )
}

/// The pods that read back, and the (namespace, pod, error code) of those
/// that did not.
type Unread<'a> = (Option<&'a str>, Option<&'a str>, &'a str);

fn pods(listing: &HeartbeatListing) -> (Vec<&str>, Vec<Unread<'_>>) {
    (
        listing
            .heartbeats
            .iter()
            .map(|h| h.pod_name.as_str())
            .collect(),
        listing
            .unreadable
            .iter()
            .map(|u| {
                (
                    u.pod_namespace.as_deref(),
                    u.pod_name.as_deref(),
                    u.error.code(),
                )
            })
            .collect(),
    )
}

both_backends!(
    a_heartbeat_that_does_not_read_back_holds_back_only_itself,
    |db| {
        let hb = db.store.heartbeats();
        let mut good = heartbeat("team-a", 1);
        good.pod_name = "pod-good".into();
        hb.record_heartbeat(&good).await.unwrap();
        hb.record_heartbeat(&heartbeat("team-b", 1)).await.unwrap();
        let toggle = |on: &str| {
            format!("ALTER TABLE sidecar_heartbeats {on} TRIGGER sidecar_heartbeats_time_readable")
        };
        let pg = format!(
            "{}; {}; {}",
            toggle("DISABLE"),
            planted("team-a", "pod-far", &FAR.to_string()),
            toggle("ENABLE"),
        );
        let sqlite = format!(
            "{}; {}",
            planted("team-a", "pod-far", &FAR.to_string()),
            // SQLite keeps what it is given: text where a time belongs.
            planted("team-a", "pod-text", "'soon'"),
        );
        db.raw(&pg, &sqlite).await;

        let mine = hb
            .list_profile_heartbeats("team-a", "default")
            .await
            .unwrap();
        let (readable, unreadable) = pods(&mine);
        assert_eq!(readable, ["pod-good"]);
        let mut expected = vec![(Some("team-a"), Some("pod-far"), "stored_data_corrupt")];
        if db.pg().is_none() {
            expected.push((Some("team-a"), Some("pod-text"), "database_error"));
        }
        assert_eq!(unreadable, expected);
        // Another namespace's profile of the same name never reads them.
        let theirs = hb
            .list_profile_heartbeats("team-b", "default")
            .await
            .unwrap();
        assert_eq!(pods(&theirs), (vec!["pod-1"], vec![]));
        // The list across namespaces still fails on a bad row, as it did.
        assert_eq!(
            hb.list_heartbeats(Some("default"))
                .await
                .unwrap_err()
                .code(),
            if db.pg().is_some() {
                "stored_data_corrupt"
            } else {
                "database_error"
            }
        );
        assert_eq!(
            hb.list_profile_heartbeats("", "default")
                .await
                .unwrap_err()
                .code(),
            "invalid_input"
        );
    }
);

/// As tenant A's own role: no heartbeat or decision time the store cannot
/// read is written any more, and a heartbeat A planted before migration
/// 0022 under B's profile name does not reach B's fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_plant_unreadable_heartbeats_or_decisions() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let a = fx.tenant_store("team-a").await;
    let b = fx.tenant_store("team-b").await;
    let pa = a.as_postgres().unwrap().clone();
    for sql in [
        planted("team-a", "x1", &FAR.to_string()),
        planted("team-a", "x2", "-1"),
        planted("team-a", "x3", "253402300799999"),
        decision("team-a", &FAR.to_string()),
        decision("team-a", "-1"),
        decision("team-a", &i64::MIN.to_string()),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG007", "{sql}");
    }
    // The first readable millisecond is still a time a row may carry.
    sqlx::raw_sql(&decision("team-a", "0"))
        .execute(&pa)
        .await
        .unwrap();
    a.heartbeats()
        .record_heartbeat(&heartbeat("team-a", 1))
        .await
        .unwrap();
    assert_eq!(
        sqlstate(
            &pa,
            &format!("UPDATE sidecar_heartbeats SET last_seen = {FAR} WHERE pod_name = 'pod-1'")
        )
        .await,
        "TG007"
    );
    // Through the store the refusal is typed.
    let mut late = heartbeat("team-a", 2);
    late.last_seen = "9999-06-01T00:00:00Z".parse().unwrap();
    assert_eq!(
        a.heartbeats()
            .record_heartbeat(&late)
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );

    // The schema before 0022: A plants a heartbeat as its own role, under
    // the name of B's profile.
    let toggle = |on: &str| {
        format!("ALTER TABLE sidecar_heartbeats {on} TRIGGER sidecar_heartbeats_time_readable")
    };
    sqlx::raw_sql(&toggle("DISABLE"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    sqlx::raw_sql(&planted("team-a", "poison", &FAR.to_string()))
        .execute(&pa)
        .await
        .unwrap();
    sqlx::raw_sql(&toggle("ENABLE"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    b.heartbeats()
        .record_heartbeat(&heartbeat("team-b", 1))
        .await
        .unwrap();

    let hb = fx.admin.heartbeats();
    // What the controller read before: every namespace's pods on the name.
    assert_eq!(
        hb.list_heartbeats(Some("default"))
            .await
            .unwrap_err()
            .code(),
        "stored_data_corrupt"
    );
    let theirs = hb
        .list_profile_heartbeats("team-b", "default")
        .await
        .unwrap();
    assert_eq!(pods(&theirs), (vec!["pod-1"], vec![]));
    let mine = hb
        .list_profile_heartbeats("team-a", "default")
        .await
        .unwrap();
    assert_eq!(
        pods(&mine),
        (
            vec!["pod-1"],
            vec![(Some("team-a"), Some("poison"), "stored_data_corrupt")]
        )
    );
    a.close().await;
    b.close().await;
}
