//! Per-tenant PostgreSQL roles and row-level security (migration 0003): a
//! tenant role does the sidecar's work on its own tenant's rows only, is
//! refused by SQLSTATE elsewhere, sees none of another tenant's rows, and
//! counts and cancels only its own runs.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards.

use std::time::Duration;

use crate::common::rid;
use crate::common::tenants::*;
use jiff::Timestamp;
use toolgate_store::{ApprovalDecision, ApprovalStatus, ApprovedCall, IntentOutcome, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_roles_are_confined_to_their_tenant() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("ta-{}", suffix()), format!("tb-{}", suffix()));
    let creds_a = fx.provision(&ta).await;
    let creds_b = fx.provision(&tb).await;
    assert_eq!(creds_a.tenant, ta);
    assert!(creds_a.role.starts_with("tg_t_ta_"), "{}", creds_a.role);
    assert!(
        creds_a
            .database_url
            .contains(&format!("//{}:", creds_a.role))
    );
    assert!(creds_a.database_url.contains("options=-c%20search_path%3D"));
    assert!(!format!("{creds_a:?}").contains(&creds_a.database_url));

    // Connecting as a tenant checks the schema instead of migrating.
    let a = Store::connect(&creds_a.database_url)
        .await
        .expect("connect as tenant A");
    let b = Store::connect(&creds_b.database_url)
        .await
        .expect("connect as tenant B");
    a.migrate()
        .await
        .expect("tenant migrate is a version check");
    assert_eq!(a.session_tenant().await.unwrap().as_deref(), Some(&*ta));
    assert_eq!(b.session_tenant().await.unwrap().as_deref(), Some(&*tb));
    assert_eq!(fx.admin.session_tenant().await.unwrap(), None);
    let pa = a.as_postgres().unwrap().clone();
    let pb = b.as_postgres().unwrap().clone();

    // ---- the sidecar's operations work as tenant A ----------------------
    let req = a
        .approvals()
        .request(approval(&ta, "inv-1"), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(req.status, ApprovalStatus::Pending);
    assert_eq!(req.action.as_deref(), Some("delete"));
    assert_eq!(req.preview.as_deref(), Some("rm -rf /tmp/x"));
    let again = a
        .approvals()
        .request(approval(&ta, "inv-1"), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(again.id, req.id);
    let waiter = {
        let (a, ta, id) = (a.clone(), ta.clone(), req.id.clone());
        tokio::spawn(async move { a.approvals().wait(&ta, &id, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A tenant cannot resolve its own approval.
    let err = a
        .approvals()
        .resolve(
            &ta,
            &req.id,
            ApprovalDecision::Approved,
            "self",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    fx.admin
        .approvals()
        .resolve(
            &ta,
            &req.id,
            ApprovalDecision::Approved,
            "alice",
            None,
            Timestamp::now(),
        )
        .await
        .unwrap();
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.status, ApprovalStatus::Approved);
    assert_eq!(
        a.approvals()
            .list(&ta, Some(ApprovalStatus::Approved), Timestamp::now())
            .await
            .unwrap()
            .len(),
        1
    );
    let call = ApprovedCall {
        tool: "fs.delete",
        args_digest: "sha256:args",
        call_digest: CALL,
        policy_version: POLICY,
    };
    assert!(
        a.approvals()
            .consume(&ta, &req.id, &call, Timestamp::now())
            .await
            .unwrap()
    );
    assert!(
        !a.approvals()
            .consume(&ta, &req.id, &call, Timestamp::now())
            .await
            .unwrap()
    );
    assert_eq!(
        a.approvals().run_events(&ta, "run-1").await.unwrap().len(),
        2
    );

    let done = a
        .intents()
        .begin(intent(&ta), Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .mark_effect_sent(&ta, &done.id, Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .complete(
            &ta,
            &done.id,
            IntentOutcome::Completed,
            Some("ok".into()),
            Timestamp::now(),
        )
        .await
        .unwrap();
    let open = a
        .intents()
        .begin(intent(&ta), Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .mark_effect_sent(&ta, &open.id, Timestamp::now())
        .await
        .unwrap();
    let pending = a.intents().pending(&ta, "run-1").await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].intent.id, open.id);

    let first = a.decisions().append(&ta, S, record(0)).await.unwrap();
    assert_eq!(first.seq, 1);
    let batch = a
        .decisions()
        .append_batch(&ta, S, (1..6).map(record).collect())
        .await
        .unwrap();
    assert_eq!(batch.last().unwrap().seq, 6);
    let reports = a.decisions().verify(Some(&ta)).await.unwrap();
    assert!(reports[0].ok, "{reports:?}");
    assert_eq!(reports[0].rows, 6);

    assert!(
        a.profiles()
            .record_profile_load(profile_load(&ta, "default@a"), Timestamp::now())
            .await
            .unwrap()
    );
    a.profiles()
        .record_bundle_sequence(&ta, "default", 3, "sha256:b3", Timestamp::now())
        .await
        .unwrap();
    a.profiles()
        .record_bundle_sequence(&ta, "default", 5, "sha256:b5", Timestamp::now())
        .await
        .unwrap();
    a.profiles()
        .record_bundle_sequence(&ta, "default", 4, "sha256:b4", Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        a.profiles()
            .bundle_high_water(&ta, "default")
            .await
            .unwrap(),
        Some((5, "sha256:b5".to_owned()))
    );
    a.heartbeats()
        .record_heartbeat(&heartbeat(&ta, 1))
        .await
        .unwrap();
    a.heartbeats()
        .record_heartbeat(&heartbeat(&ta, 2))
        .await
        .unwrap();
    assert_eq!(a.heartbeats().list_heartbeats(None).await.unwrap().len(), 1);
    assert_eq!(
        a.profiles()
            .list_process_events(None, 0)
            .await
            .unwrap()
            .len(),
        1
    );

    // B writes a little of its own, so that A's view can be checked too.
    b.decisions().append(&tb, S, record(0)).await.unwrap();
    b.approvals()
        .request(approval(&tb, "inv-b"), Timestamp::now())
        .await
        .unwrap();
    b.heartbeats()
        .record_heartbeat(&heartbeat(&tb, 1))
        .await
        .unwrap();

    // ---- refusals by SQLSTATE, as tenant A --------------------------------
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
        format!(
            "UPDATE intents SET tool = 'fs.read' WHERE id = '{}'",
            open.id
        ),
        format!(
            "UPDATE intents SET tenant = '{tb}' WHERE id = '{}'",
            open.id
        ),
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
        assert_eq!(sqlstate(&pa, &sql).await, "42501", "{sql}");
    }
    // Forward-only intents: backward, sideways and identity changes.
    for sql in [
        format!(
            "UPDATE intents SET status = 'pending' WHERE id = '{}'",
            done.id
        ),
        format!(
            "UPDATE intents SET status = 'error' WHERE id = '{}'",
            done.id
        ),
        format!(
            "UPDATE intents SET detail = 'rewritten' WHERE id = '{}'",
            done.id
        ),
        format!(
            "UPDATE intents SET effect_sent_at = NULL WHERE id = '{}'",
            open.id
        ),
        format!(
            "UPDATE intents SET status = 'completed' WHERE id = '{}'",
            open.id
        ),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG001", "{sql}");
    }
    // The trigger guards identifying columns for every role, the admin too.
    for sql in [
        format!(
            "UPDATE intents SET tool = 'fs.read' WHERE id = '{}'",
            open.id
        ),
        format!(
            "UPDATE intents SET status = 'pending' WHERE id = '{}'",
            done.id
        ),
    ] {
        assert_eq!(sqlstate(fx.admin_pool(), &sql).await, "TG001", "{sql}");
    }
    // A consumed approval cannot be made usable again.
    assert_eq!(
        sqlstate(
            &pa,
            &format!(
                "UPDATE approvals SET consumed_at = NULL WHERE id = '{}'",
                req.id
            )
        )
        .await,
        "TG002"
    );
    // The anti-rollback mark only moves up.
    assert_eq!(
        sqlstate(
            &pa,
            &format!("UPDATE bundle_high_water SET sequence = 1 WHERE namespace = '{ta}'")
        )
        .await,
        "TG003"
    );
    // A direct insert claiming a chain position that does not continue the
    // head is refused; one claiming none is chained by the database.
    assert_eq!(
        sqlstate(
            &pa,
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
    .execute(&pa)
    .await
    .unwrap();
    // Naming no stream, it went to the legacy stream (as a sidecar of the
    // release before streams would), chained from its own genesis.
    let reports = a.decisions().verify(Some(&ta)).await.unwrap();
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    assert_eq!(reports.iter().map(|r| r.rows).sum::<u64>(), 7);
    let legacy = a.decisions().list(&ta, "legacy", 0, 10).await.unwrap();
    assert_eq!(legacy.len(), 1);
    assert_eq!(legacy[0].seq, 1);
    assert_eq!(legacy[0].prev_hash, toolgate_store::GENESIS_HASH);

    fx.admin
        .checkpoints()
        .record(&toolgate_store::Checkpoint {
            tenant: ta.clone(),
            stream: S.into(),
            seq: 6,
            hash: batch.last().unwrap().hash.clone(),
            at: jiff::Timestamp::now(),
            keyid: "k".into(),
            envelope: "{}".into(),
        })
        .await
        .unwrap();

    // ---- invisibility: B sees none of A's rows ----------------------------
    for (table, column) in [
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
    ] {
        let sql = format!("SELECT count(*) FROM {table} WHERE {column} = '{ta}'");
        assert_eq!(count(&pb, &sql).await, 0, "B sees A's {table}");
        assert!(count(fx.admin_pool(), &sql).await > 0, "admin sees {table}");
    }
    assert_eq!(count(&pb, "SELECT count(*) FROM process_events").await, 0);
    assert_eq!(
        b.approvals()
            .get(&ta, &req.id, Timestamp::now())
            .await
            .unwrap_err()
            .code(),
        "not_found"
    );
    assert_eq!(
        b.intents().get(&ta, &open.id).await.unwrap_err().code(),
        "not_found"
    );
    assert!(b.decisions().list(&ta, S, 0, 100).await.unwrap().is_empty());
    assert!(
        b.approvals()
            .list_all(None, Timestamp::now())
            .await
            .unwrap()
            .iter()
            .all(|x| x.tenant == tb)
    );
    assert_eq!(b.heartbeats().list_heartbeats(None).await.unwrap().len(), 1);
    let b_reports = b.decisions().verify(None).await.unwrap();
    assert_eq!(b_reports.len(), 1);
    assert_eq!(b_reports[0].tenant, tb);
    assert!(b.checkpoints().list(None, None).await.unwrap().is_empty());
    // B's changes to A's rows touch nothing.
    let changed = sqlx::query("UPDATE intents SET effect_sent_at = 1 WHERE id = $1")
        .bind(&open.id)
        .execute(&pb)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(changed, 0);
    // B writing rows of tenant A: refused by RLS WITH CHECK.
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
        assert_eq!(sqlstate(&pb, &sql).await, "42501", "{sql}");
    }
    for err in [
        b.approvals()
            .request(approval(&ta, "inv-b2"), Timestamp::now())
            .await
            .unwrap_err(),
        b.intents()
            .begin(intent(&ta), Timestamp::now())
            .await
            .unwrap_err(),
        b.decisions().append(&ta, S, record(9)).await.unwrap_err(),
        b.heartbeats()
            .record_heartbeat(&heartbeat(&ta, 9))
            .await
            .unwrap_err(),
        b.profiles()
            .record_bundle_sequence(&ta, "default", 9, "sha256:b9", Timestamp::now())
            .await
            .unwrap_err(),
        b.profiles()
            .record_profile_load(profile_load(&ta, "default@b"), Timestamp::now())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code(), "permission_denied", "{err}");
    }
    // A's chain is intact after all of the above.
    let reports = fx.admin.decisions().verify(None).await.unwrap();
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");

    a.close().await;
    b.close().await;
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
