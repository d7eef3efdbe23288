//! Item 1 of issue 32 end to end, on a database of its own whose `public`
//! schema lets PUBLIC create objects (PostgreSQL 14's default, kept by
//! pg_upgrade): a tenant role plants built-in-shadowing functions there and
//! tries to have toolgate's functions run them with the owner's rights.
//!
//! The same test first performs the attack on the schema as migration 0011
//! left it, where it works (that part is the proof that the test can fail),
//! then upgrades: migration 0012 refuses to run over the planted function,
//! runs once it is dropped, takes CREATE away from tenants, and even with
//! CREATE granted back by hand no shadow ever runs.

use std::str::FromStr;

use crate::common::tenants::*;
use jiff::Timestamp;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use toolgate_store::Store;

/// A database created for one test, dropped with the roles provisioned in
/// it (also after a panic).
struct ScratchDb {
    root_url: String,
    name: String,
    url: String,
    roles: Vec<String>,
}

impl ScratchDb {
    async fn create(root_url: &str) -> ScratchDb {
        let name = format!("tg_hijack_{}", suffix());
        let root = connect(root_url).await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&root)
            .await
            .expect("create database (the test URL must be a superuser)");
        root.close().await;
        let mut url = url::Url::parse(root_url).expect("database url");
        url.set_path(&format!("/{name}"));
        ScratchDb {
            root_url: root_url.to_owned(),
            name,
            url: url.to_string(),
            roles: Vec::new(),
        }
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        let (url, name, roles) = (self.root_url.clone(), self.name.clone(), self.roles.clone());
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
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&pool)
                    .await;
                for role in roles {
                    let _ = sqlx::query(&format!("DROP ROLE IF EXISTS \"{role}\""))
                        .execute(&pool)
                        .await;
                }
                pool.close().await;
            });
        })
        .join();
    }
}

