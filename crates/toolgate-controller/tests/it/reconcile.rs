//! Reconcile tests against a `tower-test` mock API server: each scenario
//! asserts the method, path and body of every request the reconciler makes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
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

/// The profile's status, written by server-side apply.
async fn expect_status(server: &mut ApiServer) -> Received {
    expect_applied_status(server, STATUS, "PolicyProfile").await
}

/// A status written by server-side apply: field manager
/// `toolgate-controller`, forced, the whole status in the body (so a field
/// the controller stops setting is removed, not left behind).
async fn expect_applied_status(server: &mut ApiServer, path: &str, kind: &str) -> Received {
    let st = server.expect(Method::PATCH, path).await;
    assert_eq!(st.content_type, "application/apply-patch+yaml");
    assert!(
        st.query.contains("fieldManager=toolgate-controller") && st.query.contains("force=true"),
        "{}",
        st.query
    );
    assert_eq!(
        (st.body["apiVersion"].as_str(), st.body["kind"].as_str()),
        (Some("toolgate.dev/v1alpha1"), Some(kind))
    );
    st
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

        let st = expect_status(&mut server).await;
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

fn grant(name: &str, decision: Option<&str>, expires: &str) -> Value {
    grant_by(name, decision, expires, "bob", &["platform-oncall"])
}

/// A grant decided by `user` in `groups` (safe-coding's approvers are
/// `group:platform-oncall`).
fn grant_by(
    name: &str,
    decision: Option<&str>,
    expires: &str,
    user: &str,
    groups: &[&str],
) -> Value {
    let mut spec = json!({"grant": {"profile": "safe-coding", "tool": "bash", "glob": "make *", "subjects": ["*"], "expiresAt": expires}});
    if let Some(d) = decision {
        spec["decision"] = json!(d);
        spec["decidedBy"] = json!(user);
        spec["decidedByGroups"] = json!(groups);
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

async fn pending_row(store: &toolgate_store::Store, ttl: Duration) -> toolgate_store::Approval {
    store
        .approvals()
        .request(
            NewApproval {
                approval_id: Some("01J0APPROVAL".into()),
                invocation_id: "inv-1".into(),
                tenant: "team-a".into(),
                run_id: "run-1".into(),
                tool: "bash".into(),
                args_digest: "sha256:abc".into(),
                call_digest: None,
                policy_version: "safe-coding@0123456789ab+h01234567".into(),
                decision_id: "dec-1".into(),
                requested_by: "sidecar/agent-0".into(),
                ttl,
                action: None,
                preview: None,
            },
            jiff::Timestamp::now(),
        )
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
    let report = run(approval::sync_once(&ctx, &[], &[]), async move {
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
        let st =
            expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                .await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        assert_eq!(st.body["status"]["requestedBy"], "sidecar/agent-0");
        st.echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!(report.created, 1);

    // An approver of the profile approves: the row is resolved, the phase follows.
    let mut obj = approval::object_for(&row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Approved);
    obj.spec.reason = Some("looks fine".into());
    obj.spec.decided_by = Some("carol".into());
    obj.spec.decided_by_groups = Some(vec!["platform-oncall".into()]);
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
            if round == 0 {
                // The approvers check reads the profile (pending row only).
                server
                    .expect(Method::GET, TEAM_A_PROFILE)
                    .await
                    .respond(200, profile_json());
            }
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            assert_eq!(st.body["status"]["message"], "approved by carol");
            st.echo_status(approval_json(&n2));
        })
        .await
        .unwrap();
    }
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, DbStatus::Approved);
    assert_eq!(db.resolved_by.as_deref(), Some("carol"));
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
        let st = expect_applied_status(
            &mut server,
            &format!("{APPROVALS}/{name}/status"),
            "Approval",
        )
        .await;
        assert_eq!(st.body["status"]["phase"], "Expired");
        st.echo_status(approval_json(&name));
    })
    .await
    .unwrap();
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
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
    let report = run(
        approval::sync_once(&ctx, &[Arc::new(obj)], &[]),
        async move {
            let st = expect_applied_status(
                &mut server,
                &format!("{APPROVALS}/{name}/status"),
                "Approval",
            )
            .await;
            assert_eq!(st.body["status"]["phase"], "Expired");
            st.echo_status(approval_json(&name));
        },
    )
    .await
    .unwrap();
    assert_eq!((report.expired, report.updated, report.created), (1, 1, 0));
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
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
        // The approvers check reads the grant's profile.
        server
            .expect(Method::GET, &format!("{PROFILES}/safe-coding"))
            .await
            .respond(200, profile_json());
        let st =
            expect_applied_status(&mut server, &format!("{APPROVALS}/g/status"), "Approval").await;
        assert_eq!(st.body["status"]["phase"], "Approved");
        assert_eq!(st.body["status"]["profile"], "safe-coding");
        assert!(st.body["status"]["finishedAt"].is_string());
        st.echo_status(approval_json("g"));
    })
    .await
    .unwrap();

    // A grant its requester approved without being an approver stays
    // Pending and says why.
    let a: Approval = serde_json::from_value(grant_by(
        "g",
        Some("approved"),
        "2030-01-02T00:00:00Z",
        "mallory",
        &[],
    ))
    .unwrap();
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    run(approval::reconcile(Arc::new(a), ctx), async move {
        server
            .expect(Method::GET, &format!("{PROFILES}/safe-coding"))
            .await
            .respond(200, profile_json());
        let st =
            expect_applied_status(&mut server, &format!("{APPROVALS}/g/status"), "Approval").await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        let message = st.body["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("ApproverNotAllowed: `mallory`"),
            "{message}"
        );
        assert!(st.body["status"].get("finishedAt").is_none());
        st.echo_status(approval_json("g"));
    })
    .await
    .unwrap();
}

