//! The fleet a PolicyProfile's status reports: heartbeats of pods in the
//! profile's own namespace only, not of a same-named profile elsewhere.

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
