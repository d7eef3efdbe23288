//! Durable records for toolgate.
//!
//! The shared database is where toolgate keeps its promises: a high-risk
//! call's intent exists before the call runs, an approval is never lost or
//! resolved twice, and a decision record cannot be altered without
//! [`Decisions::verify`] noticing. PostgreSQL is the production backend and
//! SQLite the embedded default; both run the same SQL where possible and the
//! same integration suite proves they behave the same.
//!
//! Entry point: [`Store::connect`], then one handle per record family:
//! [`Store::intents`], [`Store::approvals`], [`Store::decisions`],
//! [`Store::profiles`], [`Store::heartbeats`].
//!
//! All times are UTC and stored as BIGINT Unix milliseconds on both engines,
//! so sub-millisecond precision of a [`jiff::Timestamp`] is dropped on write.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod approvals;
mod checkpoints;
mod decisions;
mod fields;
mod flows;
mod heartbeats;
mod intents;
mod mcp_tasks;
mod notifications;
mod pg;
mod profiles;
mod runs;
mod schema;
pub mod tenancy;
mod wakeups;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub use approvals::{
    Approval, ApprovalDecision, ApprovalStatus, Approvals, ApprovedCall, MAX_PREVIEW_CHARS,
    NewApproval, RunEvent,
};
pub use checkpoints::{Checkpoint, Checkpoints};
pub use decisions::{
    ArchiveRange, ChainReport, ChainedDecision, DecisionFilter, DecisionPage, DecisionRecord,
    Decisions, GENESIS_HASH, LEGACY_STREAM, LogCursor, LoggedDecision, MAX_QUERY_LIMIT,
    PARTITION_MONTHS_AHEAD, PartitionPrune, Position, StreamHead, StreamLink, check_stream,
    genesis_hash,
};
pub use fields::{MAX_FIELD_LEN, check_field};
pub(crate) use fields::{
    duration_ms, new_id, opt_ts_from_ms, parse_json, require, require_opt, require_run_id,
    ts_from_ms,
};
pub use flows::{FlowLabel, FlowLabels, LabelsOnPass};
pub use heartbeats::{Heartbeat, Heartbeats};
pub use intents::{
    Intent, IntentOutcome, IntentStatus, Intents, NewIntent, PendingIntent, ResumeClass,
};
pub use mcp_tasks::{FORWARD_INTERRUPTED, McpTask, McpTaskState, McpTasks, NewMcpTask};
pub use notifications::{ApprovalEvent, Delivery, Notifications};
pub use profiles::{ProcessEvent, ProfileLoad, ProfileVersion, Profiles};
pub use runs::{
    Admission, Budget, Caller, Cancellation, LabelsIfPassing, PodLimits, RunLimits, RunState, Runs,
    ScopeCancellation, Stopped, Stops,
};
pub use tenancy::TenantCredentials;
pub use wakeups::{RELISTENED, is_stop as wakeup_is_stop};