// ------------------------------------------------ invalid spec: last good stays fresh

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

// ------------------------------------------------------------- fleet by namespace

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

// ------------------------------------------------------------------- approvers

/// The profile every escalation of `pending_row` (tenant team-a) answers to.
const TEAM_A_PROFILE: &str =
    "/apis/toolgate.dev/v1alpha1/namespaces/team-a/policyprofiles/safe-coding";

/// Records that the controller published `version` of safe-coding in `ns`.
async fn record_version(store: &toolgate_store::Store, ns: &str, version: &str) {
    store
        .profiles()
        .record_profile_load(
            toolgate_store::ProfileLoad {
                profile: "safe-coding".into(),
                namespace: ns.into(),
                policy_version: version.into(),
                spec_sha256: "0".repeat(64),
                hardline_sha256: "1".repeat(64),
                bundle_digest: None,
                loaded_by: "toolgate-controller".into(),
            },
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
}

/// The mirrored request object for `row`, decided by `by` in `groups`.
fn decided(row: &toolgate_store::Approval, by: Option<&str>, groups: &[&str]) -> Approval {
    let mut obj = approval::object_for(row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Approved);
    obj.spec.decided_by = by.map(Into::into);
    obj.spec.decided_by_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    serde_json::from_value(as_object(&obj)).unwrap()
}

#[tokio::test]
async fn only_listed_approvers_can_resolve_a_request() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    // The profile that answers is the row's tenant's (team-a), not one in
    // the approvals namespace where the request object is, nor one in
    // another namespace that recorded the same version.
    record_version(&store, "team-b", &row.policy_version).await;
    let name = approval::approval_name(&row.id);

    // Refused: a stranger, nobody, and a user who is merely *named* like
    // the approvers group (the check used to compare usernames only).
    for (by, groups) in [
        (Some("mallory"), &["system:authenticated"][..]),
        (None, &[][..]),
        (Some("platform-oncall"), &[][..]),
    ] {
        let (client, mut server) = mock_client();
        let ctx = context(client, store.clone(), jiff::Timestamp::now());
        let n2 = name.clone();
        let action = run(
            approval::reconcile(Arc::new(decided(&row, by, groups)), ctx),
            async move {
                // safe-coding: approvers: [platform-oncall]
                server
                    .expect(Method::GET, TEAM_A_PROFILE)
                    .await
                    .respond(200, profile_json());
                let ev = server.event().await;
                assert_eq!(
                    (ev["type"].as_str(), ev["reason"].as_str()),
                    (Some("Warning"), Some("ApproverNotAllowed"))
                );
                let st = expect_applied_status(
                    &mut server,
                    &format!("{APPROVALS}/{n2}/status"),
                    "Approval",
                )
                .await;
                assert_eq!(st.body["status"]["phase"], "Pending");
                let msg = st.body["status"]["message"].as_str().unwrap();
                assert!(msg.starts_with("ApproverNotAllowed: "), "{msg}");
                assert!(msg.contains("platform-oncall"), "{msg}");
                st.echo_status(approval_json(&n2));
            },
        )
        .await
        .unwrap();
        assert_ne!(action, kube::runtime::controller::Action::await_change());
        let db = store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
            .await
            .unwrap();
        assert_eq!(
            db.status,
            DbStatus::Pending,
            "{by:?} must not resolve the row"
        );
    }

    // A member of the approvers group resolves it.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(
        approval::reconcile(
            Arc::new(decided(&row, Some("carol"), &["platform-oncall"])),
            ctx,
        ),
        async move {
            server
                .expect(Method::GET, TEAM_A_PROFILE)
                .await
                .respond(200, profile_json());
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            st.echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        (db.status, db.resolved_by.as_deref()),
        (DbStatus::Approved, Some("carol"))
    );
}

