//! Issue 32, item 3, against the real PostgreSQL as provisioned tenant
//! roles (the mock API server stands in for Kubernetes): a tenant that
//! records profile loads for the version another tenant runs (the example
//! profiles carry the same version in every namespace) must not make its
//! own PolicyProfile's approvers decide the victim's escalations, nor veto
//! them. Only the victim's own PolicyProfile answers. Fails when `CI=true`
//! and no database is set.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use http::Method;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use toolgate_controller::approval;
use toolgate_controller::crd::{Approval, Decision};
use toolgate_store::{ApprovalStatus, NewApproval, ProfileLoad, Store};

const VERSION: &str = "safe-coding@0123456789ab+h01234567";

/// Ten hex digits unlikely to repeat across runs (roles are cluster-global).
fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = nanos ^ (u128::from(std::process::id()) << 40);
    format!("{:010x}", n & 0xff_ffff_ffff)
}

/// Drops the test's schema and roles, also after a panic.
struct Cleanup {
    url: String,
    schema: String,
    roles: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (url, schema, roles) = (self.url.clone(), self.schema.clone(), self.roles.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    let options = PgConnectOptions::from_str(&url).unwrap();
                    let Ok(pool) = PgPoolOptions::new().connect_with(options).await else {
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
                })
        })
        .join();
    }
}

/// The safe-coding profile of `namespace`, answered by `approvers`.
fn profile_of(namespace: &str, approvers: &[&str]) -> Value {
    let mut p = profile(1, true);
    p.metadata.namespace = Some(namespace.into());
    p.spec.approvals.as_mut().unwrap().approvers =
        approvers.iter().map(|a| a.to_string()).collect();
    serde_json::to_value(p).unwrap()
}

/// The mirrored request for `row`, decided by `by` in `groups`.
fn decided(row: &toolgate_store::Approval, by: &str, groups: &[&str]) -> Arc<Approval> {
    let mut obj = approval::object_for(row, NS);
    obj.spec.decision = Some(Decision::Approved);
    obj.spec.decided_by = Some(by.into());
    obj.spec.decided_by_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    let mut v = serde_json::to_value(&obj).unwrap();
    v["metadata"]["uid"] = "uid-apr".into();
    v["metadata"]["resourceVersion"] = "1".into();
    v["metadata"]["generation"] = 1.into();
    Arc::new(serde_json::from_value(v).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_rows_never_choose_the_approvers() {
    let Some(url) = database_url() else { return };
    let schema = format!("ap_{}", suffix());
    let mut cleanup = Cleanup {
        url: url.clone(),
        schema: schema.clone(),
        roles: Vec::new(),
    };
    let root = PgPoolOptions::new().connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&root)
        .await
        .unwrap();
    root.close().await;
    let sep = if url.contains('?') { '&' } else { '?' };
    let admin = Store::connect(&format!("{url}{sep}options=-c%20search_path%3D{schema}"))
        .await
        .unwrap();
    let (victim, attacker) = (format!("va-{}", suffix()), format!("vb-{}", suffix()));
    let mut connect = Vec::new();
    for tenant in [&victim, &attacker] {
        let creds = admin.provision_tenant(tenant).await.unwrap();
        cleanup.roles.push(creds.role);
        connect.push(Store::connect(&creds.database_url).await.unwrap());
    }
    let (a, b) = (&connect[0], &connect[1]);

    // The victim's sidecar escalates; the attacker's records loads of the
    // same version (in its own namespace: all row-level security allows).
    let row = a
        .approvals()
        .request(
            NewApproval {
                approval_id: None,
                invocation_id: "inv-1".into(),
                tenant: victim.clone(),
                run_id: "run-1".into(),
                tool: "bash".into(),
                args_digest: "sha256:abc".into(),
                call_digest: None,
                policy_version: VERSION.into(),
                decision_id: "dec-1".into(),
                requested_by: format!("sidecar:{victim}/agent-0"),
                ttl: Duration::from_secs(900),
                action: None,
                preview: None,
            },
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
    for pod in ["agent-0", "agent-1"] {
        b.profiles()
            .record_profile_load(
                ProfileLoad {
                    profile: "safe-coding".into(),
                    namespace: attacker.clone(),
                    policy_version: VERSION.into(),
                    spec_sha256: "0".repeat(64),
                    hardline_sha256: "1".repeat(64),
                    bundle_digest: None,
                    loaded_by: format!("sidecar:{attacker}/{pod}"),
                },
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
    }
    let victim_profile =
        format!("/apis/toolgate.dev/v1alpha1/namespaces/{victim}/policyprofiles/safe-coding");

    // The attacker's own approver decides: only the victim's profile is
    // asked, which does not list them.
    let (client, mut server) = mock_client();
    let ctx = context(client, admin.clone(), jiff::Timestamp::now());
    let path = victim_profile.clone();
    let v = victim.clone();
    run(
        approval::reconcile(decided(&row, "mallory", &[]), ctx),
        async move {
            server
                .expect(Method::GET, &path)
                .await
                .respond(200, profile_of(&v, &["group:platform-oncall"]));
            assert_eq!(server.event().await["reason"], "ApproverNotAllowed");
            let st = server.next("the approval's status").await;
            assert_eq!(st.body["status"]["phase"], "Pending");
            st.echo_status(approval_json("x"));
        },
    )
    .await
    .unwrap();
    let db = admin
        .approvals()
        .get(&victim, &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, ApprovalStatus::Pending, "mallory decided it");

    // The victim's approver decides: the attacker's rows veto nothing.
    let (client, mut server) = mock_client();
    let ctx = context(client, admin.clone(), jiff::Timestamp::now());
    let v = victim.clone();
    run(
        approval::reconcile(decided(&row, "carol", &["platform-oncall"]), ctx),
        async move {
            server
                .expect(Method::GET, &victim_profile)
                .await
                .respond(200, profile_of(&v, &["group:platform-oncall"]));
            let st = server.next("the approval's status").await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            st.echo_status(approval_json("x"));
        },
    )
    .await
    .unwrap();
    let db = admin
        .approvals()
        .get(&victim, &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, ApprovalStatus::Approved);
    for store in &connect {
        store.close().await;
    }
    admin.close().await;
}
