//! Test harness: runs each test body against SQLite (temp file) and
//! PostgreSQL (fresh schema per test).
//!
//! PostgreSQL comes from `TOOLGATE_TEST_DATABASE_URL`. When it is unset the
//! PostgreSQL variant prints a skip notice and passes, unless `CI=true`, in
//! which case it fails: CI must prove both backends. A set but unreachable
//! URL always fails.
//!
//! With `TOOLGATE_TEST_THROUGH_POOLER=1` and `TOOLGATE_TEST_POOLER_URL`
//! (a PgBouncer in `pool_mode = transaction` in front of the same server,
//! accepting SCRAM logins of any role through `auth_query`), the
//! PostgreSQL variant reaches the database through that pooler instead: each test gets a role of its
//! own whose `search_path` is its schema (a pooler passes no startup
//! options), the store connects through the pooler with
//! [`StoreOptions::transaction_pooler`], and migrates over the direct URL.

pub mod builders;
pub mod faults;
pub mod tenant_rows;
pub mod tenants;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use toolgate_store::{Store, StoreOptions};

pub struct TestDb {
    pub store: Store,
    /// PostgreSQL: a pool of sessions on the test's schema for raw SQL
    /// beside the store (straight to the server when the store goes
    /// through a pooler, which keeps no session state between statements).
    raw_pg: Option<sqlx::PgPool>,
    cleanup: Cleanup,
}

enum Cleanup {
    Sqlite {
        /// Held so the database file lives as long as the store.
        _dir: tempfile::TempDir,
        url: String,
    },
    Postgres {
        admin: sqlx::PgPool,
        schema: String,
        options: Box<PgConnectOptions>,
        /// Through a pooler: the pooler's and the direct URL of the test's
        /// own role.
        pooled: Option<(String, String)>,
    },
}

impl TestDb {
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("store.db").display()
        );
        let store = Store::connect_with(
            &url,
            StoreOptions {
                max_connections: 8,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("connect sqlite");
        TestDb {
            store,
            raw_pg: None,
            cleanup: Cleanup::Sqlite { _dir: dir, url },
        }
    }

    /// `None` means "skip": no database configured outside CI.
    pub async fn postgres() -> Option<TestDb> {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let url = match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
            Ok(u) if !u.is_empty() => u,
            _ if ci => panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set"),
            _ => {
                eprintln!(
                    "SKIP postgres variant: set TOOLGATE_TEST_DATABASE_URL to run it \
                     (it is required when CI=true)"
                );
                return None;
            }
        };
        let options = PgConnectOptions::from_str(&url).expect("parse TOOLGATE_TEST_DATABASE_URL");
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .unwrap_or_else(|e| {
                panic!("PostgreSQL at TOOLGATE_TEST_DATABASE_URL unreachable: {e}")
            });
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let through_pooler = std::env::var("TOOLGATE_TEST_THROUGH_POOLER").is_ok_and(|v| v == "1");
        let pooled = match std::env::var("TOOLGATE_TEST_POOLER_URL") {
            Ok(pooler) if through_pooler => Some(pooled_role(&admin, &pooler, &url, &schema).await),
            _ if through_pooler => {
                panic!("TOOLGATE_TEST_THROUGH_POOLER=1 needs TOOLGATE_TEST_POOLER_URL")
            }
            _ => {
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(&admin)
                    .await
                    .expect("create schema");
                None
            }
        };
        let store = match &pooled {
            Some((pooler, direct)) => pooled_store(pooler, direct, 16).await,
            None => {
                let store = pg_store(&options, &schema, 16).await;
                store.migrate().await.expect("migrate postgres");
                store
            }
        };
        let raw_pg = match &pooled {
            Some((_, direct)) => PgPoolOptions::new()
                .max_connections(2)
                .connect(direct)
                .await
                .expect("connect straight to the server as the test's role"),
            None => store.as_postgres().expect("a postgres store").clone(),
        };
        Some(TestDb {
            store,
            raw_pg: Some(raw_pg),
            cleanup: Cleanup::Postgres {
                admin,
                schema,
                options: Box::new(options),
                pooled,
            },
        })
    }

    /// Drops the pool and opens a new one on the same database, as a process
    /// restart would.
    pub async fn reconnect(&mut self) {
        self.store.close().await;
        self.store = match &self.cleanup {
            Cleanup::Sqlite { url, .. } => Store::connect(url).await.expect("reconnect sqlite"),
            Cleanup::Postgres {
                pooled: Some((pooler, direct)),
                ..
            } => pooled_store(pooler, direct, 16).await,
            Cleanup::Postgres {
                schema, options, ..
            } => {
                let s = pg_store(options, schema, 16).await;
                s.migrate().await.expect("re-migrate");
                s
            }
        };
    }

    /// PostgreSQL: a pool for raw SQL on the test's schema (see
    /// [`TestDb::raw_pg`]'s field doc); `None` on SQLite.
    pub fn pg(&self) -> Option<&sqlx::PgPool> {
        self.raw_pg.as_ref()
    }

    /// Another process on the same database: a store with its own memory
    /// (of stream heads, of listeners), reaching the database the same way.
    pub async fn peer_store(&self) -> Store {
        match &self.cleanup {
            Cleanup::Sqlite { url, .. } => Store::connect(url).await.expect("connect sqlite"),
            Cleanup::Postgres {
                pooled: Some((pooler, direct)),
                ..
            } => pooled_store(pooler, direct, 4).await,
            Cleanup::Postgres { .. } => {
                Store::from_postgres_pool(self.store.as_postgres().expect("postgres").clone())
            }
        }
    }

    /// Executes backend-specific raw SQL (for tampering and fault injection).
    pub async fn raw(&self, postgres: &str, sqlite: &str) {
        if let Some(p) = self.pg() {
            sqlx::raw_sql(postgres)
                .execute(p)
                .await
                .expect("raw pg sql");
        } else if let Some(p) = self.store.as_sqlite() {
            sqlx::raw_sql(sqlite)
                .execute(p)
                .await
                .expect("raw sqlite sql");
        }
    }

    /// Same SQL on both engines.
    pub async fn raw_both(&self, sql: &str) {
        self.raw(sql, sql).await;
    }

    pub async fn finish(mut self) {
        self.store.close().await;
        if let Cleanup::Postgres {
            admin,
            schema,
            pooled,
            ..
        } = &mut self.cleanup
        {
            let self_pooled = pooled.is_some();
            let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&*admin)
                .await;
            if self_pooled {
                let _ = sqlx::raw_sql(&format!("DROP OWNED BY {schema}; DROP ROLE {schema}"))
                    .execute(&*admin)
                    .await;
            }
            admin.close().await;
            schema.clear();
        }
    }
}

