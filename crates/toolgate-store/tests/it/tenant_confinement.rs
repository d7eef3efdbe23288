//! Per-tenant PostgreSQL roles and row-level security (migration 0003): a
//! tenant role does the sidecar's work on its own tenant's rows only, and
//! is refused by SQLSTATE where it would rewrite, delete or forge them.
//! What another tenant sees and may change is `tenant_isolation`.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards. The rows a
//! tenant writes, and the checks that writing them works, are
//! `common::tenant_rows`.

use std::time::Duration;

use crate::common::rid;
use crate::common::tenant_rows::*;
use crate::common::tenants::*;
use jiff::Timestamp;
use toolgate_store::{ApprovalDecision, ApprovalStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_names_the_tenant_role_and_hides_its_url() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let ta = format!("ta-{}", suffix());
    let creds_a = fx.provision(&ta).await;
    assert_eq!(creds_a.tenant, ta);
    assert!(creds_a.role.starts_with("tg_t_ta_"), "{}", creds_a.role);
    assert!(
        creds_a
            .database_url
            .contains(&format!("//{}:", creds_a.role))
    );
    assert!(creds_a.database_url.contains("options=-c%20search_path%3D"));
    assert!(!format!("{creds_a:?}").contains(&creds_a.database_url));
}

/// Connecting as a tenant checks the schema instead of migrating, and the
/// session knows its tenant (the admin's is none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_store_checks_the_schema_and_knows_its_tenant() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    t.a.migrate()
        .await
        .expect("tenant migrate is a version check");
    assert_eq!(t.a.session_tenant().await.unwrap().as_deref(), Some(&*t.ta));
    assert_eq!(t.b.session_tenant().await.unwrap().as_deref(), Some(&*t.tb));
    assert_eq!(t.fx.admin.session_tenant().await.unwrap(), None);
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_requests_waits_for_and_consumes_its_own_approval() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    approval_consumed(&t).await;
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_cannot_resolve_its_own_approval() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let req =
        t.a.approvals()
            .request(approval(&t.ta, "inv-1"), Timestamp::now())
            .await
            .unwrap();
    let waiter = {
        let (a, ta, id) = (t.a.clone(), t.ta.clone(), req.id.clone());
        tokio::spawn(async move { a.approvals().wait(&ta, &id, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err =
        t.a.approvals()
            .resolve(
                &t.ta,
                &req.id,
                ApprovalDecision::Approved,
                "self",
                None,
                Timestamp::now(),
            )
            .await
            .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    waiter.abort();
    let still =
        t.a.approvals()
            .get(&t.ta, &req.id, Timestamp::now())
            .await
            .unwrap();
    assert_eq!(still.status, ApprovalStatus::Pending);
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_begins_and_completes_its_own_intents() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    intents_done_and_open(&t).await;
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_appends_and_verifies_its_own_decisions() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    six_decisions(&t).await;
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_records_profile_loads_bundle_sequences_and_heartbeats() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    profile_and_heartbeat_rows(&t).await;
    t.close().await;
}

/// As tenant A, on A's own rows: no rewriting or deleting the log, its
/// streams, approvals, intents or run events; no forged approved approval
/// or resolution event; no admin tables, functions or DDL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_cannot_rewrite_delete_or_forge_its_own_records() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let (ta, tb) = (&t.ta, &t.tb);
    let rows = a_wrote_everything(&t).await;
    let open = &rows.open.id;
    for sql in [
        format!("UPDATE decisions SET verdict = 'deny' WHERE tenant = '{ta}'"),
        format!("DELETE FROM decisions WHERE tenant = '{ta}'"),
        "TRUNCATE decisions".to_owned(),
        format!("UPDATE decision_streams SET seq = 0 WHERE tenant = '{ta}'"),
        format!("DELETE FROM decision_streams WHERE tenant = '{ta}'"),
        "TRUNCATE decision_streams".to_owned(),
        format!(
            "INSERT INTO decision_streams (tenant, seq, prev_hash, hash) VALUES ('{ta}x', 0, '', '')"
        ),
        // Resolving or expiring an approval.
        format!("UPDATE approvals SET status = 'approved' WHERE tenant = '{ta}'"),
        format!("UPDATE approvals SET resolved_by = 'me', reason = 'x' WHERE tenant = '{ta}'"),
        format!("UPDATE approvals SET resolved_at = 1 WHERE tenant = '{ta}'"),
        format!("DELETE FROM approvals WHERE tenant = '{ta}'"),
        // Requesting an approval that is already approved.
        format!(
            "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, \
             policy_version, decision_id, requested_by, status, created_at, expires_at) \
             VALUES ('forged', '{ta}', 'inv-x', 'run-1', 't', 'd', 'p', 'd', 'me', 'approved', \
             0, 9999999999999)"
        ),
        format!("DELETE FROM intents WHERE tenant = '{ta}'"),
        // Identifying columns of an intent are not even updatable.
        format!("UPDATE intents SET tool = 'fs.read' WHERE id = '{open}'"),
        format!("UPDATE intents SET tenant = '{tb}' WHERE id = '{open}'"),
        "TRUNCATE intents".to_owned(),
        format!("DELETE FROM run_events WHERE tenant = '{ta}'"),
        format!("UPDATE run_events SET kind = 'x' WHERE tenant = '{ta}'"),
        // Tenants may only record approval requests as run events.
        format!(
            "INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at) \
             VALUES ('{ta}', 'run-1', 'approval.resolved', 'a', '{{}}', 0)"
        ),
        "SELECT * FROM tenant_roles".to_owned(),
        format!("SELECT toolgate_provision_tenant('{ta}', 'x', 'y')"),
        "CREATE TABLE squat (x int)".to_owned(),
        format!("DELETE FROM sidecar_heartbeats WHERE pod_namespace = '{ta}'"),
        format!("DELETE FROM bundle_high_water WHERE namespace = '{ta}'"),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "42501", "{sql}");
    }
    t.close().await;
}

/// Intents only move forward: backward, sideways and identity changes are
/// refused for the tenant, and the trigger guards them for every role, the
/// admin too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intents_only_move_forward_for_every_role() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let (done, open) = intents_done_and_open(&t).await;
    let (done, open) = (&done.id, &open.id);
    for sql in [
        format!("UPDATE intents SET status = 'pending' WHERE id = '{done}'"),
        format!("UPDATE intents SET status = 'error' WHERE id = '{done}'"),
        format!("UPDATE intents SET detail = 'rewritten' WHERE id = '{done}'"),
        format!("UPDATE intents SET effect_sent_at = NULL WHERE id = '{open}'"),
        format!("UPDATE intents SET status = 'completed' WHERE id = '{open}'"),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "TG001", "{sql}");
    }
    for sql in [
        format!("UPDATE intents SET tool = 'fs.read' WHERE id = '{open}'"),
        format!("UPDATE intents SET status = 'pending' WHERE id = '{done}'"),
    ] {
        assert_eq!(sqlstate(t.fx.admin_pool(), &sql).await, "TG001", "{sql}");
    }
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumed_approval_cannot_be_made_usable_again() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let req = approval_consumed(&t).await;
    assert_eq!(
        sqlstate(
            &t.pa,
            &format!(
                "UPDATE approvals SET consumed_at = NULL WHERE id = '{}'",
                req.id
            )
        )
        .await,
        "TG002"
    );
    t.close().await;
}

