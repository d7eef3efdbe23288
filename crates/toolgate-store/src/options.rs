//! How a store is sized and how it reaches its database.

use std::time::Duration;

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

/// Pool sizing and the route to the database for [`Store::connect_with`](crate::Store::connect_with).
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
