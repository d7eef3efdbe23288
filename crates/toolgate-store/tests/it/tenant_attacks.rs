//! What a tenant's own database role (the credential any process in its
//! pods can read) tried against other tenants around row-level security,
//! each performed as a provisioned tenant role on the real PostgreSQL
//! (issue 32, migration 0012). Every test here fails on the schema and
//! store before that migration.

use std::time::{Duration, Instant};

use crate::common::tenants::*;
use jiff::Timestamp;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use toolgate_store::{ApprovalDecision, ApprovalStatus, Store, StoreOptions};

async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Item 1, second half: every toolgate function (SECURITY DEFINER ones
/// above all) runs with `pg_catalog` first in a pinned search path, calls
/// the built-ins an overload could shadow as `pg_catalog.name`, and no
/// tenant may create objects in the schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_toolgate_function_pins_pg_catalog_first() {
    let Some(fx) = Fixture::new().await else {
        return;
    };
    let functions: Vec<(String, bool, Option<Vec<String>>)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, p.prosecdef, p.proconfig FROM pg_catalog.pg_proc p \
         WHERE p.pronamespace = $1::regnamespace ORDER BY 1",
    )
    .bind(&fx.schema)
    .fetch_all(fx.admin_pool())
    .await
    .unwrap();
    let definers: Vec<&str> = functions
        .iter()
        .filter(|(_, definer, _)| *definer)
        .map(|(name, _, _)| name.as_str())
        .collect();
    for required in [
        "toolgate_current_tenant()",
        "toolgate_open_decision_stream(text,text,text)",
        "toolgate_approval_channel(text)",
        "toolgate_notify_approval(text,text)",
    ] {
        assert!(definers.contains(&required), "{required}: {definers:?}");
    }
    let expected = format!("search_path=pg_catalog, {}, pg_temp", fx.schema);
    for (name, _, config) in &functions {
        assert_eq!(
            config.as_deref().and_then(|c| c.first()),
            Some(&expected),
            "{name} must pin pg_catalog first: {config:?}"
        );
    }
    // No call of a built-in that an exact-typed overload could take over.
    let unqualified: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_catalog.pg_proc p \
         WHERE p.pronamespace = $1::regnamespace AND p.prosrc ~* \
         '(^|[^._a-z])(to_json|convert_to|encode|sha256|format|json_build_object|\
hashtextextended|unnest|cardinality|array_ndims|array_lower|repeat|clock_timestamp|\
pg_notify|has_database_privilege|starts_with|left|octet_length)\\s*\\('",
    )
    .bind(&fx.schema)
    .fetch_all(fx.admin_pool())
    .await
    .unwrap();
    assert!(
        unqualified.is_empty(),
        "unqualified built-ins in {unqualified:?}"
    );
    let tenant_creates: bool =
        sqlx::query_scalar("SELECT has_schema_privilege('toolgate_tenant', $1, 'CREATE')")
            .bind(&fx.schema)
            .fetch_one(fx.admin_pool())
            .await
            .unwrap();
    assert!(!tenant_creates);
}

