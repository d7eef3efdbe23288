//! Reconcile tests against a `tower-test` mock API server: each scenario
//! asserts the method, path and body of every request the reconciler makes.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use http::Method;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use toolgate_bundle::{TrustSet, VerifyOptions, verify};
use toolgate_controller::crd::{Approval, PolicyProfile, PolicyProfileStatus};
use toolgate_controller::{approval, profile};
use toolgate_store::{ApprovalStatus as DbStatus, Heartbeat, NewApproval};

const CM_BUNDLE: &str = "/api/v1/namespaces/agents/configmaps/toolgate-bundle-safe-coding";
const STATUS: &str =
    "/apis/toolgate.dev/v1alpha1/namespaces/agents/policyprofiles/safe-coding/status";

fn trust_pem() -> String {
    let k = key().public_key();
    format!("# {}\n{}", k.key_id(), k.to_spki_pem().unwrap())
}

/// Verifies the envelope in an applied bundle ConfigMap against `trust`.
fn verify_cm(cm: &Value, trust: &str, at: Timestamp) -> toolgate_bundle::VerifiedBundle {
    let envelope = cm["data"]["bundle.json"]
        .as_str()
        .expect("bundle.json in data");
    let trust = TrustSet::from_pem(trust).unwrap();
    verify(envelope.as_bytes(), &trust, &VerifyOptions::at(at)).expect("envelope verifies")
}

fn cond<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap_or_else(|| panic!("no {t} condition in {status}"))
}

#[derive(Default)]
struct Captured {
    configmap: Option<Value>,
    status: Option<Value>,
}

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

/// The create scenario: trust published, bundle applied and verifiable,
/// event, status. Returns what was applied.
async fn create(
    ctx: Arc<toolgate_controller::Context>,
    mut server: ApiServer,
    p: PolicyProfile,
) -> Captured {
    let captured = Arc::new(Mutex::new(Captured::default()));
    let out = captured.clone();
    let at = ctx.now();
    run(profile::reconcile(Arc::new(p), ctx), async move {
        server
            .expect(Method::GET, APPROVALS)
            .await
            .respond(200, list(vec![]));
        server
            .expect(Method::GET, &format!("{CONFIGMAPS}/toolgate-trust"))
            .await
            .not_found();
        let trust = server.expect(Method::POST, CONFIGMAPS).await;
        assert_eq!(trust.body["metadata"]["name"], "toolgate-trust");
        let pem = trust.body["data"]["trust.pem"].as_str().unwrap().to_owned();
        assert!(
            TrustSet::from_pem(&pem)
                .unwrap()
                .get(&key().key_id())
                .is_some()
        );
        trust.echo();
        server.expect(Method::GET, CM_BUNDLE).await.not_found();

        let apply = server.expect(Method::PATCH, CM_BUNDLE).await;
        assert_eq!(apply.content_type, "application/apply-patch+yaml");
        assert!(
            apply.query.contains("fieldManager=toolgate-controller")
                && apply.query.contains("force=true"),
            "{}",
            apply.query
        );
        let cm = apply.body.clone();
        let verified = verify_cm(&cm, &pem, at);
        assert_eq!(verified.sequence(), 1);
        assert_eq!(verified.document().profile.namespace.as_deref(), Some(NS));
        let ann = &cm["metadata"]["annotations"];
        assert_eq!(
            ann["toolgate.dev/policy-version"],
            verified.policy_version()
        );
        assert_eq!(ann["toolgate.dev/bundle-digest"], verified.digest());
        assert_eq!(ann["toolgate.dev/sequence"], "1");
        let owner = &cm["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                owner["kind"].as_str(),
                owner["uid"].as_str(),
                owner["controller"].as_bool()
            ),
            (Some("PolicyProfile"), Some("uid-safe-coding"), Some(true))
        );
        apply.echo();

        let ev = server.event().await;
        assert_eq!(ev["reason"], "Published");
        assert_eq!(ev["type"], "Normal");

        let st = server.expect(Method::PATCH, STATUS).await;
        assert_eq!(st.content_type, "application/merge-patch+json");
        let status = st.body["status"].clone();
        assert_eq!(status["version"], verified.policy_version());
        assert_eq!(status["bundleDigest"], verified.digest());
        assert_eq!(status["bundleRef"], "toolgate-bundle-safe-coding");
        assert_eq!(status["sequence"], 1);
        assert_eq!(status["observedGeneration"], 1);
        assert_eq!(
            (
                cond(&status, "Valid")["status"].as_str(),
                cond(&status, "Valid")["reason"].as_str()
            ),
            (Some("True"), Some("Compiled"))
        );
        assert_eq!(
            (
                cond(&status, "Ready")["status"].as_str(),
                cond(&status, "Ready")["reason"].as_str()
            ),
            (Some("True"), Some("Published"))
        );
        st.echo_status(profile_json());
        let mut c = out.lock().unwrap();
        c.configmap = Some(cm);
        c.status = Some(status);
    })
    .await
    .expect("reconcile succeeds");
    Arc::try_unwrap(captured)
        .ok()
        .unwrap()
        .into_inner()
        .unwrap()
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
        let st = server.expect(Method::PATCH, STATUS).await;
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
        let st = server.expect(Method::PATCH, STATUS).await;
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
    let action = run(profile::reconcile(Arc::new(p), ctx), async move {
        // No approvals list, no ConfigMap read or apply: straight to the rejection.
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
        let st = server.expect(Method::PATCH, STATUS).await;
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
        assert_eq!(cond(status, "Ready")["reason"], "LastGoodServed");
        // The last good version stays in the status.
        assert_eq!(status["version"], good_version.as_str());
        assert_eq!(status["sequence"], 1);
        assert_eq!(status["observedGeneration"], 3);
        st.echo_status(profile_json());
    })
    .await
    .unwrap();
    assert_eq!(action, kube::runtime::controller::Action::await_change());
}

