//! Shared builders of the tenancy tests: a migrated schema of its own with
//! tenant roles provisioned through the store (dropped afterwards), and the
//! records a tenant's sidecar writes.
//!
//! The admin URL comes from `TOOLGATE_TEST_DATABASE_URL` (a superuser or a
//! role with CREATEROLE). Unset, these tests print a skip notice and pass,
//! unless `CI=true`, in which case they fail.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use toolgate_store::{
    DecisionRecord, Heartbeat, NewApproval, NewIntent, ProfileLoad, Store, TenantCredentials,
};

pub use super::builders::{CALL, S};
pub const POLICY: &str = "default@0123456789ab+h01234567";

pub fn admin_url() -> Option<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if ci => panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set"),
        _ => {
            eprintln!(
                "SKIP tenancy test: set TOOLGATE_TEST_DATABASE_URL to run it \
                 (it is required when CI=true)"
            );
            None
        }
    }
}

pub fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// A migrated schema of its own, an admin store on it, and the tenant roles
/// provisioned through it (dropped on drop).
pub struct Fixture {
    pub base_url: String,
    pub schema: String,
    pub admin: Store,
    pub roles: Vec<String>,
}

impl Fixture {
    pub async fn new() -> Option<Fixture> {
        let base_url = admin_url()?;
        let root = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(PgConnectOptions::from_str(&base_url).expect("parse admin url"))
            .await
            .unwrap_or_else(|e| {
                panic!("PostgreSQL at TOOLGATE_TEST_DATABASE_URL unreachable: {e}")
            });
        let schema = format!("tn_{}", suffix());
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&root)
            .await
            .expect("create schema");
        root.close().await;
        let admin = Store::connect(&with_schema(&base_url, &schema))
            .await
            .expect("connect and migrate as admin");
        Some(Fixture {
            base_url,
            schema,
            admin,
            roles: Vec::new(),
        })
    }

    pub async fn provision(&mut self, tenant: &str) -> TenantCredentials {
        let creds = self
            .admin
            .provision_tenant(tenant)
            .await
            .expect("provision tenant");
        if !self.roles.contains(&creds.role) {
            self.roles.push(creds.role.clone());
        }
        creds
    }

    /// Provisions `tenant` and connects a store as its role.
    pub async fn tenant_store(&mut self, tenant: &str) -> Store {
        let url = self.provision(tenant).await.database_url;
        Store::connect(&url).await.expect("connect as a tenant")
    }

    pub fn admin_pool(&self) -> &PgPool {
        self.admin.as_postgres().expect("postgres")
    }
}

impl Drop for Fixture {
    /// Drops the schema and every provisioned role (also after a panic).
    fn drop(&mut self) {
        let (url, schema, roles) = (
            self.base_url.clone(),
            self.schema.clone(),
            self.roles.clone(),
        );
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok(pool) = PgPoolOptions::new()
                    .max_connections(1)
                    .connect_with(PgConnectOptions::from_str(&url).expect("url"))
                    .await
                else {
                    return;
                };
                let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                    .execute(&pool)
                    .await;
                for role in roles {
                    let _ = sqlx::raw_sql(&format!(
                        "DROP OWNED BY \"{role}\"; DROP ROLE IF EXISTS \"{role}\""
                    ))
                    .execute(&pool)
                    .await;
                }
                pool.close().await;
            });
        })
        .join();
    }
}

/// `url` with the connection's search_path set to `schema`.
pub fn with_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// Runs `sql` and returns the SQLSTATE it fails with; panics if it succeeds.
pub async fn sqlstate(pool: &PgPool, sql: &str) -> String {
    match sqlx::raw_sql(sql).execute(pool).await {
        Ok(r) => panic!(
            "expected {sql:?} to fail, it affected {} rows",
            r.rows_affected()
        ),
        Err(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()).unwrap_or_default(),
        Err(e) => panic!("{sql:?}: unexpected error {e}"),
    }
}