/// Item 2: a tenant cannot register a stream whose name the store would
/// refuse, through any door: opening it, a first row, or a row without seq.
/// And the database's rule is the store's, name for name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_name_the_store_refuses_cannot_be_registered() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let ta = format!("sn-{}", suffix());
    let a = pool(&fx.provision(&ta).await.database_url).await;
    let long = "x".repeat(1100);
    for bad in [
        "x\ny",
        "   ",
        "",
        long.as_str(),
        "a\u{85}",
        "\u{3000}\u{a0}",
    ] {
        let quoted = bad.replace('\'', "''");
        for sql in [
            format!("SELECT toolgate_open_decision_stream('{ta}', '{quoted}', NULL)"),
            format!(
                "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
                 verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
                 VALUES ('{ta}', '{quoted}', 1, 'd', 'r', 's', 't', 'allow', 'x', 'p', 'low', \
                 'a', 0, (SELECT toolgate_stream_genesis('{ta}', '{quoted}', NULL, NULL, NULL)), \
                 'h')"
            ),
            format!(
                "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
                 verdict, reason, policy_version, risk, args_digest, created_at) \
                 VALUES ('{ta}', '{quoted}', 'd', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'a', 0)"
            ),
        ] {
            assert_eq!(sqlstate(&a, &sql).await, "TG005", "{bad:?}: {sql}");
        }
    }
    assert_eq!(count(&a, "SELECT count(*) FROM decision_streams").await, 0);

    // The same rule on both sides of the wire.
    let mut names: Vec<String> = [
        "ok",
        "pod-a/0190",
        " x ",
        "é",
        "\u{1F600}",
        "a b",
        "x\u{200b}",
        "\u{feff}",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    names.extend([
        "x".repeat(1024),
        "x".repeat(1025),
        "é".repeat(512),
        "é".repeat(513),
    ]);
    for c in (1u32..0x3001).filter_map(char::from_u32) {
        if c.is_whitespace() || c.is_control() || c == 'a' {
            names.push(c.to_string());
            names.push(format!("a{c}"));
        }
    }
    let sql: Vec<bool> = sqlx::query_scalar(
        "SELECT toolgate_valid_stream_name(n) FROM unnest($1::text[]) WITH ORDINALITY AS u(n, i) \
         ORDER BY i",
    )
    .bind(&names)
    .fetch_all(&a)
    .await
    .unwrap();
    for (name, in_sql) in names.iter().zip(sql) {
        let in_rust = toolgate_store::check_stream(name).is_ok();
        assert_eq!(
            in_rust, in_sql,
            "{name:?}: store {in_rust}, database {in_sql}"
        );
    }
}

/// CRC-32 (IEEE), which sqlx hashes the database name with for the key of
/// its migration lock: `0x3d32ad9e * crc32(name)`.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Item 4: a tenant holding every lock it can take (the old provisioning
/// key, sqlx's migration key, a long transaction over the identity lookup)
/// holds up neither provisioning nor a connect that has nothing to migrate,
/// cannot lock the owner's table provisioning uses, and a migration that
/// must wait for it gives up with `lock_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenants_cannot_hold_up_provisioning_or_migration() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let tb = format!("lk-{}", suffix());
    let creds_b = fx.provision(&tb).await;
    let b = pool(&creds_b.database_url).await;
    let mut held = b.acquire().await.unwrap();
    let database: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut *held)
        .await
        .unwrap();
    let migration_key = 0x3d32_ad9e_i64 * i64::from(crc32(database.as_bytes()));
    sqlx::query("SELECT pg_advisory_lock(hashtext('toolgate_provision_tenant'))")
        .execute(&mut *held)
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(migration_key)
        .execute(&mut *held)
        .await
        .unwrap();
    let mut open_tx = b.begin().await.unwrap();
    sqlx::query("SELECT toolgate_current_tenant()")
        .execute(&mut *open_tx)
        .await
        .unwrap();
    for sql in [
        "BEGIN; LOCK TABLE tenant_roles IN SHARE ROW EXCLUSIVE MODE",
        "BEGIN; LOCK TABLE tenant_roles IN ROW SHARE MODE",
        "SELECT * FROM tenant_roles FOR UPDATE",
        "BEGIN; LOCK TABLE toolgate_migration_lock IN ACCESS SHARE MODE",
        "BEGIN; LOCK TABLE toolgate_migration_lock IN EXCLUSIVE MODE",
    ] {
        // A connection of its own: a failed BEGIN must not go back to a pool.
        let once = pool(&creds_b.database_url).await;
        assert_eq!(sqlstate(&once, sql).await, "42501", "{sql}");
        once.close().await;
    }

    let started = Instant::now();
    let provisioned = tokio::time::timeout(
        Duration::from_secs(10),
        fx.provision(&format!("lk2-{}", suffix())),
    )
    .await;
    assert!(
        provisioned.is_ok(),
        "provisioning waited for a tenant's lock"
    );
    let reconnected = tokio::time::timeout(
        Duration::from_secs(10),
        Store::connect(&with_schema(&fx.base_url, &fx.schema)),
    )
    .await
    .expect("a current schema is not migrated, so no lock is awaited")
    .unwrap();
    reconnected.close().await;
    assert!(started.elapsed() < Duration::from_secs(10));

    // A schema missing a migration (row 12 forgotten, so 0012 runs again and
    // fails on what it already created) is migrated under the owner-only
    // lock table, not sqlx's key: the tenant's key holds nothing up.
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 12")
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let url = with_schema(&fx.base_url, &fx.schema);
    let short = || StoreOptions {
        lock_timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    };
    let err = tokio::time::timeout(Duration::from_secs(10), Store::connect_with(&url, short()))
        .await
        .expect("no wait for the tenant's key")
        .unwrap_err();
    assert_eq!(err.code(), "migration_failed", "{err}");
    // The lock table itself held (by another migrating process): bounded.
    let mut other = fx.admin_pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE toolgate_migration_lock IN EXCLUSIVE MODE")
        .execute(&mut *other)
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), Store::connect_with(&url, short()))
        .await
        .expect("the wait is bounded")
        .unwrap_err();
    assert_eq!(err.code(), "lock_timeout", "{err}");
    assert!(err.to_string().contains("toolgate_migration_lock"), "{err}");
    other.rollback().await.unwrap();

    // A schema older than the lock table (here: none at all) still waits
    // for sqlx's key, boundedly.
    let fresh = format!("lk_{}", suffix());
    sqlx::query(&format!("CREATE SCHEMA {fresh}"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    let options = StoreOptions {
        lock_timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    };
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        Store::connect_with(&with_schema(&fx.base_url, &fresh), options),
    )
    .await
    .expect("the wait is bounded")
    .unwrap_err();
    assert_eq!(err.code(), "lock_timeout", "{err}");
    sqlx::query(&format!("DROP SCHEMA {fresh} CASCADE"))
        .execute(fx.admin_pool())
        .await
        .unwrap();
    open_tx.rollback().await.unwrap();
    drop(held);
    b.close().await;
}

