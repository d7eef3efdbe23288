//! Profile loads (one event each) and sidecar heartbeats (one row per pod),
//! on both engines.

use crate::common::builders::profile_load;
use jiff::Timestamp;
use toolgate_store::Heartbeat;

both_backends!(profile_load_records_one_event, |db| {
    let profiles = db.store.profiles();
    let v1 = "default@aaaaaaaaaaaa+hbbbbbbbb";
    assert!(
        profiles
            .record_profile_load(profile_load(v1, "pod-1"), Timestamp::now())
            .await
            .unwrap()
    );
    assert!(
        !profiles
            .record_profile_load(profile_load(v1, "pod-1"), Timestamp::now())
            .await
            .unwrap()
    );
    // Another loader of the same version: its load is recorded, no new event.
    assert!(
        !profiles
            .record_profile_load(profile_load(v1, "pod-2"), Timestamp::now())
            .await
            .unwrap()
    );
    let v2 = "default@cccccccccccc+hdddddddd";
    assert!(
        profiles
            .record_profile_load(profile_load(v2, "pod-1"), Timestamp::now())
            .await
            .unwrap()
    );

    let versions = profiles
        .list_profile_versions(Some("default"))
        .await
        .unwrap();
    let seen: Vec<(&str, &str)> = versions
        .iter()
        .map(|v| (v.load.policy_version.as_str(), v.load.loaded_by.as_str()))
        .collect();
    assert_eq!(seen, vec![(v1, "pod-1"), (v1, "pod-2"), (v2, "pod-1")]);
    assert_eq!(versions[0].load.spec_sha256, "a".repeat(64));
    assert!(
        profiles
            .list_profile_versions(Some("nope"))
            .await
            .unwrap()
            .is_empty()
    );

    let events = profiles
        .list_process_events(Some("policy.profile.loaded"), 0)
        .await
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].payload["policy_version"], v1);
    assert_ne!(events[0].idempotency_key, events[1].idempotency_key);
    assert_eq!(events[0].idempotency_key.len(), 64);
    let after = profiles
        .list_process_events(None, events[0].id)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
});

both_backends!(heartbeats_upsert_by_pod, |db| {
    let hb = db.store.heartbeats();
    let beat = |pod: &str, profile: &str, seq: i64| Heartbeat {
        pod_name: pod.into(),
        pod_namespace: "agents".into(),
        profile: profile.into(),
        policy_version: format!("{profile}@v{seq}"),
        sequence: seq,
        last_seen: jiff::Timestamp::from_millisecond(1_700_000_000_000 + seq).unwrap(),
    };
    hb.record_heartbeat(&beat("pod-a", "default", 1))
        .await
        .unwrap();
    hb.record_heartbeat(&beat("pod-b", "strict", 1))
        .await
        .unwrap();
    hb.record_heartbeat(&beat("pod-a", "default", 2))
        .await
        .unwrap();
    let all = hb.list_heartbeats(None).await.unwrap();
    assert_eq!(
        all,
        vec![beat("pod-a", "default", 2), beat("pod-b", "strict", 1)]
    );
    assert_eq!(
        hb.list_heartbeats(Some("strict")).await.unwrap(),
        vec![beat("pod-b", "strict", 1)]
    );
});
