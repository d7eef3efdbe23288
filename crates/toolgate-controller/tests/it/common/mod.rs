//! A `tower-test` mock API server (kube-rs `controller-rs` style) and fixtures.

pub mod approvals;
pub mod publish;
pub mod rbac;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use jiff::Timestamp;
use kube::client::Body;
use serde_json::{Value, json};
use toolgate_bundle::SigningKey;
use toolgate_controller::approval::Placement;
use toolgate_controller::crd::PolicyProfile;
use toolgate_controller::metrics::Metrics;
use toolgate_controller::{Context, Settings};
use toolgate_store::Store;

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub const NS: &str = "agents";
pub const PROFILES: &str = "/apis/toolgate.dev/v1alpha1/namespaces/agents/policyprofiles";
pub const APPROVALS: &str = "/apis/toolgate.dev/v1alpha1/namespaces/agents/approvals";
pub const CONFIGMAPS: &str = "/api/v1/namespaces/agents/configmaps";
pub const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/agents/events";

/// One request the scenario received.
pub struct Received {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
    send: tower_test::mock::SendResponse<Response<Body>>,
}

impl Received {
    pub fn respond(self, status: u16, body: Value) {
        self.send.send_response(
            Response::builder()
                .status(StatusCode::from_u16(status).unwrap())
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
    }

    /// Echo the request body back (what an API server does on create/apply).
    pub fn echo(self) {
        let body = self.body.clone();
        self.respond(200, body);
    }

    /// Answers a status patch with `base` carrying the patched status.
    pub fn echo_status(self, mut base: Value) {
        base["status"] = self.body["status"].clone();
        self.respond(200, base);
    }

    pub fn not_found(self) {
        self.respond(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
        );
    }
}

/// The mock API server side. Every request it receives is checked against
/// `rbac.yaml` ([`rbac::check_request`]) and recorded in `log`.
pub struct ApiServer(pub Handle, pub Arc<Mutex<Vec<rbac::Access>>>);

impl ApiServer {
    /// The RBAC accesses of the requests this server received so far.
    pub fn accesses(&self) -> Vec<rbac::Access> {
        self.1.lock().unwrap().clone()
    }

    /// Next request, whatever it is (RBAC-checked and recorded).
    pub async fn next(&mut self, waiting_for: &str) -> Received {
        let (request, send) = tokio::time::timeout(Duration::from_secs(5), self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {waiting_for}"))
            .expect("service not called");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        let got = Received {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or("").to_owned(),
            content_type: parts
                .headers
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default(),
            body,
            send,
        };
        let access = rbac::check_request(&got.method, &got.path, &got.query);
        self.1.lock().unwrap().push(access);
        got
    }

    /// Next request, asserting method and path.
    pub async fn expect(&mut self, method: Method, path: &str) -> Received {
        let got = self.next(&format!("{method} {path}")).await;
        assert_eq!(
            (&got.method, got.path.as_str()),
            (&method, path),
            "unexpected request {} {}?{} body={}",
            got.method,
            got.path,
            got.query,
            got.body
        );
        got
    }

    /// Answers an Events POST (the recorder's), returning the event body.
    pub async fn event(&mut self) -> Value {
        let r = self.expect(Method::POST, EVENTS).await;
        let body = r.body.clone();
        r.echo();
        body
    }
}

/// A mocked client plus its server side.
pub fn mock_client() -> (kube::Client, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (
        kube::Client::new(service, NS),
        ApiServer(handle, Arc::new(Mutex::new(Vec::new()))),
    )
}

pub const NOW: &str = "2030-01-01T00:00:00Z";

pub fn now() -> Timestamp {
    NOW.parse().unwrap()
}

pub fn key() -> SigningKey {
    SigningKey::from_seed(&[42; 32])
}

pub async fn store() -> Store {
    Store::connect("sqlite::memory:").await.unwrap()
}

/// A context on the mock client with a pinned clock, request Approvals in
/// one queue, `NS`.
pub fn context(client: kube::Client, store: Store, at: Timestamp) -> Arc<Context> {
    context_placed(client, store, at, Placement::central(NS))
}

/// [`context`] with request Approvals placed by `approvals`.
pub fn context_placed(
    client: kube::Client,
    store: Store,
    at: Timestamp,
    approvals: Placement,
) -> Arc<Context> {
    let mut settings = Settings::new("toolgate-system");
    settings.approvals = approvals;
    Arc::new(
        Context::new(client, store, key(), Metrics::new(), settings)
            .with_clock(Arc::new(move || at)),
    )
}

pub const SAFE_CODING: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/profiles/safe-coding.yaml"
));

/// The safe-coding example as the API server would return it.
pub fn profile(generation: i64, finalizer: bool) -> PolicyProfile {
    let mut p: PolicyProfile = serde_yaml::from_str(SAFE_CODING).unwrap();
    p.metadata.uid = Some("uid-safe-coding".into());
    p.metadata.resource_version = Some("1".into());
    p.metadata.generation = Some(generation);
    if finalizer {
        p.metadata.finalizers = Some(vec!["toolgate.dev/cleanup".into()]);
    }
    p
}

pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// Runs `fut` (the reconcile) and `scenario` (the API server) together.
pub async fn run<T, S>(fut: impl std::future::Future<Output = T>, scenario: S) -> T
where
    S: std::future::Future<Output = ()> + Send + 'static,
{
    let server = tokio::spawn(scenario);
    let out = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("reconcile timed out (an unexpected request?)");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("scenario timed out")
        .expect("scenario assertions failed");
    out
}

/// A PolicyProfile object to answer status patches with.
pub fn profile_json() -> Value {
    serde_json::to_value(profile(1, true)).unwrap()
}

/// An Approval object to answer status patches with.
pub fn approval_json(name: &str) -> Value {
    json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
           "metadata": {"name": name, "namespace": NS}, "spec": {}})
}

/// A status written by server-side apply: field manager
/// `toolgate-controller`, forced, the whole status in the body (so a field
/// the controller stops setting is removed, not left behind).
pub async fn expect_applied_status(server: &mut ApiServer, path: &str, kind: &str) -> Received {
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

/// The PostgreSQL of `TOOLGATE_TEST_DATABASE_URL`; `None` (skip) when it is
/// unset, except with `CI=true`, which must run against it.
pub fn database_url() -> Option<String> {
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => {
            eprintln!("SKIP: TOOLGATE_TEST_DATABASE_URL is not set");
            None
        }
    }
}

/// Decision `i` of run `run-1`, made at [`now`]: what the checkpoint and
/// archive suites append.
pub fn decision(i: usize) -> toolgate_store::DecisionRecord {
    toolgate_store::DecisionRecord {
        decision_id: format!("dec-{i}"),
        run_id: "run-1".into(),
        step_id: format!("step-{i}"),
        tool: "bash".into(),
        verdict: "allow".into(),
        reason: "allow_rule".into(),
        message: None,
        matched_rule: Some("bash:allow:git *".into()),
        policy_version: "safe-coding@0123456789ab".into(),
        risk: "high".into(),
        args_digest: format!("sha256:{i}"),
        call_digest: Some(format!("sha256:call-{i}")),
        definition_digest: None,
        created_at: now(),
    }
}
