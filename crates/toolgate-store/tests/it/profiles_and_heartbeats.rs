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
        shadow: None,
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

both_backends!(a_heartbeat_also_counts_the_tenants_open_intents, |db| {
    let now = Timestamp::now();
    let beat = Heartbeat {
        pod_name: "agent-0".into(),
        pod_namespace: "acme".into(),
        profile: "coding".into(),
        policy_version: "coding@0123456789ab+h01234567".into(),
        sequence: 3,
        last_seen: now,
        shadow: None,
    };
    let hb = db.store.heartbeats();
    assert_eq!(
        hb.record_heartbeat_and_count(&beat, "acme").await.unwrap(),
        (0, 0)
    );
    let intents = db.store.intents();
    let sent = intents
        .begin(crate::common::builders::new_intent("run-1", "s1"), now)
        .await
        .unwrap();
    intents
        .mark_effect_sent("acme", &sent.id, now)
        .await
        .unwrap();
    intents
        .begin(crate::common::builders::new_intent("run-1", "s2"), now)
        .await
        .unwrap();
    // Another tenant's open intent is not counted.
    let mut other = crate::common::builders::new_intent("run-9", "s1");
    other.tenant = "other".into();
    intents.begin(other, now).await.unwrap();
    let counted = hb
        .record_heartbeat_and_count(
            &Heartbeat {
                sequence: 4,
                ..beat.clone()
            },
            "acme",
        )
        .await
        .unwrap();
    assert_eq!(counted, (1, 1), "one safe to retry, one uncertain");
    assert_eq!(counted, intents.open_counts("acme").await.unwrap());
    let stored = hb.list_heartbeats(Some("coding")).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].sequence, 4, "the beat was recorded too");
    let bad = Heartbeat {
        sequence: -1,
        ..beat
    };
    assert_eq!(
        hb.record_heartbeat_and_count(&bad, "acme")
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
});

both_backends!(a_heartbeat_carries_its_shadow_tally, |db| {
    use toolgate_policy::Decision::{Allow, Deny, Escalate};
    let mut tally = toolgate_store::ShadowTally::new("next@0123456789ab+h01234567");
    tally.record(Allow, Deny);
    tally.record(Escalate, Escalate);
    let beat = Heartbeat {
        pod_name: "agent-0".into(),
        pod_namespace: "acme".into(),
        profile: "coding".into(),
        policy_version: "coding@0123456789ab+h01234567".into(),
        sequence: 1,
        // Stored to the millisecond.
        last_seen: Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
        shadow: Some(tally.clone()),
    };
    let hb = db.store.heartbeats();
    hb.record_heartbeat_and_count(&beat, "acme").await.unwrap();
    let listed = hb.list_profile_heartbeats("acme", "coding").await.unwrap();
    assert_eq!(listed.heartbeats[0].shadow.as_ref(), Some(&tally));
    // The next beat replaces it, also with none (a bundle without a candidate).
    let plain = Heartbeat {
        sequence: 2,
        shadow: None,
        ..beat.clone()
    };
    hb.record_heartbeat(&plain).await.unwrap();
    let listed = hb.list_profile_heartbeats("acme", "coding").await.unwrap();
    assert_eq!(listed.heartbeats, vec![plain]);
    // A tally that does not read back (a tenant writes these rows) is no
    // report, and the heartbeat still counts.
    db.raw_both("UPDATE sidecar_heartbeats SET shadow = '{\"shadowed\":\"many\"}'")
        .await;
    let listed = hb.list_profile_heartbeats("acme", "coding").await.unwrap();
    assert!(listed.unreadable.is_empty());
    assert_eq!(
        (
            listed.heartbeats.len(),
            listed.heartbeats[0].shadow.as_ref()
        ),
        (1, None)
    );
});
