//! Opening a store: the URL decides the engine, the pool is built and
//! the schema migrated; an embedded file is remembered so its replacement
//! is noticed.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::{
    Backend, DEFAULT_LOCK_TIMEOUT, Result, SQLITE_CACHE_KIB, SQLITE_MAX_CONNECTIONS, Store,
    StoreError, StoreOptions, pg, schema, tenancy, wakeups,
};

/// Which file a path named when the store opened it (device and inode).
/// If the path stops naming that file, for example because someone removed
/// the database under a running process, every write would go to an
/// unlinked file that vanishes on restart: the store then reports itself
/// unavailable instead.
#[derive(Debug)]
pub(crate) struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    fn of(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        Ok(Self {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn check(&self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(&self.path) {
            Ok(m) if m.dev() == self.dev && m.ino() == self.ino => Ok(()),
            Ok(_) => Err(StoreError::FileReplaced(
                "the SQLite database file was replaced under the running process".into(),
            )),
            Err(e) => Err(StoreError::FileReplaced(format!(
                "the SQLite database file is gone ({})",
                e.kind()
            ))),
        }
    }
}

/// Whether a `sqlite:` URL's query names a `mode`.
fn sqlite_url_sets_mode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some("mode"))
    })
}

impl Store {
    /// Connects with default [`StoreOptions`] and applies pending migrations
    /// (as a PostgreSQL tenant role, which may not migrate, it only checks
    /// that the schema is current: `schema_mismatch` otherwise).
    ///
    /// `url` is `postgres://…` / `postgresql://…`, or `sqlite://path` (the
    /// file is created when missing, as with `?mode=rwc`; an explicit
    /// `?mode=rw` or `?mode=ro` is kept and needs the file) / `sqlite::memory:`.
    pub async fn connect(url: &str) -> Result<Store> {
        Store::connect_with(url, StoreOptions::default()).await
    }