/// Item 5: intents are unique per (tenant, decision): another tenant's row
/// with the same decision id neither blocks an intent nor tells its writer
/// that one exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_block_or_probe_an_intent() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("ia-{}", suffix()), format!("ib-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b = fx.tenant_store(&tb).await;
    let with_decision = |tenant: &str, decision: &str| {
        let mut new = intent(tenant);
        new.decision_id = decision.into();
        new
    };
    // B squats the decision id A is about to use: A's intent still begins.
    b.intents()
        .begin(with_decision(&tb, "dec-victim"), Timestamp::now())
        .await
        .unwrap();
    a.intents()
        .begin(with_decision(&ta, "dec-victim"), Timestamp::now())
        .await
        .expect("another tenant's row must not block the victim's intent");
    // B probing A's decision: the same answer whether A has an intent or not.
    a.intents()
        .begin(with_decision(&ta, "dec-a"), Timestamp::now())
        .await
        .unwrap();
    b.intents()
        .begin(with_decision(&tb, "dec-a"), Timestamp::now())
        .await
        .expect("no oracle for A's decision ids");
    // Within a tenant, still one intent per decision.
    let err = a
        .intents()
        .begin(with_decision(&ta, "dec-a"), Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "intent_exists", "{err}");
    a.close().await;
    b.close().await;
}