#[tokio::test]
async fn approvers_are_enforced_fail_closed() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    let mut open = profile(1, true);
    open.spec.approvals.as_mut().unwrap().approvers.clear();
    let open = serde_json::to_value(open).unwrap();

    // The row's tenant has no such profile: the decision is not recorded.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(
        approval::reconcile(Arc::new(decided(&row, Some("alice"), &[])), ctx),
        async move {
            server.expect(Method::GET, TEAM_A_PROFILE).await.not_found();
            assert_eq!(server.event().await["reason"], "ApproverNotAllowed");
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Pending");
            assert!(
                st.body["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("not found")
            );
            st.echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
            .await
            .unwrap()
            .status,
        DbStatus::Pending
    );

    // A profile with an empty approvers list lets anyone answer.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(
        approval::reconcile(Arc::new(decided(&row, Some("alice"), &[])), ctx),
        async move {
            server
                .expect(Method::GET, TEAM_A_PROFILE)
                .await
                .respond(200, open);
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            st.echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    assert!(approval::approver_allowed(&[], None, &[]));
    assert!(!approval::approver_allowed(&["a".into()], None, &[]));
    assert!(!approval::approver_allowed(&["a".into()], Some("A"), &[]));
    assert!(approval::approver_allowed(
        &["a".into(), "b".into()],
        Some("b"),
        &[]
    ));
}

// ------------------------------------------------------------------ RBAC coverage

use crate::common::rbac::{self, Access};

fn triple(group: &str, resource: &str, verb: &str) -> Access {
    Access {
        api_group: group.into(),
        resource: resource.into(),
        verb: verb.into(),
    }
}

#[test]
fn rbac_yaml_has_no_wildcards() {
    let rules = rbac::rules();
    assert!(!rules.is_empty());
    for rule in rules {
        for (field, list) in [
            ("apiGroups", &rule.api_groups),
            ("resources", &rule.resources),
            ("verbs", &rule.verbs),
        ] {
            assert!(!list.is_empty(), "empty {field} in {rule:?}");
            assert!(
                list.iter().all(|v| !v.contains('*')),
                "wildcard in {field} of {rule:?}"
            );
        }
    }
}

#[test]
fn requests_map_to_rbac_accesses() {
    let cases = [
        (
            Method::GET,
            "/apis/toolgate.dev/v1alpha1/policyprofiles",
            "limit=500",
            ("toolgate.dev", "policyprofiles", "list"),
        ),
        (
            Method::GET,
            "/apis/toolgate.dev/v1alpha1/policyprofiles",
            "watch=true&resourceVersion=1",
            ("toolgate.dev", "policyprofiles", "watch"),
        ),
        (
            Method::GET,
            "/api/v1/configmaps",
            "&watch=true&labelSelector=a%3Db",
            ("", "configmaps", "watch"),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/agents/configmaps/x",
            "",
            ("", "configmaps", "get"),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/agents/configmaps",
            "",
            ("", "configmaps", "list"),
        ),
        (
            Method::PATCH,
            "/apis/toolgate.dev/v1alpha1/namespaces/agents/policyprofiles/p/status",
            "",
            ("toolgate.dev", "policyprofiles/status", "patch"),
        ),
        (
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/agents/events",
            "",
            ("events.k8s.io", "events", "create"),
        ),
        (
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            "",
            ("coordination.k8s.io", "leases", "update"),
        ),
        (
            Method::DELETE,
            "/api/v1/namespaces/ns/secrets/s",
            "",
            ("", "secrets", "delete"),
        ),
        (
            Method::DELETE,
            "/api/v1/namespaces/ns/secrets",
            "",
            ("", "secrets", "deletecollection"),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/agents",
            "",
            ("", "namespaces", "get"),
        ),
    ];
    for (method, path, query, (g, r, v)) in cases {
        assert_eq!(
            rbac::access(&method, path, query).unwrap(),
            triple(g, r, v),
            "{method} {path}?{query}"
        );
    }
    assert!(rbac::access(&Method::GET, "/healthz", "").is_err());

    // An uncovered request is reported; covered ones are not.
    let delete_secret = rbac::access(
        &Method::DELETE,
        "/api/v1/namespaces/toolgate-system/secrets/toolgate-signing-key",
        "",
    )
    .unwrap();
    let get_secret = triple("", "secrets", "get");
    assert_eq!(
        rbac::uncovered(rbac::rules(), [&delete_secret, &get_secret]),
        vec![delete_secret]
    );
    // `policyprofiles` does not cover `policyprofiles/status`, and groups matter.
    let rules = rbac::parse_rules(
        "- apiGroups: [toolgate.dev]\n  resources: [policyprofiles]\n  verbs: [patch]\n",
    );
    assert!(!rbac::covered(
        &rules,
        &triple("toolgate.dev", "policyprofiles/status", "patch")
    ));
    assert!(!rbac::covered(
        &rules,
        &triple("", "policyprofiles", "patch")
    ));
    assert!(rbac::covered(
        &rules,
        &triple("toolgate.dev", "policyprofiles", "patch")
    ));
}

/// The harness itself fails a scenario whose reconciler makes a request
/// `rbac.yaml` does not grant.
#[tokio::test]
#[should_panic(expected = "rbac.yaml does not grant")]
async fn the_mock_api_fails_a_request_rbac_yaml_does_not_grant() {
    let (client, mut server) = mock_client();
    tokio::spawn(async move {
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client, "toolgate-system");
        let _ = api
            .delete("toolgate-signing-key", &Default::default())
            .await;
    });
    server.next("DELETE secret").await;
}

