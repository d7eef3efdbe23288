//! Per-tenant PostgreSQL roles and row-level security (migration 0003),
//! against a real PostgreSQL.
//!
//! The admin URL comes from `TOOLGATE_TEST_DATABASE_URL` (a superuser or a
//! role with CREATEROLE). Unset, these tests print a skip notice and pass,
//! unless `CI=true`, in which case they fail. Each test migrates its own
//! schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards.

use crate::common::rid;
use std::time::Duration;

use crate::common::tenants::*;
use jiff::Timestamp;
use sqlx::postgres::PgPoolOptions;
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
async fn provisioning_rotates_the_password_and_checks_names() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let tenant = format!("tr-{}", suffix());
    let first = fx.provision(&tenant).await;
    let store = Store::connect(&first.database_url)
        .await
        .expect("first url connects");
    store.close().await;
    let second = fx.provision(&tenant).await;
    assert_eq!(first.role, second.role);
    assert_ne!(first.database_url, second.database_url);
    let store = Store::connect(&second.database_url)
        .await
        .expect("new url connects");
    assert_eq!(
        store.session_tenant().await.unwrap().as_deref(),
        Some(&*tenant)
    );
    store.close().await;

    let old_password = url::Url::parse(&first.database_url)
        .unwrap()
        .password()
        .unwrap()
        .to_owned();
    let new_password = url::Url::parse(&second.database_url)
        .unwrap()
        .password()
        .unwrap()
        .to_owned();
    assert_eq!(new_password.len(), 64);
    // Does the server check passwords for this connection at all (pg_hba
    // `trust` does not)?
    let mut wrong = url::Url::parse(&second.database_url).unwrap();
    wrong.set_password(Some("not-the-password")).unwrap();
    let enforced = match PgPoolOptions::new()
        .max_connections(1)
        .connect(wrong.as_str())
        .await
    {
        Ok(p) => {
            p.close().await;
            false
        }
        Err(_) => true,
    };
    if enforced {
        let err = PgPoolOptions::new()
            .max_connections(1)
            .connect(&first.database_url)
            .await
            .expect_err("the rotated-out password must fail");
        let code = err
            .as_database_error()
            .and_then(|d| d.code().map(|c| c.into_owned()));
        assert_eq!(code.as_deref(), Some("28P01"), "{err}");
    } else {
        eprintln!(
            "NOTE: the server does not check passwords for this connection (pg_hba trust), \
             so the rotation is proved on the stored SCRAM verifier instead of by a 28P01 login"
        );
    }
    // With a superuser admin, also check the stored verifier directly: it
    // accepts the new password only, and our SCRAM implementation agrees
    // with PostgreSQL's own.
    let superuser: bool =
        sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .fetch_one(fx.admin_pool())
            .await
            .unwrap();
    if superuser {
        let verifier: String =
            sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
                .bind(&second.role)
                .fetch_one(fx.admin_pool())
                .await
                .expect("read pg_authid (the test admin is a superuser)");
        assert!(toolgate_store::tenancy::scram_verifier_matches(
            &verifier,
            &new_password
        ));
        assert!(!toolgate_store::tenancy::scram_verifier_matches(
            &verifier,
            &old_password
        ));
        // And our SCRAM implementation agrees with PostgreSQL's own.
        let probe = format!("tg_scram_probe_{}", suffix());
        sqlx::raw_sql(&format!(
            "SET password_encryption = 'scram-sha-256'; CREATE ROLE {probe} PASSWORD 'pencil'"
        ))
        .execute(fx.admin_pool())
        .await
        .unwrap();
        let pg_verifier: String =
            sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
                .bind(&probe)
                .fetch_one(fx.admin_pool())
                .await
                .unwrap();
        sqlx::raw_sql(&format!("DROP ROLE {probe}"))
            .execute(fx.admin_pool())
            .await
            .unwrap();
        assert!(toolgate_store::tenancy::scram_verifier_matches(
            &pg_verifier,
            "pencil"
        ));
        assert!(!toolgate_store::tenancy::scram_verifier_matches(
            &pg_verifier,
            "pencil!"
        ));
    } else if !enforced {
        eprintln!(
            "NOTE: passwords are not checked and the admin cannot read pg_authid: \
             the password rotation is not proved in this environment"
        );
    }

    // Names that are not Kubernetes namespaces are typed errors.
    for bad in [
        "",
        "Team-A",
        "team_a",
        "-a",
        "a-",
        "a.b",
        &"x".repeat(64),
        "t\u{e9}",
    ] {
        let err = fx.admin.provision_tenant(bad).await.unwrap_err();
        assert_eq!(err.code(), "invalid_input", "{bad:?}: {err}");
    }
    // SQLite is single-user.
    let sqlite = Store::connect("sqlite::memory:").await.unwrap();
    let err = sqlite.provision_tenant("team-a").await.unwrap_err();
    assert_eq!(err.code(), "tenancy_unsupported");
    assert_eq!(sqlite.session_tenant().await.unwrap(), None);
    sqlite.close().await;

    // A tenant cannot migrate: a schema that lacks a migration is a typed
    // error when a tenant connects.
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 3")
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let err = Store::connect(&second.database_url).await.unwrap_err();
    assert_eq!(err.code(), "schema_mismatch", "{err}");
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

