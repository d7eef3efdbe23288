//! A PolicyProfile whose spec stops compiling: the last good bundle keeps
//! being served and re-signed before it expires, is never replaced, and is
//! re-signed only when it verifies with the controller's key, is for this
//! profile and is not older than what the status recorded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::publish::{
    CM_BUNDLE, Captured, cond, create, expect_status, trust_pem, verify_cm,
};
use crate::common::*;
use http::Method;
use jiff::SignedDuration;
use serde_json::{Value, json};
use toolgate_controller::crd::{PolicyProfile, PolicyProfileStatus};
use toolgate_controller::profile;

#[tokio::test]
async fn invalid_spec_never_replaces_the_last_good_bundle() {
    let (client, server) = mock_client();
    let store = store().await;
    let c = create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    let good: PolicyProfileStatus = serde_json::from_value(c.status.unwrap()).unwrap();

    // A rule for a tool without an effects entry.
    let mut p = profile(3, true);
    p.spec.rules.insert("deploy".into(), Default::default());
    p.status = Some(good.clone());
    let (client, mut server) = mock_client();
    let ctx = context(client, store, now());
    ctx.mark_trusted(NS);
    let good_version = good.version.clone().unwrap();
    let cm = c.configmap.unwrap();
    let action = run(profile::reconcile(Arc::new(p), ctx), async move {
        // The last good bundle is read (to keep it fresh), never replaced: it
        // has most of its validity left, so no approvals list and no apply.
        server.expect(Method::GET, CM_BUNDLE).await.respond(200, cm);
        let ev = server.event().await;
        assert_eq!(
            (ev["type"].as_str(), ev["reason"].as_str()),
            (Some("Warning"), Some("InvalidSpec"))
        );
        assert!(
            ev["note"]
                .as_str()
                .unwrap()
                .contains("profile_incomplete_effects")
        );
        let st = expect_status(&mut server).await;
        let status = &st.body["status"];
        let valid = cond(status, "Valid");
        assert_eq!(
            (valid["status"].as_str(), valid["reason"].as_str()),
            (Some("False"), Some("InvalidSpec"))
        );
        let msg = valid["message"].as_str().unwrap();
        assert!(
            msg.starts_with("profile_incomplete_effects at spec.rules"),
            "{msg}"
        );
        assert!(msg.contains("deploy"), "{msg}");
        assert_eq!(cond(status, "Ready")["status"], "True");
        assert_eq!(cond(status, "Ready")["reason"], "ServingLastGood");
        // The last good version stays in the status.
        assert_eq!(status["version"], good_version.as_str());
        assert_eq!(status["sequence"], 1);
        assert_eq!(status["observedGeneration"], 3);
        st.echo_status(profile_json());
    })
    .await
    .unwrap();
    // Back when a third of the validity remains, spec change or not.
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(16 * 3600))
    );
}

/// A profile whose spec no longer compiles (a rule for a tool without an
/// effects entry), carrying `status`.
fn invalid_profile(generation: i64, status: PolicyProfileStatus) -> PolicyProfile {
    let mut p = profile(generation, true);
    p.spec.rules.insert("deploy".into(), Default::default());
    p.status = Some(status);
    p
}

/// 17h after publication (less than a third of 24h left) with an invalid
/// spec: the last good document is re-signed as sequence 2, the status stays
/// Valid=False and says the last good bundle is served, and the reconcile
/// comes back for the next re-sign without any spec change.
#[tokio::test]
async fn invalid_spec_keeps_the_last_good_bundle_fresh() {
    let (client, server) = mock_client();
    let store = store().await;
    let c = create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    let cm = c.configmap.unwrap();
    let good: PolicyProfileStatus = serde_json::from_value(c.status.unwrap()).unwrap();
    let good_version = good.version.clone().unwrap();

    let later = now() + SignedDuration::from_hours(17);
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), later);
    ctx.mark_trusted(NS);
    let captured = Arc::new(Mutex::new(Captured::default()));
    let out = captured.clone();
    let v = good_version.clone();
    let action = run(
        profile::reconcile(Arc::new(invalid_profile(3, good.clone())), ctx),
        async move {
            server.expect(Method::GET, CM_BUNDLE).await.respond(200, cm);
            server
                .expect(Method::GET, APPROVALS)
                .await
                .respond(200, list(vec![]));
            let apply = server.expect(Method::PATCH, CM_BUNDLE).await;
            assert_eq!(apply.content_type, "application/apply-patch+yaml");
            let verified = verify_cm(&apply.body, &trust_pem(), later);
            assert_eq!(verified.sequence(), 2);
            assert_eq!(verified.policy_version(), v, "the last good content");
            assert!(!verified.document().spec.rules.contains_key("deploy"));
            assert_eq!(verified.document().issued_at, later);
            assert_eq!(
                verified.expires_at(),
                later + SignedDuration::from_hours(24)
            );
            assert_eq!(
                apply.body["metadata"]["annotations"]["toolgate.dev/sequence"],
                "2"
            );
            let cm2 = apply.body.clone();
            apply.echo();
            let ev = server.event().await;
            assert_eq!(
                (ev["type"].as_str(), ev["reason"].as_str()),
                (Some("Normal"), Some("Resigned"))
            );
            assert!(ev["note"].as_str().unwrap().contains("spec is invalid"));
            assert_eq!(server.event().await["reason"], "InvalidSpec");
            let st = expect_status(&mut server).await;
            let status = st.body["status"].clone();
            assert_eq!(cond(&status, "Valid")["status"], "False");
            assert_eq!(cond(&status, "Valid")["reason"], "InvalidSpec");
            let ready = cond(&status, "Ready");
            assert_eq!(
                (ready["status"].as_str(), ready["reason"].as_str()),
                (Some("True"), Some("ServingLastGood"))
            );
            assert!(ready["message"].as_str().unwrap().contains(v.as_str()));
            assert_eq!(status["version"], v.as_str());
            assert_eq!(status["sequence"], 2);
            assert_eq!(
                status["expiresAt"],
                (later + SignedDuration::from_hours(24)).to_string()
            );
            assert_eq!(status["observedGeneration"], 3);
            st.echo_status(profile_json());
            let mut c = out.lock().unwrap();
            c.configmap = Some(cm2);
            c.status = Some(status);
        },
    )
    .await
    .unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(16 * 3600))
    );
    let c = Arc::try_unwrap(captured)
        .ok()
        .unwrap()
        .into_inner()
        .unwrap();

    // An hour after the re-sign, still invalid, nothing changed: one read,
    // no apply, no event, no status patch; back in 15h.
    let status: PolicyProfileStatus = serde_json::from_value(c.status.unwrap()).unwrap();
    let cm2 = c.configmap.unwrap();
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), later + SignedDuration::from_hours(1));
    let action = run(
        profile::reconcile(Arc::new(invalid_profile(3, status)), ctx),
        async move {
            server
                .expect(Method::GET, CM_BUNDLE)
                .await
                .respond(200, cm2);
        },
    )
    .await
    .unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(15 * 3600))
    );
    // The re-signed version is recorded like any publication.
    assert!(
        store
            .profiles()
            .list_profile_versions(Some("safe-coding"))
            .await
            .unwrap()
            .iter()
            .all(|v| v.load.policy_version == good_version)
    );
}

