//! The profile publication scenario (`create`) and the checks on what it
//! publishes: the bundle ConfigMap's envelope, the status and its conditions.

use std::sync::{Arc, Mutex};

use http::Method;
use jiff::Timestamp;
use serde_json::Value;
use toolgate_bundle::{TrustSet, VerifyOptions, verify};
use toolgate_controller::crd::PolicyProfile;
use toolgate_controller::profile;

use super::*;

pub const CM_BUNDLE: &str = "/api/v1/namespaces/agents/configmaps/toolgate-bundle-safe-coding";

pub const STATUS: &str =
    "/apis/toolgate.dev/v1alpha1/namespaces/agents/policyprofiles/safe-coding/status";

pub fn trust_pem() -> String {
    let k = key().public_key();
    format!("# {}\n{}", k.key_id(), k.to_spki_pem().unwrap())
}

/// Verifies the envelope in an applied bundle ConfigMap against `trust`.
pub fn verify_cm(cm: &Value, trust: &str, at: Timestamp) -> toolgate_bundle::VerifiedBundle {
    let envelope = cm["data"]["bundle.json"]
        .as_str()
        .expect("bundle.json in data");
    let trust = TrustSet::from_pem(trust).unwrap();
    verify(envelope.as_bytes(), &trust, &VerifyOptions::at(at)).expect("envelope verifies")
}

pub fn cond<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap_or_else(|| panic!("no {t} condition in {status}"))
}

/// The profile's status, written by server-side apply.
pub async fn expect_status(server: &mut ApiServer) -> Received {
    expect_applied_status(server, STATUS, "PolicyProfile").await
}

#[derive(Default)]
pub struct Captured {
    pub configmap: Option<Value>,
    pub status: Option<Value>,
}

/// The create scenario: trust published, bundle applied and verifiable,
/// event, status. Returns what was applied.
pub async fn create(
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