fn grant(name: &str, decision: Option<&str>, expires: &str) -> Value {
    let mut spec = json!({"grant": {"profile": "safe-coding", "tool": "bash", "glob": "make *", "subjects": ["*"], "expiresAt": expires}});
    if let Some(d) = decision {
        spec["decision"] = json!(d);
    }
    json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
           "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": "1"},
           "spec": spec})
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
            ]),
        );
        server.expect(Method::GET, CM_BUNDLE).await.respond(200, cm);
        let apply = server.expect(Method::PATCH, CM_BUNDLE).await;
        let v = verify_cm(&apply.body, &trust_pem(), now());
        assert_eq!(v.sequence(), 2);
        assert_ne!(v.policy_version(), old_version);
        let grants = &v.document().grants;
        assert_eq!(grants.len(), 1, "only the approved, unexpired grant");
        assert_eq!(
            (grants[0].tool.as_str(), grants[0].glob.as_str()),
            ("bash", "make *")
        );
        apply.echo();
        server.event().await;
        let st = server.expect(Method::PATCH, STATUS).await;
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

async fn pending_row(store: &toolgate_store::Store, ttl: Duration) -> toolgate_store::Approval {
    store
        .approvals()
        .request(NewApproval {
            approval_id: Some("01J0APPROVAL".into()),
            invocation_id: "inv-1".into(),
            tenant: "team-a".into(),
            run_id: "run-1".into(),
            tool: "bash".into(),
            args_digest: "sha256:abc".into(),
            policy_version: "safe-coding@0123456789ab+h01234567".into(),
            decision_id: "dec-1".into(),
            requested_by: "sidecar/agent-0".into(),
            ttl,
        })
        .await
        .unwrap()
}

fn as_object(a: &Approval) -> Value {
    let mut v = serde_json::to_value(a).unwrap();
    v["metadata"]["uid"] = json!("uid-apr");
    v["metadata"]["resourceVersion"] = json!("1");
    v["metadata"]["generation"] = json!(1);
    v
}