    /// Connects with explicit pool options and applies pending migrations.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Store> {
        let mut store = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = PgPoolOptions::new()
                .max_connections(options.max_connections.max(1))
                .min_connections(0)
                .idle_timeout(options.idle_timeout)
                .acquire_timeout(options.acquire_timeout)
                .connect(url)
                .await
                .map_err(connect_error)?;
            let mut store = Store::from_postgres_pool(pool);
            if options.transaction_pooler {
                store = store.through_transaction_pooler(options.direct_url.as_deref())?;
            }
            store
        } else if url.starts_with("sqlite:") {
            let mut connect = SqliteConnectOptions::from_str(url)
                .map_err(|e| StoreError::InvalidInput(format!("bad sqlite url: {e}")))?;
            if !sqlite_url_sets_mode(url) {
                // `sqlite://PATH` creates a missing file; a `mode=` the URL
                // names (`ro`, `rw`, `rwc`, `memory`) is kept as written.
                connect = connect.create_if_missing(true);
            }
            let connect = connect
                .busy_timeout(Duration::from_secs(30))
                .foreign_keys(true)
                .synchronous(SqliteSynchronous::Normal)
                .pragma("cache_size", format!("-{SQLITE_CACHE_KIB}"));
            let in_memory = url.contains(":memory:") || url.contains("mode=memory");
            let file = (!in_memory).then(|| connect.get_filename().to_owned());
            let pool_options = SqlitePoolOptions::new().acquire_timeout(options.acquire_timeout);
            let pool = if in_memory {
                // One connection that never closes: the database lives in it.
                pool_options
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect_with(connect)
                    .await
            } else {
                pool_options
                    .max_connections(options.max_connections.clamp(1, SQLITE_MAX_CONNECTIONS))
                    .connect_with(connect.journal_mode(SqliteJournalMode::Wal))
                    .await
            }
            .map_err(connect_error)?;
            let mut store = Store::from_sqlite_pool(pool);
            if let Some(path) = file {
                // The pool has opened (and so created) the file by now.
                let identity = FileIdentity::of(&path).map_err(|e| {
                    StoreError::InvalidInput(format!("sqlite database file: {}", e.kind()))
                })?;
                store.sqlite_file = Some(Arc::new(identity));
            }
            store
        } else {
            return Err(StoreError::InvalidInput(
                "database url must start with postgres://, postgresql:// or sqlite:".into(),
            ));
        };
        store.url = Some(tenancy::SecretUrl::new(url));
        store.lock_timeout = options.lock_timeout;
        store.migrate().await?;
        Ok(store)
    }

    /// Wraps an existing PostgreSQL pool (e.g. one whose connections set a
    /// `search_path`). Does not migrate; call [`Store::migrate`].
    pub fn from_postgres_pool(pool: PgPool) -> Store {
        Store {
            backend: Backend::Postgres(pg::PgDb {
                pool,
                pooled: false,
                direct: None,
            }),
            wakeups: wakeups::Wakeups::new(),
            heads: Arc::default(),
            sqlite_file: None,
            url: None,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// Wraps an existing SQLite pool. Does not migrate; call [`Store::migrate`].
    /// The pool should set a busy timeout so concurrent writers wait.
    pub fn from_sqlite_pool(pool: SqlitePool) -> Store {
        Store {
            backend: Backend::Sqlite(pool),
            wakeups: wakeups::Wakeups::new(),
            heads: Arc::default(),
            sqlite_file: None,
            url: None,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// Applies the embedded migrations for this backend. Idempotent.
    ///
    /// On PostgreSQL a tenant role (see [`Store::provision_tenant`]) may not
    /// change the schema: for a tenant session this only checks that every
    /// embedded migration has been applied, and fails with
    /// `schema_mismatch` otherwise. Any other session migrates only when
    /// something is missing, so a current schema takes no lock, and waits
    /// for locks at most [`StoreOptions::lock_timeout`] (`lock_timeout`).
    pub async fn migrate(&self) -> Result<()> {
        match &self.backend {
            Backend::Postgres(pool) => schema::migrate_postgres(pool, self.lock_timeout).await,
            Backend::Sqlite(pool) => sqlx::migrate!("../../migrations/sqlite")
                .run(pool)
                .await
                .map_err(StoreError::MigrationFailed),
        }
    }

    /// Marks a PostgreSQL store as reaching the server through a
    /// transaction-mode pooler (see [`StoreOptions::transaction_pooler`]),
    /// with `direct_url` reaching the server itself for migrations and
    /// `LISTEN`. Call before the store is first used (a store built by
    /// [`Store::connect_with`] does this itself). A no-op on SQLite.
    pub fn through_transaction_pooler(mut self, direct_url: Option<&str>) -> Result<Store> {
        if let Backend::Postgres(db) = &mut self.backend {
            db.pooled = true;
            db.direct = direct_url
                .map(|u| {
                    sqlx::postgres::PgConnectOptions::from_str(u)
                        .map(Box::new)
                        .map_err(|e| StoreError::InvalidInput(format!("bad direct url: {e}")))
                })
                .transpose()?;
            self.wakeups = wakeups::Wakeups::new();
        }
        Ok(self)
    }

    /// Replaces the lock timeout of [`StoreOptions::lock_timeout`] (for a
    /// store built from a pool).
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Store {
        self.lock_timeout = timeout;
        self
    }

    /// Fails with `store_unavailable` when the SQLite database file was
    /// removed or replaced since the store connected (a no-op on PostgreSQL
    /// and in-memory SQLite). Every write checks it first; callers on a
    /// high-risk path get a refusal instead of a record that a restart loses.
    pub fn check_file(&self) -> Result<()> {
        self.sqlite_file.as_ref().map_or(Ok(()), |f| f.check())
    }
}

fn connect_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Configuration(c) => StoreError::InvalidInput(format!("bad database url: {c}")),
        // Anything else while establishing the pool means we could not reach
        // a usable database.
        other => StoreError::Unavailable(other),
    }
}
