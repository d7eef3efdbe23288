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
//!
//! Layout: opening a store (engine from the URL, pool, migrations) is in
//! `open`, its tunables in `options`, the one error enum in `error`; this
//! file holds the [`Store`] handle, the engine dispatch every record family
//! uses, and the public names, all re-exported here.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod approvals;
mod checkpoints;
mod decision_inputs;
mod decisions;
mod error;
mod fields;
mod flows;
mod heartbeats;
mod intents;
mod mcp_tasks;
mod notifications;
mod open;
mod options;
mod pg;
mod profiles;
pub mod replay;
mod runs;
mod schema;
mod shadow_tally;
pub mod tenancy;
mod wakeups;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

pub use approvals::{
    Approval, ApprovalDecision, ApprovalListing, ApprovalStatus, Approvals, ApprovedCall,
    MAX_PREVIEW_CHARS, NewApproval, RunEvent, UnreadableApproval,
};
pub use checkpoints::{Checkpoint, Checkpoints};
pub use decision_inputs::{
    DecisionInput, DecisionInputs, InputCheck, InputStanding, MAX_INPUT_BYTES, MAX_LOOKUP,
    standing as input_standing,
};
pub use decisions::{
    ArchiveRange, ChainReport, ChainedDecision, DecisionFilter, DecisionMessage, DecisionPage,
    DecisionRecord, Decisions, GENESIS_HASH, INPUT_SHA256_MEMBER, LEGACY_STREAM, LogCursor,
    LoggedDecision, MAX_QUERY_LIMIT, PARTITION_MONTHS_AHEAD, PartitionPrune, Position,
    SHADOW_CHANGED_MARK, ShadowOutcome, StreamHead, StreamLink, WouldHave, check_stream,
    genesis_hash,
};
pub use error::{Result, StoreError};
pub use fields::{MAX_FIELD_LEN, check_field};
pub(crate) use fields::{
    duration_ms, new_id, opt_ts_from_ms, parse_json, require, require_opt, require_run_id,
    ts_from_ms,
};
pub use flows::{FlowLabel, FlowLabels, LabelsOnPass};
pub use heartbeats::{Heartbeat, HeartbeatListing, Heartbeats, UnreadableHeartbeat};
pub use intents::{
    Intent, IntentOutcome, IntentStatus, Intents, NewIntent, PendingIntent, ResumeClass,
};
pub use mcp_tasks::{FORWARD_INTERRUPTED, McpTask, McpTaskState, McpTasks, NewMcpTask};
pub use notifications::{ApprovalEvent, Delivery, Notifications};
pub use options::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_CONNECTIONS, SQLITE_CACHE_KIB,
    SQLITE_MAX_CONNECTIONS, StoreOptions,
};
pub use profiles::{ProcessEvent, ProfileLoad, ProfileVersion, Profiles};
pub use runs::{
    Admission, Budget, Caller, Cancellation, LabelsIfPassing, PodLimits, RunLimits, RunState, Runs,
    ScopeCancellation, Stopped, Stops,
};
pub use shadow_tally::{
    MAX_COUNT as MAX_TALLY_COUNT, MAX_TALLY_BYTES, ShadowTally, ShadowTransition,
};
pub use tenancy::TenantCredentials;
pub use wakeups::{RELISTENED, is_stop as wakeup_is_stop};

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
    sqlite_file: Option<Arc<open::FileIdentity>>,
    /// The URL the store connected with (for provisioning tenant URLs).
    url: Option<tenancy::SecretUrl>,
    /// Longest lock wait when migrating or provisioning (PostgreSQL).
    pub(crate) lock_timeout: Duration,
}

impl Store {
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

    /// Recorded inputs of decided calls (`spec.audit.recordInputs`).
    pub fn decision_inputs(&self) -> DecisionInputs<'_> {
        DecisionInputs { store: self }
    }

    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }
}