/// `cm` with its envelope replaced by a bundle for `name` signed by `key`.
fn with_envelope(
    cm: &Value,
    key: &toolgate_bundle::SigningKey,
    name: &str,
    seq: u64,
    allow_all: bool,
) -> Value {
    let mut spec: toolgate_policy::PolicySpec = profile(1, true).spec.into();
    if allow_all {
        spec.mode = toolgate_policy::Mode::AllowAll;
    }
    let (_, bytes) = toolgate_bundle::build(
        toolgate_bundle::BundleInput {
            profile: toolgate_bundle::ProfileRef {
                name: name.into(),
                namespace: Some(NS.into()),
            },
            spec,
            grants: vec![],
            sequence: seq,
            issued_at: now(),
            expires_at: now() + SignedDuration::from_hours(24),
        },
        key,
    )
    .unwrap();
    let mut cm = cm.clone();
    cm["data"]["bundle.json"] = json!(String::from_utf8(bytes).unwrap());
    cm
}

/// With an invalid spec, whatever the ConfigMap holds is only re-signed if
/// it verifies with the controller's key, is for this profile and is not
/// older than the bundle the status recorded.
#[tokio::test]
async fn a_tampered_or_replayed_configmap_is_never_resigned() {
    let (client, server) = mock_client();
    let store = store().await;
    let c = create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    let cm = c.configmap.unwrap();
    let good: PolicyProfileStatus = serde_json::from_value(c.status.unwrap()).unwrap();

    let attacker = toolgate_bundle::SigningKey::from_seed(&[7; 32]);
    let mut at_seq_2 = good.clone();
    at_seq_2.sequence = Some(2);
    at_seq_2.bundle_digest = Some(format!("sha256:{}", "0".repeat(64)));
    let mut altered = cm.clone();
    altered["data"]["bundle.json"] = json!(cm["data"]["bundle.json"].as_str().unwrap().replacen(
        "\"sig\":\"",
        "\"sig\":\"AAAA",
        1
    ));
    let cases = [
        // Signed by another key, allow-all, a high sequence.
        (
            "forged",
            with_envelope(&cm, &attacker, "safe-coding", 99, true),
            good.clone(),
            "bundle_unknown_key",
        ),
        // Our signature, bytes altered.
        ("altered", altered, good.clone(), "bundle_"),
        // Ours, but another profile's bundle copied in.
        (
            "other profile",
            with_envelope(&cm, &key(), "other", 5, true),
            good.clone(),
            "profile agents/other",
        ),
        // Ours and for this profile, but older than what the status recorded.
        ("replayed", cm.clone(), at_seq_2, "bundle_rollback"),
    ];
    for (case, tampered, status, why) in cases {
        let (client, mut server) = mock_client();
        let ctx = context(
            client,
            store.clone(),
            now() + SignedDuration::from_hours(17),
        );
        ctx.mark_trusted(NS);
        let recorded_sequence = status.sequence;
        let action = run(
            profile::reconcile(Arc::new(invalid_profile(3, status)), ctx),
            async move {
                server
                    .expect(Method::GET, CM_BUNDLE)
                    .await
                    .respond(200, tampered);
                // No approvals list, no apply: straight to the report.
                assert_eq!(server.event().await["reason"], "InvalidSpec");
                let ev = server.event().await;
                assert_eq!(
                    (ev["type"].as_str(), ev["reason"].as_str()),
                    (Some("Warning"), Some("LastGoodRejected")),
                    "{case}"
                );
                assert!(ev["note"].as_str().unwrap().contains(why), "{case}: {ev}");
                let st = expect_status(&mut server).await;
                let status = &st.body["status"];
                let ready = cond(status, "Ready");
                assert_eq!(
                    (ready["status"].as_str(), ready["reason"].as_str()),
                    (Some("False"), Some("LastGoodUnusable")),
                    "{case}"
                );
                assert_eq!(status["sequence"].as_u64(), recorded_sequence, "{case}");
                st.echo_status(profile_json());
            },
        )
        .await
        .unwrap();
        assert_eq!(
            action,
            kube::runtime::controller::Action::await_change(),
            "{case}"
        );
    }
}
