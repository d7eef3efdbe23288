//! Publishing a PolicyProfile against a `tower-test` mock API server: the
//! finalizer, the first signed bundle and its status, re-signing near
//! expiry, updates, approved grants and deletion. Each scenario asserts the
//! method, path and body of every request the reconciler makes.

use std::sync::Arc;
use std::time::Duration;

use crate::common::approvals::{grant, grant_by};
use crate::common::publish::{CM_BUNDLE, cond, create, expect_status, trust_pem, verify_cm};
use crate::common::*;
use http::Method;
use jiff::SignedDuration;
use serde_json::json;
use toolgate_controller::crd::PolicyProfileStatus;
use toolgate_controller::profile;
use toolgate_store::Heartbeat;

#[tokio::test]
async fn adds_the_finalizer_first() {
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    let p = profile(1, false);
    let action = run(profile::reconcile(Arc::new(p.clone()), ctx), async move {
        let r = server
            .expect(Method::PATCH, &format!("{PROFILES}/safe-coding"))
            .await;
        assert_eq!(r.content_type, "application/json-patch+json");
        assert_eq!(
            r.body[1],
            json!({"op": "add", "path": "/metadata/finalizers", "value": ["toolgate.dev/cleanup"]})
        );
        let mut obj = serde_json::to_value(profile(1, true)).unwrap();
        obj["metadata"]["resourceVersion"] = json!("2");
        r.respond(200, obj);
    })
    .await
    .unwrap();
    assert_eq!(action, kube::runtime::controller::Action::await_change());
}

#[tokio::test]
async fn create_publishes_a_verifiable_bundle_and_status() {
    let (client, server) = mock_client();
    let store = store().await;
    // One pod on an older version: the fleet shows it stale.
    store
        .heartbeats()
        .record_heartbeat(&Heartbeat {
            pod_name: "agent-0".into(),
            pod_namespace: NS.into(),
            profile: "safe-coding".into(),
            policy_version: "safe-coding@old".into(),
            sequence: 0,
            last_seen: now() - SignedDuration::from_secs(5),
            shadow: None,
        })
        .await
        .unwrap();
    let ctx = context(client, store.clone(), now());
    let c = create(ctx, server, profile(1, true)).await;
    let status = c.status.unwrap();
    assert_eq!(
        status["fleet"],
        json!({"current": 0, "stale": 1, "total": 1})
    );
    assert_eq!(cond(&status, "Stale")["status"], "True");
    assert!(
        cond(&status, "Stale")["message"]
            .as_str()
            .unwrap()
            .contains("agents/agent-0")
    );
    // The version is recorded in the store.
    let versions = store
        .profiles()
        .list_profile_versions(Some("safe-coding"))
        .await
        .unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(
        versions[0].load.policy_version,
        status["version"].as_str().unwrap()
    );
    assert_eq!(
        versions[0].load.bundle_digest.as_deref(),
        status["bundleDigest"].as_str()
    );
}