async fn connect(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// The migrations up to and including `last`, as a migrator of their own.
async fn migrations_through(last: i64) -> (tempfile::TempDir, Migrator) {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/postgres");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let version: i64 = name.split('_').next().unwrap().parse().unwrap();
        if version <= last {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    let migrator = Migrator::new(dir.path()).await.unwrap();
    (dir, migrator)
}

/// What every planted shadow does before answering as the built-in would:
/// approve every pending approval, which only the owner may. Run with a
/// tenant's own rights it is refused and keeps quiet.
const HIJACK: &str = "BEGIN UPDATE public.approvals SET status = 'approved', \
    resolved_by = 'hijack', resolved_at = 0 WHERE status = 'pending'; \
    EXCEPTION WHEN insufficient_privilege THEN NULL; END;";

/// Shadows of built-ins that toolgate's functions call, each an exact type
/// match where the built-in is polymorphic, variadic or takes `name`.
fn shadows() -> Vec<String> {
    [
        ("to_json(t text)", "json", "RETURN pg_catalog.to_json(t);"),
        (
            "convert_to(t text, e text)",
            "bytea",
            "RETURN pg_catalog.convert_to(t, e::name);",
        ),
        (
            "format(f text, a text)",
            "text",
            "RETURN pg_catalog.format(f, a);",
        ),
        (
            "format(f text, a text, b text)",
            "text",
            "RETURN pg_catalog.format(f, a, b);",
        ),
        (
            "hashtextextended(t text, s integer)",
            "bigint",
            "RETURN pg_catalog.hashtextextended(t, s::bigint);",
        ),
        (
            "cardinality(a text[])",
            "integer",
            "RETURN pg_catalog.cardinality(a);",
        ),
        (
            "json_build_object(a text, b text, c text, d text)",
            "json",
            "RETURN pg_catalog.json_build_object(a, b, c, d);",
        ),
    ]
    .into_iter()
    .map(|(signature, returns, answer)| {
        format!(
            "CREATE FUNCTION public.{signature} RETURNS {returns} LANGUAGE plpgsql AS \
             $f$ BEGIN {HIJACK} {answer} END $f$"
        )
    })
    .collect()
}

async fn status_of(admin: &PgPool, id: &str) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, resolved_by FROM approvals WHERE id = $1")
        .bind(id)
        .fetch_one(admin)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shadowing_function_never_runs_with_the_owners_rights() {
    let Some(root_url) = admin_url() else {
        return;
    };
    let mut db = ScratchDb::create(&root_url).await;
    let admin_pool = connect(&db.url).await;
    sqlx::query("GRANT CREATE ON SCHEMA public TO PUBLIC")
        .execute(&admin_pool)
        .await
        .unwrap();
    let (_dir, through_0011) = migrations_through(11).await;
    through_0011.run(&admin_pool).await.unwrap();
    let admin = Store::from_postgres_pool(admin_pool.clone());
    let (ta, tb) = (format!("va-{}", suffix()), format!("vb-{}", suffix()));
    for tenant in [&ta, &tb] {
        let creds = admin.provision_tenant_at(tenant, &db.url).await.unwrap();
        db.roles.push(creds.role);
    }
    let url_b = admin
        .provision_tenant_at(&tb, &db.url)
        .await
        .unwrap()
        .database_url;
    let b = connect(&url_b).await;

    // ---- migration 0011: the attack works ----------------------------------
    let victim = admin
        .approvals()
        .request(approval(&ta, "inv-1"), Timestamp::now())
        .await
        .unwrap();
    sqlx::raw_sql(&shadows()[0]).execute(&b).await.unwrap();
    sqlx::query("SELECT toolgate_open_decision_stream($1, 'pod-b/1', NULL)")
        .bind(&tb)
        .execute(&b)
        .await
        .unwrap();
    assert_eq!(
        status_of(&admin_pool, &victim.id).await,
        ("approved".to_owned(), Some("hijack".to_owned())),
        "the attack should work on migration 0011, or this test proves nothing"
    );

    // ---- migration 0012 ------------------------------------------------------
    let err = admin.migrate().await.unwrap_err();
    assert_eq!(err.code(), "migration_failed", "{err}");
    assert!(
        err.to_string().contains("function to_json(text)"),
        "the planted function is named: {err}"
    );
    sqlx::query("DROP FUNCTION public.to_json(text)")
        .execute(&admin_pool)
        .await
        .unwrap();
    admin.migrate().await.unwrap();
    assert_eq!(sqlstate(&b, &shadows()[0]).await, "42501");

    // CREATE granted back by hand (a mistake, or a restore): the shadows are
    // planted, and every way a tenant or the admin reaches toolgate's
    // functions leaves the victim's approval alone.
    sqlx::query("GRANT CREATE ON SCHEMA public TO PUBLIC")
        .execute(&admin_pool)
        .await
        .unwrap();
    for shadow in shadows() {
        sqlx::raw_sql(&shadow).execute(&b).await.unwrap();
    }
    let victim = admin
        .approvals()
        .request(approval(&ta, "inv-2"), Timestamp::now())
        .await
        .unwrap();
    let tenant_b = Store::connect(&url_b).await.unwrap();
    let d = tenant_b.decisions();
    d.open_stream(&tb, "pod-b/2", Some("pod-b/1"))
        .await
        .unwrap();
    d.append(&tb, "pod-b/2", record(0)).await.unwrap();
    d.append_batch(&tb, "pod-b/2", (1..4).map(record).collect())
        .await
        .unwrap();
    for sql in [
        format!(
            "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, verdict, \
             reason, policy_version, risk, args_digest, created_at) \
             VALUES ('{tb}', 'pod-b/3', 'd', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'a', 0)"
        ),
        format!("SELECT toolgate_approval_channel('{tb}')"),
        format!("SELECT * FROM toolgate_cancel_run('{tb}', 'run-b', 'x', 'me', 0)"),
    ] {
        sqlx::raw_sql(&sql).execute(&b).await.unwrap();
    }
    tenant_b
        .approvals()
        .request(approval(&tb, "inv-b"), Timestamp::now())
        .await
        .unwrap();
    let newcomer = admin
        .provision_tenant_at(&format!("vc-{}", suffix()), &db.url)
        .await
        .unwrap();
    db.roles.push(newcomer.role);
    admin
        .runs()
        .cancel(
            &tb,
            &crate::common::rid("run-b2"),
            Some("x"),
            "alice",
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(
        status_of(&admin_pool, &victim.id).await,
        ("pending".to_owned(), None),
        "a shadow ran with the owner's rights"
    );
    // The shadows changed no result either: the chains verify.
    let reports = admin.decisions().verify(Some(&tb)).await.unwrap();
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    tenant_b.close().await;
    b.close().await;
    admin_pool.close().await;
}

/// A role that may not create the schema — a tenant's credential pointed
/// at a database nobody has migrated yet — is told `schema_mismatch`
/// (what is wrong and who can fix it), not `migration_failed: permission
/// denied`, and leaves no half-made schema behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_that_may_not_migrate_gets_schema_mismatch_on_an_unmigrated_database() {
    let Some(root_url) = admin_url() else {
        return;
    };
    let mut db = ScratchDb::create(&root_url).await;
    let admin_pool = connect(&db.url).await;
    let role = format!("tg_nomig_{}", suffix());
    sqlx::raw_sql(&format!(
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC; CREATE ROLE {role} LOGIN PASSWORD 'pencil'"
    ))
    .execute(&admin_pool)
    .await
    .unwrap();
    db.roles.push(role.clone());
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(Some("pencil")).unwrap();
    let err = match Store::connect(url.as_str()).await {
        Ok(store) => store.migrate().await.expect_err("this role cannot migrate"),
        Err(e) => e,
    };
    assert_eq!(err.code(), "schema_mismatch", "{err}");
    assert!(err.to_string().contains("not migrated"), "{err}");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&admin_pool)
    .await
    .unwrap();
    assert_eq!(tables, 0, "nothing was created");
}
