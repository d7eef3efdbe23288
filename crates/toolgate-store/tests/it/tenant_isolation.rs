//! Per-tenant PostgreSQL roles and row-level security (migration 0003),
//! seen from the other tenant: B sees none of A's rows, its changes to them
//! touch nothing, and it cannot write rows in A's name.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards.

use crate::common::tenant_rows::*;
use crate::common::tenants::*;
use jiff::Timestamp;

/// Every table holding tenant rows, with the column naming the tenant.
const TENANT_TABLES: [(&str, &str); 10] = [
    ("approvals", "tenant"),
    ("intents", "tenant"),
    ("run_events", "tenant"),
    ("decisions", "tenant"),
    ("decision_streams", "tenant"),
    ("checkpoints", "tenant"),
    ("policy_profiles", "namespace"),
    ("process_events", "tenant"),
    ("sidecar_heartbeats", "pod_namespace"),
    ("bundle_high_water", "namespace"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_tenant_sees_none_of_a_tenants_rows() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let rows = a_wrote_everything(&t).await;
    let (b, ta, tb, pb) = (&t.b, &t.ta, &t.tb, &t.pb);
    for (table, column) in TENANT_TABLES {
        let sql = format!("SELECT count(*) FROM {table} WHERE {column} = '{ta}'");
        assert_eq!(count(pb, &sql).await, 0, "B sees A's {table}");
        assert!(
            count(t.fx.admin_pool(), &sql).await > 0,
            "admin sees {table}"
        );
    }
    assert_eq!(count(pb, "SELECT count(*) FROM process_events").await, 0);
    assert_eq!(
        b.approvals()
            .get(ta, &rows.approval.id, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "not_found"
    );
    assert_eq!(
        b.intents().get(ta, &rows.open.id).await.unwrap_err().code(),
        "not_found"
    );
    assert!(b.decisions().list(ta, S, 0, 100).await.unwrap().is_empty());
    assert!(
        b.approvals()
            .list_all(None, Timestamp::now())
            .await
            .unwrap()
            .iter()
            .all(|x| &x.tenant == tb)
    );
    assert_eq!(b.heartbeats().list_heartbeats(None).await.unwrap().len(), 1);
    let b_reports = b.decisions().verify(None).await.unwrap();
    assert_eq!(b_reports.len(), 1);
    assert_eq!(&b_reports[0].tenant, tb);
    assert!(b.checkpoints().list(None, None).await.unwrap().is_empty());
    t.close().await;
}

/// B's changes to A's rows touch nothing; B writing rows of tenant A is
/// refused by RLS `WITH CHECK`, directly and through the store; A's chain
/// is intact after all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_tenant_cannot_change_or_write_a_tenants_rows() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let rows = a_wrote_everything(&t).await;
    let (b, ta, pb) = (&t.b, &t.ta, &t.pb);
    let changed = sqlx::query("UPDATE intents SET effect_sent_at = 1 WHERE id = $1")
        .bind(&rows.open.id)
        .execute(pb)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(changed, 0);
    for sql in [
        format!(
            "INSERT INTO intents (id, tenant, run_id, step_id, tool, args_digest, decision_id, \
             risk, created_at) VALUES ('i-x', '{ta}', 'r', 's', 't', 'd', 'dec-x', 'high', 0)"
        ),
        format!(
            "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, \
             policy_version, decision_id, requested_by, created_at, expires_at) \
             VALUES ('a-x', '{ta}', 'inv-x', 'r', 't', 'd', 'p', 'd', 'me', 0, 1)"
        ),
        format!(
            "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, reason, \
             policy_version, risk, args_digest, created_at) \
             VALUES ('{ta}', 'x', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
        ),
        format!(
            "INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at) \
             VALUES ('{ta}', 'r', 'approval.requested', 'a', '{{}}', 0)"
        ),
    ] {
        assert_eq!(sqlstate(pb, &sql).await, "42501", "{sql}");
    }
    for err in [
        b.approvals()
            .request(approval(ta, "inv-b2"), Timestamp::now())
            .await
            .unwrap_err(),
        b.intents()
            .begin(intent(ta), Timestamp::now())
            .await
            .unwrap_err(),
        b.decisions().append(ta, S, record(9)).await.unwrap_err(),
        b.heartbeats()
            .record_heartbeat(&heartbeat(ta, 9))
            .await
            .unwrap_err(),
        b.profiles()
            .record_bundle_sequence(ta, "default", 9, "sha256:b9", Timestamp::now())
            .await
            .unwrap_err(),
        b.profiles()
            .record_profile_load(profile_load(ta, "default@b"), Timestamp::now())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code(), "permission_denied", "{err}");
    }
    let reports = t.fx.admin.decisions().verify(None).await.unwrap();
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    t.close().await;
}
