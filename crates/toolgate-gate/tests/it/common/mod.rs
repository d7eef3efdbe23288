//! Fixtures: signed bundles, the database backends every test runs on, and
//! a [`Gate`] built as the sidecar builds one, spoken to in process.
//!
//! Every test runs on a SQLite file and on the PostgreSQL of
//! `TOOLGATE_TEST_DATABASE_URL` (required when `CI=true`, as in the
//! sidecar's and the store's suites). Tests on one PostgreSQL share it:
//! each gate serves a tenant of its own and each bundle names a namespace
//! of its own.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value};
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_gate::{
    AuthorizeRequest, AuthorizeResponse, DecisionLog, Gate, GateParts, Metrics, PolicyState,
    Workspaces,
};
use toolgate_policy::{Decision, Id, Reason, RunId};
use toolgate_store::{Approval, ApprovalDecision, ChainedDecision, DecisionRecord, Store};

/// The policy most tests enforce: bash commands tiered (`mkfs` allowed by
/// a rule but hardline), a low-risk reader, `deploy` that escalates
/// everything, a pinned `fs.read`, and `.env` paths hardline.
pub const SPEC: &str = r#"
mode: rules
rules:
  bash: {deny: ["rm *"], allow: ["ls*", "git status", "mkfs*"], escalate: ["*"]}
  reader: {allow: ["*"]}
  deploy: {escalate: ["*"]}
  fs.read: {allow: ["*"]}
hardline: {paths: ["**/.env"], commands: ["mkfs*"]}
effects:
  bash: {sideEffect: PROCESS_EXEC, risk: high}
  reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  deploy: {sideEffect: EXTERNAL_WRITE, risk: write}
  fs.read: {sideEffect: WORKSPACE_READ, risk: low, definitionDigest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
approvals: {ttlSeconds: 600}
"#;

/// [`SPEC`] with `budgets` added (`"{maxCallsPerRun: 2}"`, say).
pub fn with_budgets(budgets: &str) -> String {
    format!("{SPEC}budgets: {budgets}\n")
}

pub fn key() -> SigningKey {
    SigningKey::from_seed(&[42; 32])
}

pub fn trust_pem() -> Vec<u8> {
    key().public_key().to_spki_pem().unwrap().into_bytes()
}

/// A name no other test (nor another run of this suite) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// Signed envelope bytes for `spec_yaml` as publication `sequence` of
/// profile `coding` in `namespace`, valid from `issued_at` to `expires_at`.
pub fn bundle(
    spec_yaml: &str,
    namespace: &str,
    sequence: u64,
    issued_at: Timestamp,
    expires_at: Timestamp,
) -> Vec<u8> {
    let spec = toolgate_policy::load::from_str(spec_yaml).unwrap();
    let (_, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: "coding".into(),
                namespace: Some(namespace.to_owned()),
            },
            spec,
            grants: vec![],
            sequence,
            issued_at,
            expires_at,
        },
        &key(),
    )
    .unwrap();
    bytes
}

/// [`bundle`]'s first publication, in a namespace of its own.
pub fn bundle_between(spec_yaml: &str, issued_at: Timestamp, expires_at: Timestamp) -> Vec<u8> {
    bundle(spec_yaml, &unique("agents"), 1, issued_at, expires_at)
}

/// The database URLs every test runs against: a SQLite file in `dir`, and
/// PostgreSQL when `TOOLGATE_TEST_DATABASE_URL` is set (required when
/// `CI=true`: the PostgreSQL variant then fails rather than skips).
pub fn backends(dir: &Path) -> Vec<(String, String)> {
    let mut out = vec![(
        "sqlite".to_owned(),
        format!("sqlite://{}?mode=rwc", dir.join("toolgate.db").display()),
    )];
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => out.push(("postgres".to_owned(), url)),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => eprintln!("SKIP postgres variant: TOOLGATE_TEST_DATABASE_URL is not set"),
    }
    out
}