/// Runs `fut` while answering every request with `respond(method, path, body)`.
async fn serve<T>(
    server: &mut ApiServer,
    fut: impl std::future::Future<Output = T>,
    mut respond: impl FnMut(&Method, &str, &Value) -> (u16, Value),
) -> T {
    let mut fut = std::pin::pin!(tokio::time::timeout(Duration::from_secs(10), fut));
    loop {
        tokio::select! {
            out = &mut fut => return out.expect("scenario step timed out"),
            r = server.next("any request") => {
                let (code, body) = respond(&r.method, &r.path, &r.body);
                r.respond(code, body);
            }
        }
    }
}

fn not_found() -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

/// Every kind of API call the controller makes, against one mock API: the
/// controllers' watches, a profile's whole life, the key and trust set, the
/// leader lease, the approvals mirror and approvers check, Event series.
/// Every request must be covered by rbac.yaml (the harness checks each one),
/// and every rule of rbac.yaml must be exercised (nothing granted that the
/// controller never does).
#[tokio::test]
async fn every_api_request_the_controller_makes_is_covered_by_rbac_yaml() {
    let mut seen: Vec<Access> = Vec::new();
    let store = store().await;

    // 1. The controllers' list + watch of every watched kind, all namespaces.
    // Their own database: they are aborted below, possibly inside a query of
    // the approvals mirror, and the in-memory database lives in its one
    // connection, which the later steps must find intact.
    let (client, mut server) = mock_client();
    let ctx = context(client, crate::common::store().await, now());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let reconcilers = tokio::spawn(toolgate_controller::run_reconcilers(
        ctx,
        Duration::from_secs(3600),
        stop_rx,
    ));
    let mut held = Vec::new();
    let mut watches = std::collections::BTreeSet::new();
    while watches.len() < 4 {
        let r = server
            .next("the controllers' list and watch requests")
            .await;
        assert!(
            r.path.starts_with("/api/v1/configmaps")
                || r.path.starts_with("/apis/toolgate.dev/v1alpha1/"),
            "{} {}",
            r.method,
            r.path
        );
        if r.query.contains("watch=true") {
            // Keep the watch open.
            watches.insert(r.path.clone());
            held.push(r);
        } else {
            r.respond(200, list(vec![]));
        }
    }
    let _ = stop_tx.send(true);
    reconcilers.abort();
    drop(held);
    seen.extend(server.accesses());

    // 2. A profile's life: finalizer, publication, re-publication, deletion.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let p = profile(1, false);
    serve(
        &mut server,
        profile::reconcile(Arc::new(p), ctx),
        |_, _, _| {
            let mut obj = serde_json::to_value(profile(1, true)).unwrap();
            obj["metadata"]["resourceVersion"] = json!("2");
            (200, obj)
        },
    )
    .await
    .unwrap();
    seen.extend(server.accesses());
    let (client, server) = mock_client();
    let log = server.1.clone();
    create(
        context(client, store.clone(), now()),
        server,
        profile(1, true),
    )
    .await;
    seen.extend(log.lock().unwrap().iter().cloned());
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let mut p = profile(1, true);
    p.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    serve(
        &mut server,
        profile::reconcile(Arc::new(p.clone()), ctx),
        |m, _, b| match *m {
            Method::DELETE => (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ),
            Method::POST => (200, b.clone()),
            _ => {
                let mut obj = serde_json::to_value(&p).unwrap();
                obj["metadata"]["finalizers"] = json!([]);
                (200, obj)
            }
        },
    )
    .await
    .unwrap();
    seen.extend(server.accesses());

    // 3. An Event published twice is a series: create, then patch.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    ctx.mark_trusted(NS);
    let mut bad = profile(3, true);
    bad.spec.rules.insert("deploy".into(), Default::default());
    for _ in 0..2 {
        serve(
            &mut server,
            profile::reconcile(Arc::new(bad.clone()), ctx.clone()),
            |m, path, b| match (m, path) {
                (&Method::GET, _) => not_found(),
                (_, p) if p.ends_with("/status") => {
                    let mut obj = profile_json();
                    obj["status"] = b["status"].clone();
                    (200, obj)
                }
                _ => (200, b.clone()),
            },
        )
        .await
        .unwrap();
    }
    let accesses = server.accesses();
    assert!(
        accesses.contains(&triple("events.k8s.io", "events", "patch")),
        "{accesses:?}"
    );
    seen.extend(accesses);

    // 4. Signing key and trust set: create both, then update the trust set.
    let (client, mut server) = mock_client();
    let key = serve(
        &mut server,
        toolgate_controller::keys::ensure_signing_key(&client, "toolgate-system"),
        |m, _, b| {
            if *m == Method::GET {
                not_found()
            } else {
                (201, b.clone())
            }
        },
    )
    .await
    .unwrap();
    serve(
        &mut server,
        toolgate_controller::keys::ensure_trust(&client, "toolgate-system", &key),
        |m, _, b| {
            if *m == Method::GET {
                not_found()
            } else {
                (201, b.clone())
            }
        },
    )
    .await
    .unwrap();
    let other = toolgate_bundle::SigningKey::from_seed(&[9; 32]).public_key();
    let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "toolgate-trust", "namespace": "toolgate-system", "resourceVersion": "7"},
        "data": {"trust.pem": format!("# {}\n{}", other.key_id(), other.to_spki_pem().unwrap())}});
    serve(
        &mut server,
        toolgate_controller::keys::ensure_trust(&client, "toolgate-system", &key),
        |m, _, b| {
            if *m == Method::GET {
                (200, existing.clone())
            } else {
                (200, b.clone())
            }
        },
    )
    .await
    .unwrap();
    seen.extend(server.accesses());

    // 5. The leader lease: acquire (create), then renew (replace).
    let (client, mut server) = mock_client();
    let elector = toolgate_controller::leader::LeaderElector::new(
        client,
        "toolgate-system",
        "replica-a",
        Duration::from_secs(15),
    );
    let lease: Arc<Mutex<Option<Value>>> = Arc::default();
    for _ in 0..2 {
        let lease = lease.clone();
        let leads = serve(
            &mut server,
            elector.try_acquire_or_renew(),
            move |m, _, b| {
                let mut held = lease.lock().unwrap();
                match (m, held.as_ref()) {
                    (&Method::GET, None) => not_found(),
                    (&Method::GET, Some(l)) => (200, l.clone()),
                    _ => {
                        let mut l = b.clone();
                        l["metadata"]["resourceVersion"] = json!("1");
                        *held = Some(l.clone());
                        (200, l)
                    }
                }
            },
        )
        .await
        .unwrap();
        assert!(leads);
    }
    seen.extend(server.accesses());

    // 6. The approvals mirror creates an object; a decision reads the profile.
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let name = approval::approval_name(&row.id);
    serve(
        &mut server,
        approval::sync_once(&ctx, &[], &[]),
        |_, _, b| {
            let mut obj = approval_json(&name);
            if b.get("spec").is_some() {
                obj = b.clone();
            }
            obj["metadata"]["uid"] = json!("uid-apr");
            (201, obj)
        },
    )
    .await
    .unwrap();
    // 7. A finished object past its retention is deleted.
    let mut finished = approval::object_for(&row, NS);
    finished.status = Some(toolgate_controller::crd::ApprovalStatus {
        phase: Some(toolgate_controller::crd::Phase::Denied),
        profile: Some("safe-coding".into()),
        finished_at: Some("2000-01-01T00:00:00Z".into()),
        ..Default::default()
    });
    let report = serve(
        &mut server,
        approval::sync_once(&ctx, &[Arc::new(finished)], &[]),
        |_, _, _| (200, approval_json(&name)),
    )
    .await
    .unwrap();
    assert_eq!(report.deleted, 1);
    let name = approval::approval_name(&row.id);
    serve(
        &mut server,
        approval::reconcile(
            Arc::new(decided(&row, Some("carol"), &["platform-oncall"])),
            ctx,
        ),
        |m, _, _| {
            if *m == Method::GET {
                (200, profile_json())
            } else {
                (200, approval_json(&name))
            }
        },
    )
    .await
    .unwrap();
    seen.extend(server.accesses());

    // 9. A RunCancellation: recorded in the database, status patched, once.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let mut rc = toolgate_controller::cancellation::RunCancellation::new(
        "cancel-run-7",
        toolgate_controller::cancellation::RunCancellationSpec {
            // Recorded under the run's canonical spelling, `run-7`.
            run_id: Some("Run-7".into()),
            reason: Some("runaway".into()),
            ..Default::default()
        },
    );
    rc.metadata.namespace = Some("agents".into());
    let mut patched = None;
    serve(
        &mut server,
        toolgate_controller::cancellation::reconcile(Arc::new(rc.clone()), ctx.clone()),
        |m, path, body| {
            assert_eq!(*m, Method::PATCH, "{path}");
            assert_eq!(
                path,
                "/apis/toolgate.dev/v1alpha1/namespaces/agents/runcancellations/cancel-run-7/status"
            );
            patched = Some(body.clone());
            (200, serde_json::to_value(&rc).unwrap())
        },
    )
    .await
    .unwrap();
    let patched = patched.expect("status patched");
    assert_eq!(patched["status"]["phase"], "Applied", "{patched}");
    // Server-side apply (not a merge patch): the body names its kind.
    assert_eq!(patched["kind"], "RunCancellation", "{patched}");
    let run7 = toolgate_policy::RunId::parse("run-7").unwrap();
    let state = store.runs().state("agents", &run7).await.unwrap();
    assert_eq!(state.cancel_reason.as_deref(), Some("runaway"));
    assert_eq!(
        state.cancelled_by.as_deref(),
        Some("runcancellation:agents/cancel-run-7")
    );
    seen.extend(server.accesses());
    // Applied: nothing more to do, and no request made.
    rc.status = serde_json::from_value(patched["status"].clone()).unwrap();
    let (client, server) = mock_client();
    let log = server.1.clone();
    toolgate_controller::cancellation::reconcile(
        Arc::new(rc),
        context(client, store.clone(), now()),
    )
    .await
    .unwrap();
    assert!(log.lock().unwrap().is_empty());

    // Every request was covered (checked per request by the harness, and here
    // as a whole) ...
    assert_eq!(rbac::uncovered(rbac::rules(), &seen), Vec::<Access>::new());
    // ... and every granted (group, resource, verb) was used by some request.
    // `policyprofiles/finalizers update` is never a request: the API server
    // checks it when the bundle ConfigMap sets an ownerReference with
    // blockOwnerDeletion (OwnerReferencesPermissionEnforcement).
    let not_a_request = [triple(
        "toolgate.dev",
        "policyprofiles/finalizers",
        "update",
    )];
    let mut unused = Vec::new();
    for rule in rbac::rules() {
        for g in &rule.api_groups {
            for r in &rule.resources {
                for v in &rule.verbs {
                    let t = triple(g, r, v);
                    if !seen.contains(&t) && !not_a_request.contains(&t) {
                        unused.push(t.to_string());
                    }
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "rbac.yaml grants what no request in these scenarios uses: {unused:?}"
    );
}

#[tokio::test]
async fn request_approvals_outside_the_mirror_namespace_resolve_nothing() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    record_version(&store, NS, &row.policy_version).await;
    // A look-alike object in another namespace, naming the same row and an
    // allowed approver.
    let mut forged = decided(&row, Some("carol"), &["platform-oncall"]);
    forged.metadata.namespace = Some("elsewhere".into());
    let name = approval::approval_name(&row.id);
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(approval::reconcile(Arc::new(forged), ctx), async move {
        let st = server
            .expect(
                Method::PATCH,
                &format!("/apis/toolgate.dev/v1alpha1/namespaces/elsewhere/approvals/{n2}/status"),
            )
            .await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        let msg = st.body["status"]["message"].as_str().unwrap();
        assert!(msg.starts_with("ignored: "), "{msg}");
        st.echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, DbStatus::Pending, "the row is untouched");
}
