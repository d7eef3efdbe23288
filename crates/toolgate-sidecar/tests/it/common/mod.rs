//! Fixtures: signed bundles, database backends and a running sidecar on
//! loopback, spoken to over real HTTP.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_sidecar::{Sidecar, SidecarConfig};
use toolgate_store::Store;

/// The policy used throughout: bash commands tiered, a low-risk reader,
/// `deploy` that escalates everything, and the workspace API (writes under
/// `locked/` denied, `.env` hardline).
pub const SPEC: &str = r#"
mode: rules
rules:
  bash: {deny: ["rm *"], allow: ["ls*", "git status"], escalate: ["*"]}
  reader: {allow: ["*"]}
  deploy: {escalate: ["*"]}
  workspace.read: {allow: ["*"]}
  workspace.list: {allow: ["*"]}
  workspace.stat: {allow: ["*"]}
  workspace.write: {deny: ["locked/*"], allow: ["*"]}
  fs.read: {allow: ["*"]}
  fs.wipe: {deny: ["*"]}
hardline: {paths: ["**/.env"]}
effects:
  bash: {sideEffect: PROCESS_EXEC, risk: high}
  reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  deploy: {sideEffect: EXTERNAL_WRITE, risk: write}
  workspace.read: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  workspace.list: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  workspace.stat: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}
  fs.read: {sideEffect: WORKSPACE_READ, risk: low, definitionDigest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
  fs.wipe: {sideEffect: WORKSPACE_WRITE, risk: high}
approvals: {ttlSeconds: 600}
"#;

/// The bundles' namespace: one per test thread. The store keeps a durable
/// anti-rollback mark per (namespace, profile), shared by every sidecar on
/// one database, so tests that publish their own sequences must not share
/// a profile identity.
pub fn test_namespace() -> String {
    thread_local! {
        static NAMESPACE: String = unique("agents");
    }
    NAMESPACE.with(Clone::clone)
}

pub fn key() -> SigningKey {
    SigningKey::from_seed(&[42; 32])
}

pub fn trust_pem(keys: &[&SigningKey]) -> String {
    keys.iter()
        .map(|k| k.public_key().to_spki_pem().unwrap())
        .collect::<Vec<_>>()
        .join("")
}

/// Signed envelope bytes for `spec_yaml` at `sequence`, valid for `valid_for`.
pub fn bundle(
    spec_yaml: &str,
    sequence: u64,
    valid_for: SignedDuration,
    key: &SigningKey,
) -> Vec<u8> {
    let spec = toolgate_policy::load::from_str(spec_yaml).unwrap();
    let issued_at = Timestamp::now() - SignedDuration::from_secs(5);
    let (_, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: "coding".into(),
                namespace: Some(test_namespace()),
            },
            spec,
            grants: vec![],
            sequence,
            issued_at,
            expires_at: Timestamp::now() + valid_for,
        },
        key,
    )
    .unwrap();
    bytes
}

pub fn day() -> SignedDuration {
    SignedDuration::from_hours(24)
}