/// Every failure the store reports. Callers branch on [`StoreError::code`],
/// which is stable across releases; the display text is for humans.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or the connection broke. On a
    /// high-risk path the caller must deny rather than proceed unrecorded.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The named record does not exist (or belongs to another tenant).
    #[error("{kind} not found: {id}")]
    NotFound {
        /// Record family, e.g. `intent` or `approval`.
        kind: &'static str,
        /// The identifier that was looked up.
        id: String,
    },
    /// The request contradicts what is already recorded, e.g. completing an
    /// intent with a different outcome or resolving an approval the other way.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The decision already has its one intent.
    #[error("decision {decision_id} already has an intent")]
    IntentExists {
        /// The decision named twice.
        decision_id: String,
    },
    /// The approval's time to live has passed; it can no longer be resolved.
    #[error("approval {id} has expired")]
    ApprovalExpired {
        /// The approval id.
        id: String,
    },
    /// The caller supplied a value the store refuses to record.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Applying the embedded schema migrations failed.
    #[error("migration failed: {0}")]
    MigrationFailed(#[source] sqlx::migrate::MigrateError),
    /// A stored row could not be interpreted (unknown status, bad JSON,
    /// out-of-range time). Indicates tampering or a schema mismatch.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The embedded database file was removed or replaced while in use:
    /// nothing written now would survive a restart.
    #[error("store unavailable: {0}")]
    FileReplaced(String),
    /// The database refused the operation to this role (SQLSTATE 42501,
    /// including a row-level security refusal): a tenant role acting
    /// outside its tenant or its privileges, or an admin role lacking one
    /// (e.g. CREATEROLE for provisioning).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The operation needs PostgreSQL (per-tenant roles); the embedded
    /// SQLite store is single-user.
    #[error("tenancy is not supported on {0}: SQLite is single-user")]
    TenancyUnsupported(&'static str),
    /// The database schema is not at the version this build expects, and
    /// this session (a tenant role) may not migrate it: run the migrations
    /// with the admin role first.
    #[error("database schema not migrated: {0}")]
    SchemaMismatch(String),
    /// A lock the operation needs was not granted within the store's lock
    /// timeout ([`StoreOptions::lock_timeout`]): another session holds it
    /// (a migration or provisioning running elsewhere, or a long
    /// transaction). Nothing was changed; try again.
    #[error("lock not granted in time: {0}")]
    LockTimeout(String),
    /// The server had a statement of a name this connection had not
    /// prepared, or lacked one it had: the URL reaches a transaction-mode pooler, which shares
    /// server sessions between clients, and the store was not told so.
    #[error(
        "the database url reaches a transaction-mode pooler ({0}): set --database-pooler \
         transaction (TOOLGATE_DATABASE_POOLER)"
    )]
    PoolerNotDeclared(String),
    /// Any other database error (constraint or SQL failure).
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
}

impl StoreError {
    /// Stable snake_case code for logs, metrics and API error envelopes.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) | StoreError::FileReplaced(_) => "store_unavailable",
            StoreError::NotFound { .. } => "not_found",
            StoreError::Conflict(_) => "conflict",
            StoreError::IntentExists { .. } => "intent_exists",
            StoreError::ApprovalExpired { .. } => "approval_expired",
            StoreError::InvalidInput(_) => "invalid_input",
            StoreError::MigrationFailed(_) => "migration_failed",
            StoreError::Corrupt(_) => "stored_data_corrupt",
            StoreError::PermissionDenied(_) => "permission_denied",
            StoreError::TenancyUnsupported(_) => "tenancy_unsupported",
            StoreError::SchemaMismatch(_) => "schema_mismatch",
            StoreError::LockTimeout(_) => "lock_timeout",
            StoreError::PoolerNotDeclared(_) => "pooler_not_declared",
            StoreError::Database(_) => "database_error",
        }
    }

    pub(crate) fn not_found(kind: &'static str, id: &str) -> Self {
        StoreError::NotFound {
            kind,
            id: id.to_owned(),
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => StoreError::Unavailable(e),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(db.message().to_owned())
            }
            // A statement sqlx named already there (42P05) or gone (26000):
            // the server session is shared with other clients (a pooler).
            sqlx::Error::Database(db)
                if matches!(db.code().as_deref(), Some("42P05" | "26000"))
                    && db.message().starts_with("prepared statement \"sqlx_s_") =>
            {
                StoreError::PoolerNotDeclared(db.message().to_owned())
            }
            // lock_not_available: `lock_timeout` expired.
            sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03") => {
                StoreError::LockTimeout(db.message().to_owned())
            }
            // insufficient_privilege, also raised by row-level security.
            sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
                StoreError::PermissionDenied(db.message().to_owned())
            }
            // Forward-only triggers: a backward intent transition, a second
            // consume, a lowered high-water mark (0003), a lowered run
            // counter or withdrawn cancellation (0005).
            sqlx::Error::Database(db)
                if matches!(
                    db.code().as_deref(),
                    Some("TG001" | "TG002" | "TG003" | "TG004")
                ) =>
            {
                StoreError::Conflict(db.message().to_owned())
            }
            // A decision row that does not continue its stream's head (0007).
            sqlx::Error::Database(db) if db.code().as_deref() == Some("TG006") => {
                StoreError::Conflict(db.message().to_owned())
            }
            // Opening a decision stream with a reserved name or an unknown
            // previous stream (0006).
            sqlx::Error::Database(db) if db.code().as_deref() == Some("TG005") => {
                StoreError::InvalidInput(db.message().to_owned())
            }
            _ => StoreError::Database(e),
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Most connections a SQLite file database pools. SQLite writes one at a
/// time whatever the pool, and each connection keeps its own page cache, so
/// more connections buy no throughput and only grow memory as their caches
/// fill.
pub const SQLITE_MAX_CONNECTIONS: u32 = 4;

