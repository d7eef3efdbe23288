//! How a command reaches its database: the flags the sidecar and every CLI
//! command that opens the store share, so a pooler is configured the same
//! way everywhere.

use toolgate_contract::env;
use toolgate_store::{DEFAULT_MAX_CONNECTIONS, Store, StoreError, StoreOptions};

/// What stands between toolgate and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Pooler {
    /// The URL reaches the server itself.
    #[default]
    None,
    /// The URL reaches a pooler in `pool_mode = transaction` (PgBouncer).
    Transaction,
}

/// Database flags; each also reads a `TOOLGATE_DATABASE_*` variable.
#[derive(Clone, PartialEq, Eq, clap::Args)]
pub struct DatabaseArgs {
    /// Database URL: `postgres://…` or `sqlite://path?mode=rwc`.
    #[arg(long, env = env::DATABASE_URL)]
    pub database: String,
    /// `transaction` when `--database` is a pooler in transaction mode
    /// (PgBouncer): statements go unnamed, each inside a transaction.
    #[arg(long, env = env::DATABASE_POOLER, value_enum, default_value = "none")]
    pub database_pooler: Pooler,
    /// Behind a pooler: the server's own URL, for migrating and for
    /// `LISTEN` (wake-ups); without it waiters and stops are polled.
    #[arg(long, env = env::DATABASE_DIRECT_URL)]
    pub database_direct_url: Option<String>,
    /// Most connections this process opens (PostgreSQL; opened when
    /// needed, closed after a minute unused).
    #[arg(long, env = env::DATABASE_MAX_CONNECTIONS, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub database_max_connections: u32,
}

impl std::fmt::Debug for DatabaseArgs {
    /// URLs carry passwords: they are not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseArgs")
            .field("database_pooler", &self.database_pooler)
            .field("database_direct_url", &self.database_direct_url.is_some())
            .field("database_max_connections", &self.database_max_connections)
            .finish_non_exhaustive()
    }
}

impl DatabaseArgs {
    /// Flags for `url` with every other flag at its default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            database: url.into(),
            database_pooler: Pooler::None,
            database_direct_url: None,
            database_max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// The store options the flags ask for.
    pub fn options(&self) -> StoreOptions {
        StoreOptions {
            max_connections: self.database_max_connections.max(1),
            transaction_pooler: self.database_pooler == Pooler::Transaction,
            direct_url: self.database_direct_url.clone(),
            ..StoreOptions::default()
        }
    }

    /// Connects (and migrates, where this role may and must).
    pub async fn connect(&self) -> Result<Store, StoreError> {
        Store::connect_with(&self.database, self.options()).await
    }
}