/// Writes `bytes` to `path` atomically (rename), as a ConfigMap update would.
pub fn replace_file(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The database URLs every test runs against: a SQLite file, and PostgreSQL
/// when `TOOLGATE_TEST_DATABASE_URL` is set (required when `CI=true`).
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

pub struct Harness {
    pub dir: PathBuf,
    pub bundle_path: PathBuf,
    pub sidecar: Option<Sidecar>,
    pub base: String,
    pub client: reqwest::Client,
    pub tenant: String,
    pub store: Store,
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{:x}{:x}{}",
        nanos,
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Harness {
    /// Starts a sidecar with `bundle` (None: no bundle file at all).
    pub async fn start(dir: &Path, url: &str, bundle: Option<&[u8]>) -> Self {
        Self::start_as(dir, url, bundle, &unique("t")).await
    }

    /// [`Harness::start`] serving `tenant` (several sidecars of one tenant).
    pub async fn start_as(dir: &Path, url: &str, bundle: Option<&[u8]>, tenant: &str) -> Self {
        Self::start_configured(dir, url, bundle, tenant, |_| {}).await
    }

    /// [`Harness::start_as`] with `configure` applied to the configuration
    /// last (MCP upstreams, say).
    pub async fn start_configured(
        dir: &Path,
        url: &str,
        bundle: Option<&[u8]>,
        tenant: &str,
        configure: impl FnOnce(&mut SidecarConfig),
    ) -> Self {
        let bundle_path = dir.join("bundle.json");
        let trust_path = dir.join("trust.pem");
        if let Some(b) = bundle {
            std::fs::write(&bundle_path, b).unwrap();
        }
        std::fs::write(&trust_path, trust_pem(&[&key()])).unwrap();
        let tenant = tenant.to_owned();
        let store = Store::connect(url).await.expect("connect test database");
        let mut config = SidecarConfig::new(bundle_path.clone(), trust_path, url.to_owned());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.workspace_base = dir.join("workspaces");
        config.tenant = tenant.clone();
        config.reload_interval = Duration::from_millis(50);
        config.heartbeat_interval = Duration::from_millis(100);
        configure(&mut config);
        let sidecar = Sidecar::start_with_store(config, store.clone())
            .await
            .unwrap();
        let base = format!("http://{}", sidecar.addr);
        Self {
            dir: dir.to_owned(),
            bundle_path,
            sidecar: Some(sidecar),
            base,
            client: reqwest::Client::new(),
            tenant,
            store,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// `POST /v1/workspace/{op}` (`read`, `list`, `stat`) of `path` in `run`.
    pub async fn workspace(&self, op: &str, run: &str, path: &str) -> (u16, Value) {
        let body = serde_json::json!({"run_id": run, "path": path});
        self.post(&format!("/v1/workspace/{op}"), body).await
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let (status, text) = self.get(path).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn authorize(&self, tool: &str, arguments: Value, run: &str) -> Value {
        let (status, body) = self
            .post(
                "/v1/authorize",
                serde_json::json!({"tool": tool, "arguments": arguments, "run_id": run, "step_id": "s1"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The sidecar's policy: the bundle it enforces, its last reload failure.
    pub fn policy(&self) -> &toolgate_gate::PolicyState {
        self.sidecar.as_ref().unwrap().policy()
    }

    /// Waits until the served policy version satisfies `pred`.
    pub async fn wait_for_version(&self, pred: impl Fn(Option<&str>) -> bool) {
        for _ in 0..200 {
            let current = self.policy().current();
            if pred(current.as_deref().map(|e| e.policy_version.as_str())) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("policy version never reached the expected state");
    }

    /// Every approval of this sidecar's tenant, as the store holds them.
    pub async fn approvals(&self) -> Vec<toolgate_store::Approval> {
        self.store
            .approvals()
            .list(&self.tenant, None, Timestamp::now())
            .await
            .unwrap()
    }

    /// Resolves approval `id` of this sidecar's tenant as an approver would.
    pub async fn resolve(&self, id: &str, decision: toolgate_store::ApprovalDecision) {
        self.store
            .approvals()
            .resolve(&self.tenant, id, decision, "alice", None, Timestamp::now())
            .await
            .expect("resolve the approval");
    }

    /// `GET /v1/runs/{run}`: the run's state, asserted to be a 200.
    pub async fn run_state(&self, run: &str) -> Value {
        let (status, state) = self.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(status, 200, "{state}");
        state
    }

    /// Every decision of this harness's tenant, stream by stream (each
    /// sidecar instance writes its own stream).
    pub async fn tenant_log(&self) -> Vec<toolgate_store::ChainedDecision> {
        let mut out = Vec::new();
        for stream in self.store.decisions().streams(&self.tenant).await.unwrap() {
            out.extend(
                self.store
                    .decisions()
                    .list(&self.tenant, &stream, 0, 10_000)
                    .await
                    .unwrap(),
            );
        }
        out
    }

    pub async fn stop(&mut self) {
        if let Some(s) = self.sidecar.take() {
            s.shutdown().await;
        }
    }
}

/// Runs `$body` once per backend (see [`backends`]), each in a fresh
/// directory, with a sidecar `$h` enforcing `$spec` (the calling module's
/// `SPEC` when none is named).
macro_rules! each_backend {
    (|$h:ident| $body:block) => {
        each_backend!(SPEC, |$h| $body)
    };
    ($spec:expr, |$h:ident| $body:block) => {{
        let scratch = tempfile::tempdir().unwrap();
        for (name, url) in $crate::common::backends(scratch.path()) {
            let dir = scratch.path().join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            eprintln!("backend: {name}");
            #[allow(unused_mut)]
            let mut $h = $crate::common::Harness::start(
                &dir,
                &url,
                Some(&$crate::common::bundle(
                    $spec,
                    1,
                    $crate::common::day(),
                    &$crate::common::key(),
                )),
            )
            .await;
            $body
            $h.stop().await;
        }
    }};
}

/// Two sidecars of one tenant on one database, in their own directories,
/// enforcing one bundle of `spec`.
pub async fn pair(dir: &Path, url: &str, spec: &str) -> (Harness, Harness) {
    let tenant = unique("t");
    let (d1, d2) = (dir.join("one"), dir.join("two"));
    std::fs::create_dir_all(&d1).unwrap();
    std::fs::create_dir_all(&d2).unwrap();
    let bytes = bundle(spec, 1, day(), &key());
    let one = Harness::start_as(&d1, url, Some(&bytes), &tenant).await;
    let two = Harness::start_as(&d2, url, Some(&bytes), &tenant).await;
    (one, two)
}

/// `(verdict, reason)` of an authorize answer.
pub fn outcome(v: &Value) -> (&str, &str) {
    (
        v["verdict"].as_str().unwrap_or("?"),
        v["reason"].as_str().unwrap_or("?"),
    )
}

/// Serves `app` on a free loopback port; its MCP endpoint's URL
/// (`http://localhost:PORT/mcp`), as the gateway tests name upstreams.
pub async fn serve_mcp(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://localhost:{port}/mcp")
}
