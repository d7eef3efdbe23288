//! Per-tenant PostgreSQL roles and row-level security (migration 0003,
//! and 0023 for recorded inputs), seen from the other tenant: B sees none
//! of A's rows, its changes to them touch nothing, and it cannot write rows
//! in A's name.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards.

use crate::common::tenant_rows::*;
use crate::common::tenants::*;
use jiff::{SignedDuration, Timestamp};
use toolgate_store::DecisionInput;

/// Every table holding tenant rows, with the column naming the tenant.
const TENANT_TABLES: [(&str, &str); 11] = [
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
    ("decision_inputs", "tenant"),
];

/// An input of decision `id` expiring at `expires_at`.
fn input(id: &str, expires_at: Timestamp) -> DecisionInput {
    DecisionInput {
        decision_id: id.into(),
        call: r#"{"arguments":{"path":"/a"},"tool":"fs.read"}"#.into(),
        masked: false,
        recorded_at: Timestamp::now(),
        expires_at,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_tenant_sees_none_of_a_tenants_rows() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let rows = a_wrote_everything(&t).await;
    let (b, ta, tb, pb) = (&t.b, &t.ta, &t.tb, &t.pb);
    let week = Timestamp::now() + SignedDuration::from_hours(168);
    t.a.decision_inputs()
        .put_batch(ta, &[input("dec-1", week)])
        .await
        .unwrap();
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

/// Rows a `DELETE` of input `id` deletes through `pool`.
async fn deleted(pool: &sqlx::PgPool, id: &str) -> u64 {
    sqlx::query("DELETE FROM decision_inputs WHERE decision_id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap()
        .rows_affected()
}

/// Recorded inputs (migration 0023): a tenant reads and writes only its
/// own, rewrites none, and deletes only its own expired ones, by the
/// server's clock whatever time the pruning passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_reads_writes_and_prunes_only_its_own_inputs() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let (a, b, ta, tb, pa, pb) = (&t.a, &t.b, &t.ta, &t.tb, &t.pa, &t.pb);
    let now = Timestamp::now();
    let (past, later) = (
        now - SignedDuration::from_hours(1),
        now + SignedDuration::from_hours(1),
    );
    let mine = [
        input("a-live", later),
        input("a-old", past),
        input("a-old2", past),
    ];
    a.decision_inputs().put_batch(ta, &mine).await.unwrap();
    b.decision_inputs()
        .put_batch(tb, &[input("b-old", past)])
        .await
        .unwrap();
    let ids = ["a-live", "a-old", "a-old2", "b-old"];
    assert_eq!(
        a.decision_inputs().get_many(ta, &ids).await.unwrap().len(),
        3
    );

    // B reads nothing of A's, by the store or by SQL.
    assert!(
        b.decision_inputs()
            .get_many(ta, &ids)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.decision_inputs().verify(ta).await.unwrap().rows, 0);
    assert_eq!(count(pb, "SELECT count(*) FROM decision_inputs").await, 1);

    // B writes nothing in A's name, and deletes none of A's expired rows.
    let err = b
        .decision_inputs()
        .put_batch(ta, &[input("b-forged", later)])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    let forged = format!(
        "INSERT INTO decision_inputs (tenant, decision_id, call, masked, recorded_at, \
         expires_at) VALUES ('{ta}', 'b-forged', '{{}}', false, 0, 1)"
    );
    assert_eq!(sqlstate(pb, &forged).await, "42501");
    assert_eq!(deleted(pb, "a-old").await, 0);

    // No tenant rewrites an input, its own or another's.
    for pool in [pa, pb] {
        let sql = "UPDATE decision_inputs SET call = '{}', expires_at = 0";
        assert_eq!(sqlstate(pool, sql).await, "42501");
    }

    // A deletes its own input only once it has expired.
    assert_eq!(deleted(pa, "a-live").await, 0);
    assert_eq!(deleted(pa, "a-old").await, 1);
    // Pruning as B deletes B's expired row only; as A with a time far
    // ahead, A's expired one only: the policy reads the server's clock.
    assert_eq!(b.decision_inputs().prune_expired(now).await.unwrap(), 1);
    let ahead = now + SignedDuration::from_hours(24 * 365);
    assert_eq!(a.decision_inputs().prune_expired(ahead).await.unwrap(), 1);
    let left = a.decision_inputs().get_many(ta, &ids).await.unwrap();
    assert_eq!(left.into_keys().collect::<Vec<_>>(), ["a-live"]);

    // Times must read back: up to 9999-01-01, not one millisecond more.
    let at = |id: &str, ms: i64| {
        format!(
            "INSERT INTO decision_inputs (tenant, decision_id, call, masked, recorded_at, \
             expires_at) VALUES ('{ta}', '{id}', '{{}}', false, 0, {ms})"
        )
    };
    assert_eq!(
        sqlstate(pa, &at("a-beyond", 253_370_764_800_001)).await,
        "23514"
    );
    sqlx::raw_sql(&at("a-bound", 253_370_764_800_000))
        .execute(pa)
        .await
        .unwrap();
    let all = "SELECT count(*) FROM decision_inputs";
    assert_eq!(count(t.fx.admin_pool(), all).await, 2);
    t.close().await;
}