/// Page cache of each SQLite connection, in KiB (SQLite's default is 2,000
/// KiB). The sidecar's embedded database is written far more than it is
/// read, so a small cache costs little (the OS caches the file too) and
/// bounds the memory of the pool: with 1,024 KiB the caches filling up over
/// minutes were most of a soaking sidecar's RSS growth (+14.1 % after
/// warm-up against +6.3 % with 256, side by side in one 10-minute soak).
pub const SQLITE_CACHE_KIB: u32 = 256;

/// Pool sizing and the route to the database for [`Store::connect_with`].
#[derive(Clone)]
pub struct StoreOptions {
    /// Maximum pooled connections. SQLite uses at most
    /// [`SQLITE_MAX_CONNECTIONS`], and an in-memory database one, because
    /// each connection would otherwise see its own database.
    pub max_connections: u32,
    /// PostgreSQL: a pooled connection unused this long is closed, so an
    /// idle process holds none (`None`: kept open).
    pub idle_timeout: Option<Duration>,
    /// PostgreSQL: the URL points at a pooler in `pool_mode = transaction`
    /// (PgBouncer). Every statement is then sent unnamed and inside a
    /// transaction, and nothing relies on session state; see
    /// [`StoreOptions::direct_url`] for what needs a session.
    pub transaction_pooler: bool,
    /// PostgreSQL behind a transaction pooler: a URL that reaches the
    /// server itself, used for the two things a pooled session cannot do,
    /// migrating (session lock timeout, sqlx's bookkeeping) and `LISTEN`ing
    /// for wake-ups. Without it, a schema that needs migrating is
    /// `schema_mismatch` and waiters re-read on a timer instead of being
    /// woken.
    pub direct_url: Option<String>,
    /// How long to wait for a free connection before reporting
    /// `store_unavailable`.
    pub acquire_timeout: Duration,
    /// PostgreSQL: the longest wait for a lock when migrating or
    /// provisioning a tenant, after which the operation fails with
    /// `lock_timeout` instead of hanging behind whoever holds it.
    pub lock_timeout: Duration,
}

impl std::fmt::Debug for StoreOptions {
    /// The direct URL carries a password: only whether there is one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("max_connections", &self.max_connections)
            .field("idle_timeout", &self.idle_timeout)
            .field("transaction_pooler", &self.transaction_pooler)
            .field("direct_url", &self.direct_url.is_some())
            .field("acquire_timeout", &self.acquire_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .finish()
    }
}

/// Default [`StoreOptions::lock_timeout`].
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(15);

/// Default [`StoreOptions::max_connections`]. Sized for a fleet: a sidecar
/// writes its low-risk decisions in batches and holds a connection only for
/// the statements of one call, so four carry thousands of calls a second
/// (see `docs/database.md` for the arithmetic), and a thousand sidecars ask
/// a pooler for at most 4,000 client connections rather than 16,000.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4;

/// Default [`StoreOptions::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            transaction_pooler: false,
            direct_url: None,
            acquire_timeout: Duration::from_secs(10),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Postgres(pg::PgDb),
    Sqlite(SqlitePool),
}