#[tokio::test]
async fn mirror_creates_objects_and_a_decision_resolves_the_row() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    assert_eq!(
        name,
        "apr-01j0approval-".to_owned()
            + &toolgate_policy::digest::sha256_hex(row.id.as_bytes())[..8]
    );

    // Database → cluster.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    let report = run(approval::sync_once(&ctx, &[]), async move {
        let create = server.expect(Method::POST, APPROVALS).await;
        assert_eq!(create.body["metadata"]["name"], n2.as_str());
        let req = &create.body["spec"]["request"];
        assert_eq!(
            (
                req["approvalId"].as_str(),
                req["tenant"].as_str(),
                req["tool"].as_str()
            ),
            (Some("01J0APPROVAL"), Some("team-a"), Some("bash"))
        );
        assert_eq!(req["profile"], "safe-coding");
        assert!(create.body["spec"].get("decision").is_none());
        let mut obj = create.body.clone();
        obj["metadata"]["uid"] = json!("uid-apr");
        obj["metadata"]["generation"] = json!(1);
        create.respond(201, obj);
        let st = server
            .expect(Method::PATCH, &format!("{APPROVALS}/{n2}/status"))
            .await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        assert_eq!(st.body["status"]["requestedBy"], "sidecar/agent-0");
        st.echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!(report.created, 1);

    // A human approves: the row is resolved, the phase follows.
    let mut obj = approval::object_for(&row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Approved);
    obj.spec.reason = Some("looks fine".into());
    obj.spec.decided_by = Some("alice".into());
    let obj: Approval = serde_json::from_value(as_object(&obj)).unwrap();
    for round in 0..2 {
        // Twice: resolving is idempotent.
        let (client, mut server) = mock_client();
        let ctx = context(client, store.clone(), jiff::Timestamp::now());
        let n2 = name.clone();
        let mut o = obj.clone();
        if round == 1 {
            o.status = None;
        }
        run(approval::reconcile(Arc::new(o), ctx), async move {
            let st = server
                .expect(Method::PATCH, &format!("{APPROVALS}/{n2}/status"))
                .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            assert_eq!(st.body["status"]["message"], "approved by alice");
            st.echo_status(approval_json(&n2));
        })
        .await
        .unwrap();
    }
    let db = store.approvals().get("team-a", &row.id).await.unwrap();
    assert_eq!(db.status, DbStatus::Approved);
    assert_eq!(db.resolved_by.as_deref(), Some("alice"));
    assert_eq!(db.reason.as_deref(), Some("looks fine"));
}

#[tokio::test]
async fn a_denial_after_expiry_is_reported_as_expired() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut obj = approval::object_for(&row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Denied);
    let obj: Approval = serde_json::from_value(as_object(&obj)).unwrap();
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let name = obj.metadata.name.clone().unwrap();
    run(approval::reconcile(Arc::new(obj), ctx), async move {
        let st = server
            .expect(Method::PATCH, &format!("{APPROVALS}/{name}/status"))
            .await;
        assert_eq!(st.body["status"]["phase"], "Expired");
        st.echo_status(approval_json(&name));
    })
    .await
    .unwrap();
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id)
            .await
            .unwrap()
            .status,
        DbStatus::Expired
    );
}

#[tokio::test]
async fn expiry_moves_database_and_object_to_expired() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(60)).await;
    let mut obj = approval::object_for(&row, NS);
    obj.status = Some(approval::request_status(
        obj.spec.request.as_ref().unwrap(),
        Some(&row),
        toolgate_controller::crd::Phase::Pending,
        None,
        Some(1),
    ));
    let obj: Approval = serde_json::from_value(as_object(&obj)).unwrap();

    // Ten minutes later the sweep expires the row and the object follows.
    let (client, mut server) = mock_client();
    let ctx = context(
        client,
        store.clone(),
        jiff::Timestamp::now() + SignedDuration::from_mins(10),
    );
    let name = obj.metadata.name.clone().unwrap();
    let report = run(approval::sync_once(&ctx, &[Arc::new(obj)]), async move {
        let st = server
            .expect(Method::PATCH, &format!("{APPROVALS}/{name}/status"))
            .await;
        assert_eq!(st.body["status"]["phase"], "Expired");
        st.echo_status(approval_json(&name));
    })
    .await
    .unwrap();
    assert_eq!((report.expired, report.updated, report.created), (1, 1, 0));
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id)
            .await
            .unwrap()
            .status,
        DbStatus::Expired
    );
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains(r#"toolgate_approvals{phase="Pending"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn grant_objects_map_to_their_profile() {
    let a: Approval =
        serde_json::from_value(grant("g", Some("approved"), "2030-01-02T00:00:00Z")).unwrap();
    let r = approval::grant_profile_ref(&a).unwrap();
    assert_eq!(
        (r.name.as_str(), r.namespace.as_deref()),
        ("safe-coding", Some(NS))
    );
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    run(approval::reconcile(Arc::new(a), ctx), async move {
        let st = server
            .expect(Method::PATCH, &format!("{APPROVALS}/g/status"))
            .await;
        assert_eq!(st.body["status"]["phase"], "Approved");
        assert_eq!(st.body["status"]["profile"], "safe-coding");
        st.echo_status(approval_json("g"));
    })
    .await
    .unwrap();
}
