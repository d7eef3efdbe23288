//! The store's one error type and its stable codes.

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
    /// timeout ([`StoreOptions::lock_timeout`](crate::StoreOptions::lock_timeout)): another session holds it
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

    /// Whether this error says a stored row does not read back (a value out
    /// of range, or on SQLite one of the wrong type): the fault of that row,
    /// not of the database, so a pass over every tenant's rows can skip it.
    pub fn is_unreadable_row(&self) -> bool {
        matches!(
            self,
            StoreError::Corrupt(_)
                | StoreError::Database(sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_))
        )
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
            // previous stream (0006); an approval, heartbeat or decision
            // time the store could not read back (0021, 0022).
            sqlx::Error::Database(db)
                if matches!(db.code().as_deref(), Some("TG005" | "TG007")) =>
            {
                StoreError::InvalidInput(db.message().to_owned())
            }
            _ => StoreError::Database(e),
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