/// The bundle a [`TestGate`] starts with.
pub enum Bundle<'a> {
    /// None at all: every call is `no_bundle`.
    None,
    /// `spec`, valid for a day.
    Live(&'a str),
    /// `spec`, loaded while it was valid and expired an hour ago.
    Expired(&'a str),
}

/// A gate as one sidecar holds it, with the store it writes to.
pub struct TestGate {
    pub gate: Arc<Gate>,
    /// The bundle state the gate enforces, for reloads.
    pub policy: Arc<PolicyState>,
    pub store: Store,
    pub tenant: String,
    /// The workspace base: runs' files are under `BASE/TENANT/RUN`.
    pub workspaces: tempfile::TempDir,
}

impl TestGate {
    /// A gate of a tenant of its own on the database at `url`.
    pub async fn start(url: &str, bundle: Bundle<'_>) -> Self {
        Self::start_as(url, bundle, &unique("t"), "pod-a").await
    }

    /// A gate serving `tenant` for `pod` (several sidecars of one tenant).
    pub async fn start_as(url: &str, bundle: Bundle<'_>, tenant: &str, pod: &str) -> Self {
        let store = Store::connect(url).await.expect("connect test database");
        let metrics = Metrics::new();
        let policy = Arc::new(PolicyState::new(metrics.clone()));
        let now = Timestamp::now();
        let hour = SignedDuration::from_hours(1);
        let (bytes, loaded_at) = match bundle {
            Bundle::None => (None, now),
            Bundle::Live(spec) => (Some(bundle_between(spec, now - hour, now + hour * 24)), now),
            Bundle::Expired(spec) => (
                Some(bundle_between(spec, now - hour * 3, now - hour)),
                now - hour * 2,
            ),
        };
        if let Some(bytes) = bytes {
            let outcome = policy.load_bytes(&bytes, &trust_pem(), loaded_at);
            assert!(policy.current().is_some(), "bundle not loaded: {outcome:?}");
        }
        let stream = format!("{pod}/{}", uuid::Uuid::now_v7());
        store
            .decisions()
            .open_stream(tenant, &stream, None)
            .await
            .expect("open the decision stream");
        let (decision_log, _writer) =
            DecisionLog::start(store.clone(), stream.clone(), metrics.clone(), 1024);
        let dir = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(dir.path(), tenant).unwrap();
        let gate = Arc::new(Gate::new(GateParts {
            policy: policy.clone(),
            store: store.clone(),
            decision_log,
            workspaces,
            metrics,
            tenant: tenant.to_owned(),
            stream,
            identity: format!("sidecar:agents/{pod}"),
            pod: pod.to_owned(),
            trace_arguments: false,
        }));
        Self {
            gate,
            policy,
            store,
            tenant: tenant.to_owned(),
            workspaces: dir,
        }
    }

    /// Swaps in `spec` as the held profile's next publication, valid for a
    /// day, as a reload would.
    pub fn reload(&self, spec: &str) {
        let held = self.policy.current().expect("a bundle is held");
        let namespace = held.namespace.clone().unwrap_or_default();
        let now = Timestamp::now();
        let hour = SignedDuration::from_hours(1);
        let bytes = bundle(
            spec,
            &namespace,
            held.sequence + 1,
            now - hour,
            now + hour * 24,
        );
        let outcome = self.policy.load_bytes(&bytes, &trust_pem(), now);
        assert!(
            matches!(
                outcome,
                toolgate_gate::policy_state::LoadOutcome::Swapped { .. }
            ),
            "{outcome:?}"
        );
    }

    /// Another sidecar of this gate's tenant on the same database, with a
    /// memory of its own (of cancelled runs, labels, allowed decisions).
    pub async fn peer(&self, url: &str, bundle: Bundle<'_>) -> Self {
        Self::start_as(url, bundle, &self.tenant, "pod-b").await
    }

    /// Decides `tool` with `arguments` in `run` (step `s1`).
    pub async fn authorize(&self, tool: &str, arguments: Value, run: &str) -> AuthorizeResponse {
        self.gate
            .authorize(&call(tool, arguments, run))
            .await
            .expect("authorize")
    }

    /// Every row of this gate's decision stream, in chain order.
    pub async fn log(&self) -> Vec<ChainedDecision> {
        self.store
            .decisions()
            .list(&self.tenant, self.gate.stream(), 0, 10_000)
            .await
            .unwrap()
    }

    /// The record of `decision_id` in this gate's stream, waiting for the
    /// background writer (low- and write-risk decisions) up to 10 s.
    pub async fn logged(&self, decision_id: &str) -> DecisionRecord {
        for _ in 0..200 {
            if let Some(row) = self
                .log()
                .await
                .into_iter()
                .find(|r| r.record.decision_id == decision_id)
            {
                return row.record;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("decision {decision_id} never reached the log");
    }

    /// Asserts that this gate's stream verifies, and returns its row count.
    pub async fn verified_rows(&self) -> u64 {
        let report = self
            .store
            .decisions()
            .verify_stream(&self.tenant, self.gate.stream())
            .await
            .unwrap();
        assert!(report.ok, "chain broken: {report:?}");
        report.rows
    }

    /// Resolves approval `id` of this gate's tenant as an approver would.
    pub async fn resolve(&self, id: &str, decision: ApprovalDecision) {
        self.store
            .approvals()
            .resolve(
                &self.tenant,
                id,
                decision,
                "alice",
                Some("looked fine"),
                Timestamp::now(),
            )
            .await
            .expect("resolve the approval");
    }

    /// Every approval of this gate's tenant.
    pub async fn approvals(&self) -> Vec<Approval> {
        self.store
            .approvals()
            .list(&self.tenant, None, Timestamp::now())
            .await
            .unwrap()
    }
}

/// The call `tool(arguments)` of `run`, step `s1`.
pub fn call(tool: &str, arguments: Value, run: &str) -> AuthorizeRequest {
    AuthorizeRequest {
        tool: Id::parse(tool).unwrap(),
        action: None,
        arguments: object(arguments),
        run_id: run_id(run),
        step_id: Some(Id::parse("s1").unwrap()),
        tenant: None,
        definition_digest: None,
    }
}

pub fn run_id(run: &str) -> RunId {
    RunId::parse(run).unwrap()
}

pub fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("arguments are an object")
}

/// `(verdict, reason)` of an answer.
pub fn outcome(a: &AuthorizeResponse) -> (Decision, Reason) {
    (a.verdict.verdict, a.verdict.reason)
}

/// Runs `$body` once per backend (see [`backends`]) with `$url` bound to
/// its database URL.
macro_rules! each_backend {
    (|$url:ident| $body:block) => {{
        let scratch = tempfile::tempdir().unwrap();
        for (name, $url) in $crate::common::backends(scratch.path()) {
            eprintln!("backend: {name}");
            let $url: &str = &$url;
            $body
        }
    }};
}