/// Feeds the published ConfigMap and status back in: same content → no new
/// bundle; 17h later (less than a third of 24h left) → re-signed, sequence 2.
#[tokio::test]
async fn same_content_is_not_resigned_until_close_to_expiry() {
    let (client, server) = mock_client();
    let store = store().await;
    let c = create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    let cm = c.configmap.unwrap();
    let mut p = profile(1, true);
    p.status = Some(serde_json::from_value::<PolicyProfileStatus>(c.status.unwrap()).unwrap());

    // An hour later: nothing to do but look (no apply, no status patch).
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now() + SignedDuration::from_hours(1));
    ctx.mark_trusted(NS);
    let cm2 = cm.clone();
    let action = run(profile::reconcile(Arc::new(p.clone()), ctx), async move {
        server
            .expect(Method::GET, APPROVALS)
            .await
            .respond(200, list(vec![]));
        server
            .expect(Method::GET, CM_BUNDLE)
            .await
            .respond(200, cm2);
    })
    .await
    .unwrap();
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(60))
    );

    // 17 hours later: re-signed with the next sequence, same version.
    let later = now() + SignedDuration::from_hours(17);
    let (client, mut server) = mock_client();
    let ctx = context(client, store, later);
    ctx.mark_trusted(NS);
    run(profile::reconcile(Arc::new(p), ctx), async move {
        server
            .expect(Method::GET, APPROVALS)
            .await
            .respond(200, list(vec![]));
        server
            .expect(Method::GET, CM_BUNDLE)
            .await
            .respond(200, cm.clone());
        let apply = server.expect(Method::PATCH, CM_BUNDLE).await;
        let v = verify_cm(&apply.body, &trust_pem(), later);
        assert_eq!(v.sequence(), 2);
        assert_eq!(
            v.policy_version(),
            cm["metadata"]["annotations"]["toolgate.dev/policy-version"]
        );
        assert_eq!(v.expires_at(), later + SignedDuration::from_hours(24));
        apply.echo();
        assert_eq!(server.event().await["reason"], "Resigned");
        let st = expect_status(&mut server).await;
        assert_eq!(st.body["status"]["sequence"], 2);
        st.echo_status(profile_json());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn update_publishes_a_new_version_with_the_next_sequence() {
    let (client, server) = mock_client();
    let store = store().await;
    let c = create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    let cm = c.configmap.unwrap();
    let old_status: PolicyProfileStatus = serde_json::from_value(c.status.unwrap()).unwrap();
    let old_version = old_status.version.clone().unwrap();

    let mut p = profile(2, true);
    p.spec
        .rules
        .get_mut("bash")
        .unwrap()
        .allow
        .push("make test".into());
    p.status = Some(old_status);
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now() + SignedDuration::from_mins(5));
    ctx.mark_trusted(NS);
    run(profile::reconcile(Arc::new(p), ctx), async move {
        server
            .expect(Method::GET, APPROVALS)
            .await
            .respond(200, list(vec![]));
        server.expect(Method::GET, CM_BUNDLE).await.respond(200, cm);
        let apply = server.expect(Method::PATCH, CM_BUNDLE).await;
        let v = verify_cm(&apply.body, &trust_pem(), now());
        assert_eq!(v.sequence(), 2);
        assert_ne!(v.policy_version(), old_version);
        assert!(
            v.document().spec.rules["bash"]
                .allow
                .contains(&"make test".to_owned())
        );
        let new_version = v.policy_version().to_owned();
        apply.echo();
        assert_eq!(server.event().await["reason"], "Published");
        let st = expect_status(&mut server).await;
        assert_eq!(st.body["status"]["version"], new_version.as_str());
        assert_eq!(st.body["status"]["sequence"], 2);
        assert_eq!(st.body["status"]["observedGeneration"], 2);
        st.echo_status(profile_json());
    })
    .await
    .unwrap();
    assert_eq!(
        store
            .profiles()
            .list_profile_versions(Some("safe-coding"))
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn an_approved_grant_produces_a_new_version() {
    let (client, server) = mock_client();
    let store = store().await;
    let c = create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    let cm = c.configmap.unwrap();
    let mut p = profile(1, true);
    p.status = Some(serde_json::from_value(c.status.unwrap()).unwrap());
    let old_version = p.status.as_ref().unwrap().version.clone().unwrap();

    let (client, mut server) = mock_client();
    let ctx = context(client, store, now());
    ctx.mark_trusted(NS);
    let action = run(profile::reconcile(Arc::new(p), ctx), async move {
        server.expect(Method::GET, APPROVALS).await.respond(
            200,
            list(vec![
                grant("g-active", Some("approved"), "2030-01-01T06:00:00Z"),
                grant("g-pending", None, "2030-01-02T00:00:00Z"),
                grant("g-expired", Some("approved"), "2029-12-31T00:00:00Z"),
                grant("g-denied", Some("denied"), "2030-01-02T00:00:00Z"),
                // Approved, but by someone the approvers list does not name:
                // a requester approving their own `bash *` grant.
                {
                    let mut g = grant_by(
                        "g-self-approved",
                        Some("approved"),
                        "2030-01-02T00:00:00Z",
                        "mallory",
                        &["system:authenticated"],
                    );
                    g["spec"]["grant"]["glob"] = json!("*");
                    g
                },
            ]),
        );
        server.expect(Method::GET, CM_BUNDLE).await.respond(200, cm);
        let apply = server.expect(Method::PATCH, CM_BUNDLE).await;
        let v = verify_cm(&apply.body, &trust_pem(), now());
        assert_eq!(v.sequence(), 2);
        assert_ne!(v.policy_version(), old_version);
        let grants = &v.document().grants;
        assert_eq!(
            grants.len(),
            1,
            "only the unexpired grant approved by an allowed approver"
        );
        assert_eq!(
            (grants[0].tool.as_str(), grants[0].glob.as_str()),
            ("bash", "make *")
        );
        apply.echo();
        server.event().await;
        let st = expect_status(&mut server).await;
        assert_eq!(st.body["status"]["grants"], 1);
        st.echo_status(profile_json());
    })
    .await
    .unwrap();
    // Wakes up when the grant expires (6h), before the fleet refresh? No: the
    // fleet refresh (60s) comes first.
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(60))
    );
}

#[tokio::test]
async fn deletion_removes_the_configmap_and_the_finalizer() {
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    let mut p = profile(1, true);
    p.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    run(profile::reconcile(Arc::new(p.clone()), ctx), async move {
        server.expect(Method::DELETE, CM_BUNDLE).await.respond(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        );
        assert_eq!(server.event().await["reason"], "Deleted");
        let r = server
            .expect(Method::PATCH, &format!("{PROFILES}/safe-coding"))
            .await;
        assert_eq!(r.content_type, "application/json-patch+json");
        assert_eq!(
            r.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "toolgate.dev/cleanup"},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ])
        );
        let mut obj = serde_json::to_value(&p).unwrap();
        obj["metadata"]["finalizers"] = json!([]);
        r.respond(200, obj);
    })
    .await
    .unwrap();
}
