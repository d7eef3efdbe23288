//! The controller gives each namespace with a PolicyProfile its own tenant
//! database credential, against the real PostgreSQL (the mock API server
//! stands in for Kubernetes). Fails when `CI=true` and no database is set.

use std::sync::Arc;

use crate::common::*;
use http::Method;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use serde_json::json;
use toolgate_controller::context::{Context, Settings};
use toolgate_controller::metrics::Metrics;
use toolgate_controller::tenancy;
use toolgate_store::{ApprovalDecision, Store};

const SECRET: &str = "/api/v1/namespaces/agents/secrets/toolgate-database";
const SECRETS: &str = "/api/v1/namespaces/agents/secrets";

fn ctx(client: kube::Client, store: Store) -> Arc<Context> {
    let mut settings = Settings::new("toolgate-system");
    settings.approvals = toolgate_controller::approval::Placement::central(NS);
    Arc::new(Context::new(client, store, key(), Metrics::new(), settings))
}

fn regarding() -> ObjectReference {
    ObjectReference {
        kind: Some("PolicyProfile".into()),
        name: Some("safe-coding".into()),
        namespace: Some(NS.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn each_profile_namespace_gets_its_own_tenant_credential() {
    let Some(url) = database_url() else { return };
    let admin = Store::connect(&url).await.unwrap();

    // No Secret yet: a tenant role is provisioned and its URL written.
    let (client, mut server) = mock_client();
    let c = ctx(client, admin.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    run(
        {
            let c = c.clone();
            async move { tenancy::ensure_database_secret(&c, NS, &regarding()).await }
        },
        async move {
            server.expect(Method::GET, SECRET).await.not_found();
            let create = server.expect(Method::POST, SECRETS).await;
            let body = create.body.clone();
            create.respond(201, body.clone());
            let ev = server.event().await;
            assert_eq!(ev["reason"], "TenantProvisioned");
            tx.send(body).unwrap();
        },
    )
    .await
    .unwrap();
    // Cached: a second reconcile of the namespace asks the API nothing (the
    // mock server is gone; a request would fail or hang).
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tenancy::ensure_database_secret(&c, NS, &regarding()),
    )
    .await
    .expect("no API request once provisioned")
    .unwrap();

    // What was written: labels, the role annotation, and a URL that logs in
    // as the namespace's tenant and nothing more.
    let secret: Secret = serde_json::from_value(rx.await.unwrap()).unwrap();
    assert!(tenancy::is_managed(&secret));
    let role = secret.metadata.annotations.as_ref().unwrap()[tenancy::ANN_TENANT_ROLE].clone();
    let tenant_url = String::from_utf8(secret.data.as_ref().unwrap()["url"].0.clone()).unwrap();
    assert!(
        !tenant_url.contains("postgres@"),
        "not the admin user: {tenant_url}"
    );
    let tenant = Store::connect(&tenant_url).await.unwrap();
    assert_eq!(tenant.session_tenant().await.unwrap().as_deref(), Some(NS));
    // The tenant can request an approval but not resolve it: that stays the
    // controller's.
    let row = tenant
        .approvals()
        .request(
            toolgate_store::NewApproval {
                approval_id: None,
                invocation_id: format!("inv-{}", std::process::id()),
                tenant: NS.into(),
                run_id: "run-1".into(),
                tool: "bash".into(),
                args_digest: "sha256:00".into(),
                call_digest: None,
                action: None,
                preview: Some("make deploy".into()),
                policy_version: "safe-coding@x".into(),
                decision_id: "dec-1".into(),
                requested_by: "sidecar/agent-0".into(),
                ttl: std::time::Duration::from_secs(60),
            },
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
    let err = tenant
        .approvals()
        .resolve(
            NS,
            &row.id,
            ApprovalDecision::Approved,
            "mallory",
            None,
            jiff::Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    tenant.close().await;

    // A Secret the controller wrote is kept as it is (no rotation under
    // running pods); one somebody else wrote is kept too, with a Warning.
    let (client, mut server) = mock_client();
    let c2 = ctx(client, admin.clone());
    run(
        async move { tenancy::ensure_database_secret(&c2, NS, &regarding()).await },
        async move {
            server
                .expect(Method::GET, SECRET)
                .await
                .respond(200, serde_json::to_value(&secret).unwrap());
        },
    )
    .await
    .unwrap();
    let (client, mut server) = mock_client();
    let c4 = ctx(client, admin.clone());
    run(
        async move { tenancy::ensure_database_secret(&c4, NS, &regarding()).await },
        async move {
            server.expect(Method::GET, SECRET).await.respond(
                200,
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "toolgate-database", "namespace": NS},
                       "data": {"url": "cG9zdGdyZXM6Ly9hZG1pbkBkYi90b29sZ2F0ZQ=="}}),
            );
            let ev = server.event().await;
            assert_eq!(
                (ev["type"].as_str(), ev["reason"].as_str()),
                (Some("Warning"), Some("DatabaseSecretUnmanaged"))
            );
        },
    )
    .await
    .unwrap();

    // Clean up the cluster-global role.
    let pool = admin.as_postgres().unwrap();
    for stmt in [
        format!("DELETE FROM tenant_roles WHERE role = '{role}'"),
        format!("DROP OWNED BY \"{role}\""),
        format!("DROP ROLE \"{role}\""),
    ] {
        sqlx::query(&stmt).execute(pool).await.unwrap();
    }
}

#[tokio::test]
async fn sqlite_stores_provision_nothing() {
    let (client, _server) = mock_client();
    let c = ctx(client, store().await);
    // No request reaches the API server: nobody answers the mock, so one
    // would hang until the timeout.
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tenancy::ensure_database_secret(&c, NS, &regarding()),
    )
    .await
    .expect("no API request on SQLite")
    .unwrap();
}