/// Streams under tenant roles: a tenant opens and appends to streams of its
/// own tenant only, never chooses a chain position, cannot reset, reopen or
/// write checkpoints, and its streams chain independently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_streams_are_confined_and_unforgeable() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("ta-{}", suffix()), format!("tb-{}", suffix()));
    let creds_a = fx.provision(&ta).await;
    let creds_b = fx.provision(&tb).await;
    let a = Store::connect(&creds_a.database_url).await.unwrap();
    let b = Store::connect(&creds_b.database_url).await.unwrap();
    let pa = a.as_postgres().unwrap().clone();
    let pb = b.as_postgres().unwrap().clone();

    // A opens its first stream, appends, then "restarts" into a second one
    // linked to the first's head.
    let s1 = "pod-a/1";
    let s2 = "pod-a/2";
    let opened = a.decisions().open_stream(&ta, s1, None).await.unwrap();
    assert_eq!(opened.seq, 0);
    let rows = a
        .decisions()
        .append_batch(&ta, s1, (0..3).map(record).collect())
        .await
        .unwrap();
    assert_eq!(rows[0].prev_hash, opened.hash);
    assert_eq!(
        a.decisions()
            .latest_stream(&ta, "pod-a/")
            .await
            .unwrap()
            .as_deref(),
        Some(s1)
    );
    let second = a.decisions().open_stream(&ta, s2, Some(s1)).await.unwrap();
    let link = second.previous.clone().unwrap();
    assert_eq!((link.stream.as_str(), link.seq), (s1, 3));
    assert_eq!(link.hash, rows[2].hash);
    let first2 = a.decisions().append(&ta, s2, record(9)).await.unwrap();
    assert_eq!(first2.seq, 1);
    assert_eq!(first2.prev_hash, second.hash);
    // B's stream of the same name is another chain.
    let b1 = b.decisions().append(&tb, s1, record(0)).await.unwrap();
    assert_eq!(b1.seq, 1);

    // Refusals: another tenant's stream, reopening, legacy, a made-up
    // previous stream.
    for err in [
        b.decisions()
            .open_stream(&ta, "pod-b/x", None)
            .await
            .unwrap_err(),
        b.decisions().append(&ta, s1, record(5)).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "permission_denied", "{err}");
    }
    assert_eq!(
        a.decisions()
            .open_stream(&ta, s1, None)
            .await
            .unwrap_err()
            .code(),
        "conflict"
    );
    assert_eq!(
        a.decisions()
            .open_stream(&ta, "legacy", None)
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    assert_eq!(
        a.decisions()
            .open_stream(&ta, "pod-a/3", Some("nope"))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    // The link is read by the database: B cannot link to A's stream either.
    assert_eq!(
        b.decisions()
            .open_stream(&tb, "pod-b/2", Some(s2))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    for sql in [
        format!("UPDATE decision_streams SET seq = 0 WHERE tenant = '{ta}' AND stream = '{s1}'"),
        format!("DELETE FROM decision_streams WHERE tenant = '{ta}' AND stream = '{s1}'"),
        format!(
            "INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash) \
             VALUES ('{ta}', 'pod-a/9', 5, '', '')"
        ),
        format!("DELETE FROM decisions WHERE tenant = '{ta}' AND stream = '{s1}'"),
        format!("UPDATE decisions SET stream = 'pod-a/9' WHERE tenant = '{ta}'"),
        format!(
            "INSERT INTO checkpoints (tenant, stream, seq, hash, at, keyid, envelope) \
             VALUES ('{ta}', '{s1}', 1, 'h', 0, 'k', 'e')"
        ),
        format!("SELECT toolgate_open_decision_stream('{tb}', 'pod-x/1', NULL)"),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "42501", "{sql}");
    }
    assert_eq!(
        sqlstate(
            &pb,
            &format!(
                "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
                 verdict, reason, policy_version, risk, args_digest, created_at) \
                 VALUES ('{ta}', '{s1}', 'x', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
            )
        )
        .await,
        "42501"
    );
    // The heads view of earlier releases reads with the caller's rights: A
    // sees its own heads (at the last row), never B's.
    let (seq, hash): (i64, String) = sqlx::query_as(&format!(
        "SELECT seq, hash FROM decision_heads WHERE tenant = '{ta}' AND stream = '{s1}'"
    ))
    .fetch_one(&pa)
    .await
    .unwrap();
    let last = a.decisions().head(&ta, s1).await.unwrap().unwrap();
    assert_eq!((seq, hash), (last.seq, last.hash));
    assert!(last.seq > 0);
    assert_eq!(
        count(
            &pa,
            &format!("SELECT count(*) FROM decision_heads WHERE tenant = '{tb}'")
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &pb,
            &format!(
                "SELECT count(*) FROM decision_heads WHERE tenant = '{tb}' AND stream = '{s1}'"
            )
        )
        .await,
        1
    );
    // A direct insert must continue its stream's last row: a made-up seq and
    // the next seq with a made-up prev_hash are refused (TG006), a rewind to
    // a taken seq with the right prev_hash by the primary key (23505), and
    // the chain is unchanged.
    let s1_rows = a.decisions().list(&ta, s1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    let forged = |seq: i64, prev: &str| {
        format!(
            "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
             verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
             VALUES ('{ta}', '{s1}', {seq}, 'forged', 'r', 's', 't', 'allow', 'x', 'p', 'low', \
             'd', 0, '{prev}', '{}')",
            "f".repeat(64)
        )
    };
    for sql in [
        forged(1000, "bogus"),
        forged(head.seq + 1, "bogus"),
        forged(1, &"0".repeat(64)),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    for sql in [
        forged(head.seq, &s1_rows[s1_rows.len() - 2].hash),
        forged(1, &s1_rows[0].prev_hash),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "23505", "{sql}");
    }
    // The same through the append function a tenant's store calls
    // (migration 0010), which inserts with the owner's rights: it checks
    // the link and the tenant itself, and the primary key still holds.
    let forged_call = |tenant: &str, seq: &str, prev: &str| {
        format!(
            "SELECT toolgate_append_decision('{tenant}', 'forged', 'r', 's', 't', 'allow', 'x', \
             NULL, NULL, 'p', 'low', 'd', 0, NULL, NULL, '{s1}', {seq}, '{prev}', '{}')",
            "f".repeat(64)
        )
    };
    for sql in [
        forged_call(&ta, "1000", "bogus"),
        forged_call(&ta, &(head.seq + 1).to_string(), "bogus"),
        forged_call(&ta, "1", &"0".repeat(64)),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    for sql in [
        forged_call(&ta, &head.seq.to_string(), &s1_rows[s1_rows.len() - 2].hash),
        forged_call(&ta, "1", &s1_rows[0].prev_hash),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "23505", "{sql}");
    }
    assert_eq!(
        sqlstate(&pa, &forged_call(&ta, "NULL", &head.hash)).await,
        "22004"
    );
    assert_eq!(
        sqlstate(&pa, &forged_call(&ta, "0", &head.hash)).await,
        "23514"
    );
    // B appending to A's stream, even with the right link: refused before
    // the link is looked at, so B learns nothing of A's chain.
    for sql in [
        forged_call(&ta, &(head.seq + 1).to_string(), &head.hash),
        forged_call(&ta, &(head.seq + 1).to_string(), "bogus"),
    ] {
        assert_eq!(sqlstate(&pb, &sql).await, "42501", "{sql}");
    }
    // The owner's session is no tenant: it inserts directly, and the
    // function refuses it too.
    assert_eq!(
        sqlstate(
            fx.admin_pool(),
            &forged_call(&ta, &(head.seq + 1).to_string(), &head.hash)
        )
        .await,
        "42501"
    );
    // The batch function (migration 0011) checks the same, once for the
    // batch: its first row's link, the tenant before the link, the taken
    // seqs; and refuses arrays that do not line up.
    let batch = |tenant: &str, seq: &str, prev: &str, rows: usize, short: bool| {
        let texts = |value: &str| {
            let n = if short { rows - 1 } else { rows };
            format!(
                "ARRAY[{}]::text[]",
                vec![format!("'{value}'"); n].join(", ")
            )
        };
        let all = |value: &str| format!("ARRAY[{}]::text[]", vec![value; rows].join(", "));
        let hashes: Vec<String> = (0..rows)
            .map(|i| format!("'{}'", char::from(b'a' + i as u8).to_string().repeat(64)))
            .collect();
        format!(
            "SELECT toolgate_append_decisions('{tenant}', '{s1}', {seq}, '{prev}', \
             {ids}, {r}, {r}, {r}, {allow}, {r}, {null}, {null}, {r}, {low}, {r}, \
             ARRAY[{zeros}]::bigint[], {null}, {null}, ARRAY[{hashes}]::text[])",
            ids = texts("forged"),
            r = all("'r'"),
            allow = all("'allow'"),
            low = all("'low'"),
            null = all("NULL"),
            zeros = vec!["0"; rows].join(", "),
            hashes = hashes.join(", "),
        )
    };
    let next = (head.seq + 1).to_string();
    for sql in [
        batch(&ta, "1000", &head.hash, 2, false),
        batch(&ta, &next, "bogus", 2, false),
        batch(&ta, "1", &"0".repeat(64), 3, false),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    // Overlapping the chain from a taken seq, with that seq's true link.
    let taken = (head.seq - 1).to_string();
    assert_eq!(
        sqlstate(
            &pa,
            &batch(&ta, &taken, &s1_rows[s1_rows.len() - 3].hash, 3, false)
        )
        .await,
        "23505"
    );
    for sql in [
        batch(&ta, &next, &head.hash, 3, true),
        batch(&ta, &next, &head.hash, 0, false),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "22023", "{sql}");
    }
    // Row i's link is the hash array's element i - 1: an array indexed
    // from 0, or one of two dimensions, would shift or blank the links, so
    // it is refused rather than read.
    let (ha, hb) = ("a".repeat(64), "b".repeat(64));
    let listed = format!("ARRAY['{ha}', '{hb}']::text[]");
    let two_rows = batch(&ta, &next, &head.hash, 2, false);
    assert!(two_rows.contains(&listed), "{two_rows}");
    for hashes in [
        format!("'[0:1]={{{ha},{hb}}}'::text[]"),
        format!("ARRAY[['{ha}'], ['{hb}']]::text[]"),
    ] {
        let sql = two_rows.replace(&listed, &hashes);
        assert_eq!(sqlstate(&pa, &sql).await, "22023", "{sql}");
    }
    assert_eq!(
        sqlstate(&pa, &batch(&ta, "NULL", &head.hash, 2, false)).await,
        "22004"
    );
    for pool in [&pb, fx.admin_pool()] {
        for sql in [
            batch(&ta, &next, &head.hash, 2, false),
            batch(&ta, &next, "bogus", 2, false),
        ] {
            assert_eq!(sqlstate(pool, &sql).await, "42501", "{sql}");
        }
    }
    assert_eq!(
        a.decisions().list(&ta, s1, 0, 100).await.unwrap().len(),
        s1_rows.len(),
        "a refused batch left rows behind"
    );
    // Naming no seq (a sidecar of an earlier release), the row is chained
    // by the trigger at the stream's next position.
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at) \
         VALUES ('{ta}', '{s1}', 'old-release', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
    ))
    .execute(&pa)
    .await
    .unwrap();
    let s1_rows = a.decisions().list(&ta, s1, 0, 100).await.unwrap();
    assert_eq!(
        s1_rows.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(s1_rows[3].prev_hash, rows[2].hash);
    assert_eq!(s1_rows[3].record.decision_id, "old-release");

    // Every stream verifies, on its own and together; the link of s2 still
    // holds (s1 grew past it, which is fine).
    let reports = fx.admin.decisions().verify(Some(&ta)).await.unwrap();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    assert!(a.decisions().verify_stream(&ta, s2).await.unwrap().ok);
    // B sees only its own stream.
    let b_reports = b.decisions().verify(None).await.unwrap();
    assert_eq!(b_reports.len(), 1);
    assert_eq!(
        (b_reports[0].tenant.as_str(), b_reports[0].stream.as_str()),
        (tb.as_str(), s1)
    );

    // A row that continues the head but whose hash does not match its
    // content is accepted (the writer computes hashes) and is what verify
    // reports: here the first row of a stream nobody opened.
    let genesis = toolgate_store::genesis_hash(&ta, "pod-a/forged", None).unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
         VALUES ('{ta}', 'pod-a/forged', 1, 'forged', 'r', 's', 't', 'allow', 'x', 'p', \
         'low', 'd', 0, '{genesis}', '{}')",
        "f".repeat(64)
    ))
    .execute(&pa)
    .await
    .unwrap();
    let forged = a
        .decisions()
        .verify_stream(&ta, "pod-a/forged")
        .await
        .unwrap();
    assert!(!forged.ok, "{forged:?}");
    assert_eq!(forged.first_broken_seq, Some(1), "{forged:?}");
    // The sidecar's stream next to it still verifies.
    assert!(a.decisions().verify_stream(&ta, s1).await.unwrap().ok);

    // A high-risk call's run charge and decision, as a tenant role: the
    // head is read in the transaction (a tenant may not lock heads) and the
    // row continues it.
    let (_, charged) = a
        .runs()
        .admit_and_record(
            &ta,
            s1,
            &rid("run-t"),
            true,
            &toolgate_store::RunLimits::default(),
            Timestamp::now(),
            |_| record(40),
        )
        .await
        .unwrap();
    assert_eq!(charged.seq, 5);
    assert_eq!(charged.prev_hash, s1_rows[3].hash);
    let next = a.decisions().append(&ta, s1, record(41)).await.unwrap();
    assert_eq!(
        (next.seq, next.prev_hash.as_str()),
        (6, charged.hash.as_str())
    );
    assert!(a.decisions().verify_stream(&ta, s1).await.unwrap().ok);

    // A batch is chained by the function, not by the caller: each row after
    // the first takes the row before it as its link and the next seq, and
    // the count inserted is returned.
    let raw = "pod-a/raw-batch";
    let genesis = toolgate_store::genesis_hash(&ta, raw, None).unwrap();
    let hashes: Vec<String> = ["1", "2", "3"].iter().map(|d| d.repeat(64)).collect();
    let inserted: i64 = sqlx::query_scalar(
        "SELECT toolgate_append_decisions($1, $2, 1, $3, $4, $4, $4, $4, $5, $4, $6, $6, $4, \
         $7, $4, $8, $6, $6, $9)",
    )
    .bind(&ta)
    .bind(raw)
    .bind(&genesis)
    .bind(vec!["x"; 3])
    .bind(vec!["allow"; 3])
    .bind(vec![None::<String>; 3])
    .bind(vec!["low"; 3])
    .bind(vec![0_i64; 3])
    .bind(&hashes)
    .fetch_one(&pa)
    .await
    .unwrap();
    assert_eq!(inserted, 3);
    let chained: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT seq, prev_hash, hash FROM decisions WHERE tenant = $1 AND stream = $2 \
         ORDER BY seq",
    )
    .bind(&ta)
    .bind(raw)
    .fetch_all(&pa)
    .await
    .unwrap();
    assert_eq!(
        chained,
        vec![
            (1, genesis.clone(), hashes[0].clone()),
            (2, hashes[0].clone(), hashes[1].clone()),
            (3, hashes[1].clone(), hashes[2].clone()),
        ]
    );

    a.close().await;
    b.close().await;
}