/// Item 6: approval and cancellation wake-ups go to a channel per tenant.
/// A tenant listening on the old shared channel, or on its own, hears none
/// of another tenant's ids; it cannot learn another tenant's channel nor
/// send wake-ups; the victim's own waiters still wake at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approval_wake_ups_reach_only_their_tenant() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("wa-{}", suffix()), format!("wb-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b_pool = pool(&fx.provision(&tb).await.database_url).await;
    let own: String = sqlx::query_scalar("SELECT toolgate_approval_channel($1)")
        .bind(&tb)
        .fetch_one(&b_pool)
        .await
        .unwrap();
    let mut eavesdropper = PgListener::connect_with(&b_pool).await.unwrap();
    eavesdropper
        .listen_all(["toolgate_approvals", own.as_str()])
        .await
        .unwrap();
    for sql in [
        format!("SELECT toolgate_approval_channel('{ta}')"),
        format!("SELECT toolgate_notify_approval('{ta}', '{ta}/x')"),
        "SELECT * FROM toolgate_secrets".to_owned(),
    ] {
        assert_eq!(sqlstate(&b_pool, &sql).await, "42501", "{sql}");
    }

    let mut run_request = approval(&ta, "inv-secret");
    run_request.run_id = "secret-project-merger-q3".into();
    let req = a
        .approvals()
        .request(run_request, Timestamp::now())
        .await
        .unwrap();
    let waiter = {
        let (a, ta, id) = (a.clone(), ta.clone(), req.id.clone());
        tokio::spawn(async move { a.approvals().wait(&ta, &id, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = a
        .approvals()
        .request(approval(&ta, "inv-other"), Timestamp::now())
        .await
        .unwrap();
    let resolved_at = Instant::now();
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
    assert!(
        resolved_at.elapsed() < Duration::from_millis(900),
        "the waiter was woken, not polled: {:?}",
        resolved_at.elapsed()
    );
    for run in ["run-1", "secret-project-merger-q3"] {
        fx.admin
            .runs()
            .cancel(
                &ta,
                &crate::common::rid(run),
                Some("stop"),
                "alice",
                Timestamp::now(),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        fx.admin
            .approvals()
            .get(&ta, &other.id, Timestamp::now())
            .await
            .unwrap()
            .status,
        ApprovalStatus::Cancelled
    );
    let heard = tokio::time::timeout(Duration::from_millis(1500), eavesdropper.recv()).await;
    assert!(heard.is_err(), "another tenant heard {heard:?}");
    a.close().await;
    b_pool.close().await;
}

/// Also of issue 32: profile loads and process events are keyed by tenant.
/// A tenant can neither record a load naming another tenant's pod nor, by
/// writing first, suppress another tenant's load row or event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_suppress_a_profile_load() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("pa-{}", suffix()), format!("pb-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b = fx.tenant_store(&tb).await;
    let pb = b.as_postgres().unwrap().clone();
    let version = "default@0123456789ab+h01234567";
    // B claims A's pod as its loader (the row's namespace is B's own).
    let mut forged = profile_load(&tb, version);
    forged.loaded_by = format!("sidecar:{ta}/pod-1");
    let err = b
        .profiles()
        .record_profile_load(forged, Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "permission_denied", "{err}");
    // B's own load of the same version, and a squat on the event key.
    assert!(
        b.profiles()
            .record_profile_load(profile_load(&tb, version), Timestamp::now())
            .await
            .unwrap()
    );
    let key =
        toolgate_policy::digest::sha256_hex(format!("policy.profile.loaded:{version}").as_bytes());
    sqlx::query(
        "INSERT INTO process_events (kind, idempotency_key, payload, created_at) \
         VALUES ('policy.profile.loaded', $1, '{}', 0) ON CONFLICT DO NOTHING",
    )
    .bind(&key)
    .execute(&pb)
    .await
    .unwrap();
    // A's load is recorded, with its event.
    assert!(
        a.profiles()
            .record_profile_load(profile_load(&ta, version), Timestamp::now())
            .await
            .unwrap(),
        "A's profile-loaded event was suppressed"
    );
    let rows = fx
        .admin
        .profiles()
        .list_profile_versions(None)
        .await
        .unwrap();
    let mine: Vec<&str> = rows
        .iter()
        .filter(|v| v.load.namespace == ta)
        .map(|v| v.load.loaded_by.as_str())
        .collect();
    assert_eq!(mine, [format!("sidecar:{ta}/pod-1")]);
    assert_eq!(
        a.profiles()
            .list_process_events(None, 0)
            .await
            .unwrap()
            .len(),
        1
    );
    a.close().await;
    b.close().await;
}