/// Runs `$body` once per backend with `$pool` bound to the concrete pool, so
/// shared SQL is written once but compiled against both drivers.
macro_rules! on_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.backend {
            $crate::Backend::Postgres($pool) => $body,
            $crate::Backend::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

/// Begins a write transaction. On SQLite this is `BEGIN IMMEDIATE`, which takes
/// the write lock up front: a deferred transaction that reads and then writes
/// can fail with `SQLITE_BUSY` instead of waiting for its turn.
pub(crate) trait BeginWrite {
    type Tx;
    async fn begin_write(&self) -> Result<Self::Tx>;
}

impl BeginWrite for pg::PgDb {
    type Tx = pg::PgTx;
    async fn begin_write(&self) -> Result<pg::PgTx> {
        Ok(self.begin().await?)
    }
}

impl BeginWrite for SqlitePool {
    type Tx = sqlx::Transaction<'static, sqlx::Sqlite>;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// Handle to the toolgate database. Cheap to clone; clones share one pool.
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) backend: Backend,
    pub(crate) wakeups: Arc<wakeups::Wakeups>,
    /// Heads of the streams this process appends to (PostgreSQL).
    pub(crate) heads: Arc<decisions::HeadCache>,
    /// The SQLite database file as it was when the store connected.
    sqlite_file: Option<Arc<FileIdentity>>,
    /// The URL the store connected with (for provisioning tenant URLs).
    url: Option<tenancy::SecretUrl>,
    /// Longest lock wait when migrating or provisioning (PostgreSQL).
    pub(crate) lock_timeout: Duration,
}

/// Which file a path named when the store opened it (device and inode).
/// If the path stops naming that file, for example because someone removed
/// the database under a running process, every write would go to an
/// unlinked file that vanishes on restart: the store then reports itself
/// unavailable instead.
#[derive(Debug)]
struct FileIdentity {
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

    /// The PostgreSQL pool, if this store uses PostgreSQL. For operational
    /// tooling and tests that need raw SQL next to the store.
    pub fn as_postgres(&self) -> Option<&PgPool> {
        match &self.backend {
            Backend::Postgres(db) => Some(&db.pool),
            Backend::Sqlite(_) => None,
        }
    }

    /// The SQLite pool, if this store uses SQLite.
    pub fn as_sqlite(&self) -> Option<&SqlitePool> {
        match &self.backend {
            Backend::Sqlite(p) => Some(p),
            Backend::Postgres(_) => None,
        }
    }

    /// Round-trips a trivial query: readiness probes use it to tell a
    /// reachable database from a configured one. On SQLite it also checks
    /// that the database path still names the file the store opened.
    pub async fn ping(&self) -> Result<()> {
        self.check_file()?;
        on_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }

    /// Fails with `store_unavailable` when the SQLite database file was
    /// removed or replaced since the store connected (a no-op on PostgreSQL
    /// and in-memory SQLite). Every write checks it first; callers on a
    /// high-risk path get a refusal instead of a record that a restart loses.
    pub fn check_file(&self) -> Result<()> {
        self.sqlite_file.as_ref().map_or(Ok(()), |f| f.check())
    }

    /// Closes the pool, waiting for checked-out connections to return.
    pub async fn close(&self) {
        self.wakeups.stop();
        match &self.backend {
            Backend::Postgres(db) => db.pool.close().await,
            Backend::Sqlite(p) => p.close().await,
        }
    }

    /// The intent ledger (durable pre-execution records of high-risk calls).
    pub fn intents(&self) -> Intents<'_> {
        Intents { store: self }
    }

    /// Durable, tenant-scoped approvals.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals { store: self }
    }

    /// The append-only, hash-chained decision log.
    pub fn decisions(&self) -> Decisions<'_> {
        Decisions { store: self }
    }

    /// Signed checkpoints of decision stream heads.
    pub fn checkpoints(&self) -> Checkpoints<'_> {
        Checkpoints { store: self }
    }

    /// Loaded policy profile versions and process-wide events.
    pub fn profiles(&self) -> Profiles<'_> {
        Profiles { store: self }
    }

    /// Run budgets and cancellation.
    pub fn runs(&self) -> Runs<'_> {
        Runs { store: self }
    }

    /// Flow labels of runs and pods (`spec.flows`).
    pub fn flow_labels(&self) -> FlowLabels<'_> {
        FlowLabels { store: self }
    }

    /// Approval events to notify people about, and their deliveries.
    pub fn notifications(&self) -> Notifications<'_> {
        Notifications { store: self }
    }

    /// Sidecar heartbeats for the controller's fleet view.
    pub fn heartbeats(&self) -> Heartbeats<'_> {
        Heartbeats { store: self }
    }

    /// MCP tasks the gateway holds, kept across sidecar restarts.
    pub fn mcp_tasks(&self) -> McpTasks<'_> {
        McpTasks { store: self }
    }

    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
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
