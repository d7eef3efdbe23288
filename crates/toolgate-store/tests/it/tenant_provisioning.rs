//! Provisioning tenant roles (password rotation, name checks) and the
//! identity of a session, which is its login role's tenant mapping only.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards.

use crate::common::tenants::*;
use jiff::Timestamp;
use sqlx::postgres::PgPoolOptions;
use toolgate_store::{ChainedDecision, Store, TenantCredentials};

/// Provisioning an existing tenant again keeps its role and rotates its
/// password: the new URL connects as the tenant, the old password fails
/// where the server checks passwords, and the stored SCRAM verifier accepts
/// the new password only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_again_rotates_the_password() {
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

    let password = |url: &str| url::Url::parse(url).unwrap().password().unwrap().to_owned();
    let (old_password, new_password) = (
        password(&first.database_url),
        password(&second.database_url),
    );
    assert_eq!(new_password.len(), 64);
    let enforced = passwords_are_checked(&second).await;
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
    // accepts the new password only.
    if admin_is_superuser(&fx).await {
        let verifier = stored_verifier(&fx, &second.role).await;
        assert!(toolgate_store::tenancy::scram_verifier_matches(
            &verifier,
            &new_password
        ));
        assert!(!toolgate_store::tenancy::scram_verifier_matches(
            &verifier,
            &old_password
        ));
    } else if !enforced {
        eprintln!(
            "NOTE: passwords are not checked and the admin cannot read pg_authid: \
             the password rotation is not proved in this environment"
        );
    }
}

/// Does the server check passwords for `creds`' connection at all (pg_hba
/// `trust` does not)?
async fn passwords_are_checked(creds: &TenantCredentials) -> bool {
    let mut wrong = url::Url::parse(&creds.database_url).unwrap();
    wrong.set_password(Some("not-the-password")).unwrap();
    match PgPoolOptions::new()
        .max_connections(1)
        .connect(wrong.as_str())
        .await
    {
        Ok(p) => {
            p.close().await;
            false
        }
        Err(_) => true,
    }
}

async fn admin_is_superuser(fx: &Fixture) -> bool {
    sqlx::query_scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        .fetch_one(fx.admin_pool())
        .await
        .unwrap()
}

/// `role`'s password verifier as PostgreSQL stores it (needs a superuser).
async fn stored_verifier(fx: &Fixture, role: &str) -> String {
    sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
        .bind(role)
        .fetch_one(fx.admin_pool())
        .await
        .expect("read pg_authid (the test admin is a superuser)")
}

/// Our SCRAM verifier check agrees with PostgreSQL's own (with a superuser
/// admin, which can read the verifier PostgreSQL stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_scram_check_agrees_with_postgresqls_verifier() {
    let Some(fx) = Fixture::new().await else {
        return;
    };
    if !admin_is_superuser(&fx).await {
        eprintln!("NOTE: the admin cannot read pg_authid: the SCRAM check is not compared");
        return;
    }
    let probe = format!("tg_scram_probe_{}", suffix());
    sqlx::raw_sql(&format!(
        "SET password_encryption = 'scram-sha-256'; CREATE ROLE {probe} PASSWORD 'pencil'"
    ))
    .execute(fx.admin_pool())
    .await
    .unwrap();
    let pg_verifier = stored_verifier(&fx, &probe).await;
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
}

/// Names that are not Kubernetes namespaces are typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_refuses_names_that_are_not_namespaces() {
    let Some(fx) = Fixture::new().await else {
        return;
    };
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
}

/// SQLite is single-user.
#[tokio::test]
async fn sqlite_provisions_no_tenants() {
    let sqlite = Store::connect("sqlite::memory:").await.unwrap();
    let err = sqlite.provision_tenant("team-a").await.unwrap_err();
    assert_eq!(err.code(), "tenancy_unsupported");
    assert_eq!(sqlite.session_tenant().await.unwrap(), None);
    sqlite.close().await;
}

/// A tenant cannot migrate: a schema that lacks a migration is a typed
/// error when a tenant connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_connecting_to_a_schema_missing_a_migration_is_refused() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let creds = fx.provision(&format!("tr-{}", suffix())).await;
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 3")
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let err = Store::connect(&creds.database_url).await.unwrap_err();
    assert_eq!(err.code(), "schema_mismatch", "{err}");
}

/// Tenant A, provisioned, with INSERT on `decisions` taken from the tenant
/// group: A's store appends through toolgate_append_decision (migration
/// 0010), not by INSERT, so it still appends, here two decisions to stream
/// [`S`] and an intent. Returns A's tenant, credentials, store and head.
async fn appending_without_insert(
    fx: &mut Fixture,
) -> (String, TenantCredentials, Store, ChainedDecision) {
    let ta = format!("ti-{}", suffix());
    let creds = fx.provision(&ta).await;
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
    (ta, creds, a, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_appends_through_the_function_not_by_insert() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (_, _, a, _) = appending_without_insert(&mut fx).await;
    a.close().await;
}

/// A batch is one call of toolgate_append_decisions (migration 0011), not a
/// call of the single-row function per row: with the latter taken away a
/// batch still lands, whole, while a single row is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_call_of_the_batch_function() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, _, a, _) = appending_without_insert(&mut fx).await;
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
    a.close().await;
}

/// A login role made a member of the tenant group by hand is a tenant
/// session of no tenant: it sees no rows, and may not insert nor append
/// through the tenant functions, which find no mapping for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_member_of_the_tenant_group_is_no_tenant() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, creds, a, head) = appending_without_insert(&mut fx).await;
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
    a.close().await;
}

/// Two stores of A on one stream: the first one's known head goes stale
/// when the second appends; the function refuses its next row (23505 or
/// TG006) and the store re-reads the head and appends after it. The same
/// for a batch (one call of toolgate_append_decisions): refused whole and
/// retried after the second store's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_of_a_tenant_append_after_each_others_rows() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, creds, a, _) = appending_without_insert(&mut fx).await;
    let second = Store::connect(&creds.database_url).await.unwrap();
    let third = second.decisions().append(&ta, S, record(2)).await.unwrap();
    assert_eq!(third.seq, 3);
    let fourth = a.decisions().append(&ta, S, record(3)).await.unwrap();
    assert_eq!(
        (fourth.seq, fourth.prev_hash.as_str()),
        (4, third.hash.as_str())
    );
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
    a.close().await;
}

/// A's mapping removed: A's role is still in the group, so its session is
/// still a tenant session, of no tenant: it sees and writes nothing, and
/// the admin still sees every row A wrote (nothing was lost, only hidden).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_mapping_was_removed_sees_and_writes_nothing() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, creds, a, _) = appending_without_insert(&mut fx).await;
    let written = format!("SELECT count(*) FROM decisions WHERE tenant = '{ta}'");
    assert_eq!(count(fx.admin_pool(), &written).await, 2);
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
    assert_eq!(count(fx.admin_pool(), &written).await, 2);
}