pub async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub fn approval(tenant: &str, invocation: &str) -> NewApproval {
    NewApproval {
        approval_id: None,
        invocation_id: invocation.into(),
        tenant: tenant.into(),
        run_id: "run-1".into(),
        tool: "fs.delete".into(),
        args_digest: "sha256:args".into(),
        call_digest: Some(CALL.into()),
        policy_version: POLICY.into(),
        decision_id: format!("dec-{}", suffix()),
        requested_by: format!("sidecar:{tenant}/pod-1"),
        ttl: Duration::from_secs(600),
        action: Some("delete".into()),
        preview: Some("rm -rf /tmp/x".into()),
    }
}

pub fn intent(tenant: &str) -> NewIntent {
    NewIntent {
        tenant: tenant.into(),
        run_id: "run-1".into(),
        step_id: "step-1".into(),
        tool: "fs.delete".into(),
        args_digest: "sha256:args".into(),
        call_digest: Some(CALL.into()),
        decision_id: format!("dec-{}", suffix()),
        risk: "high".into(),
        verification_probe: None,
    }
}

pub fn record(i: usize) -> DecisionRecord {
    DecisionRecord {
        decision_id: format!("dec-{i}"),
        run_id: "run-1".into(),
        step_id: format!("step-{i}"),
        tool: "fs.read".into(),
        verdict: "allow".into(),
        reason: "allow_rule".into(),
        message: Some(format!(
            "line\nbreak\t\"quoted\" \\ \u{1}\u{1f}\u{7f}\u{2028}/ \u{e9}\u{1F600} {i}"
        )),
        matched_rule: i.is_multiple_of(2).then(|| "allow:fs.read".into()),
        policy_version: POLICY.into(),
        risk: "low".into(),
        args_digest: "sha256:args".into(),
        call_digest: (!i.is_multiple_of(3)).then(|| CALL.into()),
        // The database trigger must hash it exactly as the store does.
        definition_digest: i
            .is_multiple_of(2)
            .then(|| format!("sha256:def-\"{i}\"\u{e9}")),
        created_at: jiff::Timestamp::now(),
    }
}

pub fn profile_load(namespace: &str, version: &str) -> ProfileLoad {
    ProfileLoad {
        profile: "default".into(),
        namespace: namespace.into(),
        policy_version: version.into(),
        spec_sha256: "a".repeat(64),
        hardline_sha256: "b".repeat(64),
        bundle_digest: Some("sha256:bundle".into()),
        loaded_by: format!("sidecar:{namespace}/pod-1"),
    }
}

pub fn heartbeat(namespace: &str, sequence: i64) -> Heartbeat {
    Heartbeat {
        pod_name: "pod-1".into(),
        pod_namespace: namespace.into(),
        profile: "default".into(),
        policy_version: POLICY.into(),
        sequence,
        last_seen: jiff::Timestamp::now(),
        // Written (and, on the second beat, updated) as the tenant's role.
        shadow: Some({
            let mut t = toolgate_store::ShadowTally::new("next@0123456789ab+h01234567");
            t.record(
                toolgate_policy::Decision::Allow,
                toolgate_policy::Decision::Deny,
            );
            t
        }),
    }
}

/// Two tenants of one migrated schema, each with a store connected as its
/// own role and that store's pool for raw SQL (the tenancy attack tests'
/// starting point). The stores are declared before the fixture, so a
/// panicking test drops them before its schema and roles.
pub struct TwoTenants {
    pub ta: String,
    pub tb: String,
    pub a: Store,
    pub b: Store,
    pub pa: PgPool,
    pub pb: PgPool,
    pub fx: Fixture,
}

impl TwoTenants {
    /// Tenants `ta-…` and `tb-…`; `None` means skip (see [`admin_url`]).
    pub async fn new() -> Option<TwoTenants> {
        let mut fx = Fixture::new().await?;
        let (ta, tb) = (format!("ta-{}", suffix()), format!("tb-{}", suffix()));
        let a = fx.tenant_store(&ta).await;
        let b = fx.tenant_store(&tb).await;
        let pa = a.as_postgres().expect("postgres").clone();
        let pb = b.as_postgres().expect("postgres").clone();
        Some(TwoTenants {
            ta,
            tb,
            a,
            b,
            pa,
            pb,
            fx,
        })
    }

    pub async fn close(self) {
        self.a.close().await;
        self.b.close().await;
    }
}
