//! The fleet a PolicyProfile's status reports: heartbeats of pods in the
//! profile's own namespace only, not of a same-named profile elsewhere.

use std::sync::Arc;

use crate::common::publish::{cond, create};
use crate::common::*;
use jiff::SignedDuration;
use serde_json::json;
use toolgate_store::Heartbeat;

#[tokio::test]
async fn fleet_counts_only_pods_in_the_profile_namespace() {
    let (client, server) = mock_client();
    let store = store().await;
    for (ns, pod) in [
        (NS, "agent-0"),
        ("team-b", "agent-9"),
        ("team-b", "agent-8"),
    ] {
        store
            .heartbeats()
            .record_heartbeat(&Heartbeat {
                pod_name: pod.into(),
                pod_namespace: ns.into(),
                // Same profile name, different namespace for team-b.
                profile: "safe-coding".into(),
                policy_version: "safe-coding@other".into(),
                sequence: 1,
                last_seen: now() - SignedDuration::from_secs(5),
                shadow: None,
            })
            .await
            .unwrap();
    }
    let c = create(context(client, store, now()), server, profile(1, true)).await;
    let status = c.status.unwrap();
    assert_eq!(
        status["fleet"],
        json!({"current": 0, "stale": 1, "total": 1})
    );
    let stale = cond(&status, "Stale")["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(stale.contains("agents/agent-0"), "{stale}");
    assert!(!stale.contains("team-b"), "{stale}");
}

/// Review finding: a tenant writes its pods' heartbeats itself, and one
/// whose time does not read back (`last_seen` past what a timestamp holds,
/// as a tenant's own role could write before migration 0022) failed the
/// reconcile of every profile of the same name, in every namespace. Now a
/// profile reads its own namespace's pods only, row by row: another
/// tenant's row is never read, and its own bad row is left out of the
/// fleet, logged and counted once.
#[tokio::test]
async fn an_unreadable_heartbeat_holds_back_no_profile() {
    let (client, server) = mock_client();
    let store = store().await;
    store
        .heartbeats()
        .record_heartbeat(&Heartbeat {
            pod_name: "agent-0".into(),
            pod_namespace: NS.into(),
            profile: "safe-coding".into(),
            policy_version: "safe-coding@other".into(),
            sequence: 1,
            last_seen: now() - SignedDuration::from_secs(5),
            shadow: None,
        })
        .await
        .unwrap();
    for (ns, pod) in [("team-z", "poison"), (NS, "agent-bad")] {
        sqlx::raw_sql(&format!(
            "INSERT INTO sidecar_heartbeats (pod_namespace, pod_name, profile, policy_version, \
             sequence, last_seen) VALUES ('{ns}', '{pod}', 'safe-coding', 'p@v1', 1, {})",
            i64::MAX
        ))
        .execute(store.as_sqlite().unwrap())
        .await
        .unwrap();
    }
    let ctx = context(client, store, now());
    let c = create(Arc::clone(&ctx), server, profile(1, true)).await;
    let status = c.status.unwrap();
    assert_eq!(
        status["fleet"],
        json!({"current": 0, "stale": 1, "total": 1})
    );
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_unreadable_rows_total{pass=\"fleet\"} 1"),
        "{metrics}"
    );
}
