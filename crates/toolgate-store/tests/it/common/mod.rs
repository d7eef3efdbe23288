//! Test harness: runs each test body against SQLite (temp file) and
//! PostgreSQL (fresh schema per test).
//!
//! PostgreSQL comes from `TOOLGATE_TEST_DATABASE_URL`. When it is unset the
//! PostgreSQL variant prints a skip notice and passes, unless `CI=true`, in
//! which case it fails: CI must prove both backends. A set but unreachable
//! URL always fails.

pub mod builders;
pub mod faults;
pub mod tenants;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use toolgate_store::{Store, StoreOptions};

pub struct TestDb {
    pub store: Store,
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
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&admin)
            .await
            .expect("create schema");
        let store = pg_store(&options, &schema, 16).await;
        store.migrate().await.expect("migrate postgres");
        Some(TestDb {
            store,
            cleanup: Cleanup::Postgres {
                admin,
                schema,
                options: Box::new(options),
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
                schema, options, ..
            } => {
                let s = pg_store(options, schema, 16).await;
                s.migrate().await.expect("re-migrate");
                s
            }
        };
    }

    /// Executes backend-specific raw SQL (for tampering and fault injection).
    pub async fn raw(&self, postgres: &str, sqlite: &str) {
        if let Some(p) = self.store.as_postgres() {
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
        if let Cleanup::Postgres { admin, schema, .. } = &mut self.cleanup {
            let _ = sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&*admin)
                .await;
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