impl Drop for TestDb {
    /// A panicking test never reaches `finish`; drop its schema from a
    /// helper thread so failed runs do not accumulate schemas.
    fn drop(&mut self) {
        if let Cleanup::Postgres {
            schema, options, ..
        } = &self.cleanup
            && !schema.is_empty()
        {
            let (schema, options) = (schema.clone(), options.as_ref().clone());
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    if let Ok(pool) = PgPoolOptions::new()
                        .max_connections(1)
                        .connect_with(options)
                        .await
                    {
                        let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                            .execute(&pool)
                            .await;
                        pool.close().await;
                    }
                });
            })
            .join();
        }
    }
}

/// A login role named `schema` that owns the schema of that name and
/// finds it on its `search_path`; returns its URLs through the pooler and
/// straight to the server.
async fn pooled_role(
    admin: &sqlx::PgPool,
    pooler: &str,
    direct: &str,
    schema: &str,
) -> (String, String) {
    let password = uuid::Uuid::new_v4().simple().to_string();
    sqlx::raw_sql(&format!(
        "CREATE ROLE {schema} LOGIN SUPERUSER PASSWORD '{password}';
         ALTER ROLE {schema} SET search_path = {schema};
         CREATE SCHEMA {schema} AUTHORIZATION {schema};"
    ))
    .execute(admin)
    .await
    .expect("create the test's role and schema");
    let as_role = |url: &str| {
        let mut url = url::Url::parse(url).expect("parse database url");
        url.set_username(schema).expect("set user");
        url.set_password(Some(&password)).expect("set password");
        url.to_string()
    };
    (as_role(pooler), as_role(direct))
}

/// An empty schema of its own on the test server, owned by a role of the
/// same name that finds it on its `search_path`, and that role's URLs
/// through the pooler at `pooler` and straight to the server.
pub struct PooledSchema {
    pub pooler: String,
    pub direct: String,
    name: String,
    admin: sqlx::PgPool,
}

pub async fn pooled_schema(pooler: &str) -> PooledSchema {
    let url = std::env::var("TOOLGATE_TEST_DATABASE_URL")
        .expect("TOOLGATE_TEST_DATABASE_URL: the server behind the pooler");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect to the server behind the pooler");
    let name = format!("p_{}", uuid::Uuid::new_v4().simple());
    let (pooler, direct) = pooled_role(&admin, pooler, &url, &name).await;
    PooledSchema {
        pooler,
        direct,
        name,
        admin,
    }
}

impl PooledSchema {
    pub async fn drop(self) {
        let name = &self.name;
        let _ = sqlx::raw_sql(&format!(
            "DROP SCHEMA {name} CASCADE; DROP OWNED BY {name}; DROP ROLE {name}"
        ))
        .execute(&self.admin)
        .await;
        self.admin.close().await;
    }
}

/// A store that reaches the database through the pooler at `pooler` and
/// migrates over `direct`.
async fn pooled_store(pooler: &str, direct: &str, max: u32) -> Store {
    Store::connect_with(
        pooler,
        StoreOptions {
            max_connections: max,
            acquire_timeout: Duration::from_secs(30),
            transaction_pooler: true,
            direct_url: Some(direct.to_owned()),
            ..StoreOptions::default()
        },
    )
    .await
    .expect("connect through the pooler and migrate over the direct url")
}

async fn pg_store(options: &PgConnectOptions, schema: &str, max: u32) -> Store {
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options.clone().options([("search_path", schema)]))
        .await
        .expect("connect postgres test pool");
    Store::from_postgres_pool(pool)
}

/// Defines `mod $name { sqlite(), postgres() }`, each running `$body` with
/// `$db: TestDb` bound.
macro_rules! both_backends {
    ($name:ident, |$db:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                #[allow(unused_mut)]
                let mut $db = $crate::common::TestDb::sqlite().await;
                $body
                $db.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                #[allow(unused_mut)]
                let Some(mut $db) = $crate::common::TestDb::postgres().await else {
                    return;
                };
                $body
                $db.finish().await;
            }
        }
    };
}

/// A run id the typed run APIs take (test ids are canonical already).
pub fn rid(text: &str) -> toolgate_policy::RunId {
    toolgate_policy::RunId::parse(text).expect("test run ids are valid")
}

/// `prefix` and a fresh UUIDv7: an id no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}