/// The anti-rollback mark only moves up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundle_high_water_mark_only_rises() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    profile_and_heartbeat_rows(&t).await;
    let ta = &t.ta;
    assert_eq!(
        sqlstate(
            &t.pa,
            &format!("UPDATE bundle_high_water SET sequence = 1 WHERE namespace = '{ta}'")
        )
        .await,
        "TG003"
    );
    t.close().await;
}

/// A direct insert claiming a chain position that does not continue the
/// head is refused; one claiming none is chained by the database, in the
/// legacy stream (as a sidecar of the release before streams would), from
/// its own genesis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_insert_cannot_claim_a_chain_position() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    six_decisions(&t).await;
    let (a, ta) = (&t.a, &t.ta);
    assert_eq!(
        sqlstate(
            &t.pa,
            &format!(
                "INSERT INTO decisions (tenant, seq, decision_id, run_id, step_id, tool, verdict, \
                 reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
                 VALUES ('{ta}', 1, 'forged', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0, \
                 'bogus', 'bogus')"
            )
        )
        .await,
        "TG006"
    );
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, \
         reason, policy_version, risk, args_digest, created_at) \
         VALUES ('{ta}', 'unchained', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
    ))
    .execute(&t.pa)
    .await
    .unwrap();
    let reports = a.decisions().verify(Some(ta)).await.unwrap();
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    assert_eq!(reports.iter().map(|r| r.rows).sum::<u64>(), 7);
    let legacy = a.decisions().list(ta, "legacy", 0, 10).await.unwrap();
    assert_eq!(legacy.len(), 1);
    assert_eq!(legacy[0].seq, 1);
    assert_eq!(legacy[0].prev_hash, toolgate_store::GENESIS_HASH);
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_roles_count_and_cancel_only_their_own_runs() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("ra-{}", suffix()), format!("rb-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b = fx.tenant_store(&tb).await;
    let limits = toolgate_store::RunLimits {
        max_calls: Some(5),
        ..Default::default()
    };
    let now = jiff::Timestamp::now();
    assert!(
        a.runs()
            .admit(&ta, &rid("run-1"), true, &limits, now)
            .await
            .unwrap()
            .is_admitted()
    );
    assert!(
        b.runs()
            .admit(&tb, &rid("run-1"), false, &limits, now)
            .await
            .unwrap()
            .is_admitted()
    );
    // Charging another tenant's run is refused by row-level security.
    let err = a
        .runs()
        .admit(&tb, &rid("run-1"), false, &limits, now)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");

    let pool = a.as_postgres().unwrap();
    // Counters only go up, even for the run's own tenant.
    assert_eq!(
        sqlstate(pool, "UPDATE runs SET calls = 0 WHERE run_id = 'run-1'").await,
        "TG004"
    );
    // A tenant cannot write cancellation columns directly nor see B's run.
    assert_eq!(
        sqlstate(pool, "UPDATE runs SET cancel_requested_at = NULL").await,
        "42501"
    );
    assert_eq!(count(pool, "SELECT count(*) FROM runs").await, 1);

    // Its own run: cancelled through the function, approvals reaped.
    let pending = a
        .approvals()
        .request(approval(&ta, "inv-run"), Timestamp::now())
        .await
        .unwrap();
    let cancel = a
        .runs()
        .cancel(
            &ta,
            &rid("run-1"),
            Some("stop"),
            "sidecar:pod-1",
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(
        (cancel.newly_cancelled, cancel.approvals_cancelled),
        (true, 1)
    );
    assert_eq!(
        a.approvals()
            .get(&ta, &pending.id, Timestamp::now())
            .await
            .unwrap()
            .status,
        ApprovalStatus::Cancelled
    );
    // Another tenant's run: refused, and B's run stays live.
    let err = a
        .runs()
        .cancel(
            &tb,
            &rid("run-1"),
            None,
            "sidecar:pod-1",
            jiff::Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    assert!(
        b.runs()
            .state(&tb, &rid("run-1"))
            .await
            .unwrap()
            .cancel_requested_at
            .is_none()
    );
    // And a cancellation is never withdrawn, not even by the admin role.
    let admin = fx.admin_pool();
    assert_eq!(
        sqlstate(admin, "UPDATE runs SET cancel_requested_at = NULL").await,
        "TG004"
    );
    a.close().await;
    b.close().await;
}