/// The tenant of a session is its login role's mapping, nothing else: a
/// role given the tenant group's rights by hand without a mapping, and a
/// tenant role whose mapping was removed, see and write no tenant's rows
/// (the pinned search paths are tenant_attacks.rs's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_identity_follows_the_login_role_mapping() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let ta = format!("ti-{}", suffix());
    let creds = fx.provision(&ta).await;
    // A tenant's store appends through toolgate_append_decision (migration
    // 0010), not by INSERT: it still appends with INSERT taken away.
    sqlx::query("REVOKE INSERT ON decisions FROM toolgate_tenant")
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let a = Store::connect(&creds.database_url).await.unwrap();
    a.decisions().append(&ta, S, record(0)).await.unwrap();
    let head = a.decisions().append(&ta, S, record(1)).await.unwrap();
    assert_eq!(head.seq, 2);
    a.intents()
        .begin(intent(&ta), Timestamp::now())
        .await
        .unwrap();
    let pa = a.as_postgres().unwrap().clone();
    assert_eq!(count(&pa, "SELECT count(*) FROM decisions").await, 2);
    // A batch is one call of toolgate_append_decisions (migration 0011), not
    // a call of the single-row function per row: with the latter taken away
    // a batch still lands, whole, while a single row is refused.
    const SINGLE: &str = "FUNCTION toolgate_append_decision(text, text, text, text, text, text, \
         text, text, text, text, text, text, bigint, text, text, text, bigint, text, text)";
    sqlx::raw_sql(&format!("REVOKE EXECUTE ON {SINGLE} FROM toolgate_tenant"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let batched = a
        .decisions()
        .append_batch(&ta, "pod-a/batched", (0..3).map(record).collect())
        .await
        .unwrap();
    assert_eq!(
        batched.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let err = a
        .decisions()
        .append(&ta, "pod-a/batched", record(3))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    sqlx::raw_sql(&format!("GRANT EXECUTE ON {SINGLE} TO toolgate_tenant"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    assert!(
        a.decisions()
            .verify_stream(&ta, "pod-a/batched")
            .await
            .unwrap()
            .ok
    );

    // A login role made a member of the tenant group by hand.
    let rogue = format!("tg_rogue_{}", suffix());
    sqlx::raw_sql(&format!(
        "CREATE ROLE {rogue} LOGIN PASSWORD 'pencil'; GRANT toolgate_tenant TO {rogue}"
    ))
    .execute(fx.admin_pool())
    .await
    .unwrap();
    fx.roles.push(rogue.clone());
    let rogue_url = {
        // A's URL (host, database, search path) with the rogue's credentials.
        let (scheme, rest) = creds.database_url.split_once("//").unwrap();
        let (_, host) = rest.split_once('@').unwrap();
        format!("{scheme}//{rogue}:pencil@{host}")
    };
    let rogue_pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&rogue_url)
        .await
        .expect("connect as the hand-made member");
    let is_tenant: bool = sqlx::query_scalar("SELECT toolgate_tenant_session()")
        .fetch_one(&rogue_pool)
        .await
        .unwrap();
    assert!(is_tenant, "a member of toolgate_tenant is a tenant session");
    for table in ["decisions", "intents", "decision_streams"] {
        let sql = format!("SELECT count(*) FROM {table}");
        assert_eq!(count(&rogue_pool, &sql).await, 0, "{table}");
    }
    for sql in [
        format!(
            "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, \
             reason, policy_version, risk, args_digest, created_at) \
             VALUES ('{ta}', 'x', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
        ),
        // It may execute the tenant append function, which finds no
        // mapping for it.
        format!(
            "SELECT toolgate_append_decision('{ta}', 'x', 'r', 's', 't', 'allow', 'x', NULL, \
             NULL, 'p', 'low', 'd', 0, NULL, NULL, '{S}', 3, '{}', '{}')",
            head.hash,
            "f".repeat(64)
        ),
        format!(
            "SELECT toolgate_append_decisions('{ta}', '{S}', 3, '{}', ARRAY['x'], ARRAY['r'], \
             ARRAY['s'], ARRAY['t'], ARRAY['allow'], ARRAY['x'], ARRAY[NULL], ARRAY[NULL], \
             ARRAY['p'], ARRAY['low'], ARRAY['d'], ARRAY[0::bigint], ARRAY[NULL], \
             ARRAY[NULL], ARRAY['{}'])",
            head.hash,
            "f".repeat(64)
        ),
    ] {
        assert_eq!(sqlstate(&rogue_pool, &sql).await, "42501", "{sql}");
    }
    rogue_pool.close().await;

    // Two stores of A on one stream: the first one's known head goes stale
    // when the second appends; the function refuses its next row (23505 or
    // TG006) and the store re-reads the head and appends after it.
    let second = Store::connect(&creds.database_url).await.unwrap();
    let third = second.decisions().append(&ta, S, record(2)).await.unwrap();
    assert_eq!(third.seq, 3);
    let fourth = a.decisions().append(&ta, S, record(3)).await.unwrap();
    assert_eq!(
        (fourth.seq, fourth.prev_hash.as_str()),
        (4, third.hash.as_str())
    );
    // The same for a batch (one call of toolgate_append_decisions): the
    // first store's head is stale again, its batch is refused whole and
    // retried after the second store's row.
    let fifth = second.decisions().append(&ta, S, record(4)).await.unwrap();
    let batch = a
        .decisions()
        .append_batch(&ta, S, (5..8).map(record).collect())
        .await
        .unwrap();
    assert_eq!(
        batch.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![6, 7, 8]
    );
    assert_eq!(batch[0].prev_hash, fifth.hash);
    assert_eq!(batch[2].prev_hash, batch[1].hash);
    second.close().await;
    assert!(fx.admin.decisions().verify_stream(&ta, S).await.unwrap().ok);

    // A's mapping removed: A's role is still in the group, so its session is
    // still a tenant session, of no tenant.
    sqlx::query("DELETE FROM tenant_roles WHERE role = $1")
        .bind(&creds.role)
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let unmapped = PgPoolOptions::new()
        .max_connections(1)
        .connect(&creds.database_url)
        .await
        .unwrap();
    for table in ["decisions", "intents", "decision_streams"] {
        let sql = format!("SELECT count(*) FROM {table}");
        assert_eq!(count(&unmapped, &sql).await, 0, "{table}");
    }
    let err = a.decisions().append(&ta, S, record(8)).await.unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    unmapped.close().await;
    a.close().await;
    // The admin still sees A's rows: nothing was lost, only hidden.
    assert_eq!(
        count(
            fx.admin_pool(),
            &format!("SELECT count(*) FROM decisions WHERE tenant = '{ta}'")
        )
        .await,
        11
    );
}
