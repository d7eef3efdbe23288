//! Appending to a chain: the store computes each row's seq and hashes (on
//! PostgreSQL from the head it last wrote, under the stream's turn in
//! [`HeadCache`](super::heads::HeadCache); on SQLite under the database
//! write lock) and the database checks that the row continues the head.

use jiff::Timestamp;

use super::chain::{genesis_hash, row_hash};
use super::heads::{AppendPath, KnownHead};
use super::{
    CURRENT_HEAD, ChainedDecision, DecisionRecord, Decisions, GENESIS_HASH, INSERT, LEGACY_STREAM,
    MAX_BATCH, StreamHead, StreamLink, TENANT_APPEND, TENANT_APPEND_BATCH, validate,
};
use crate::pg::{PgDb, PgTxConn};
use crate::{BeginWrite, Result, StoreError, require, require_opt, ts_from_ms};

/// Appends tried when the head this process knew turns out stale (another
/// writer appended to the stream). A stream has one writer, so one retry is
/// the most a healthy deployment needs.
const STALE_HEAD_ATTEMPTS: usize = 3;

impl Decisions<'_> {
    /// Appends one record to the chain of (`tenant`, `stream`) and returns
    /// it as stored.
    pub async fn append(
        &self,
        tenant: &str,
        stream: &str,
        record: DecisionRecord,
    ) -> Result<ChainedDecision> {
        let mut out = self.append_batch(tenant, stream, vec![record]).await?;
        out.pop()
            .ok_or_else(|| StoreError::Corrupt("append produced no row".into()))
    }

    /// Appends records in order, in one transaction: either all are chained
    /// or none is. Used by the sidecar to batch low-risk decisions.
    pub async fn append_batch(
        &self,
        tenant: &str,
        stream: &str,
        records: Vec<DecisionRecord>,
    ) -> Result<Vec<ChainedDecision>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.store.check_file()?;
        if records.len() > MAX_BATCH {
            return Err(StoreError::InvalidInput(format!(
                "batch of {} exceeds {MAX_BATCH} records",
                records.len()
            )));
        }
        for r in &records {
            validate(r)?;
        }
        if records.is_empty() {
            return Ok(Vec::new());
        }
        // Normalise times to the stored precision before hashing.
        let mut records = records;
        for r in &mut records {
            r.created_at = ts_from_ms(r.created_at.as_millisecond())?;
        }
        match &self.store.backend {
            crate::Backend::Postgres(pool) => {
                let path = self.store.heads.append_path(pool).await?;
                let mut head = self.store.heads.lock(tenant, stream).await;
                append_pg(pool, path, &mut head, tenant, stream, records).await
            }
            // `BEGIN IMMEDIATE` holds the database write lock, so reading
            // the head and inserting after it cannot interleave with
            // another appender.
            crate::Backend::Sqlite(pool) => {
                let mut tx = pool.begin_write().await?;
                let out = append_sqlite_in(&mut tx, tenant, stream, records).await?;
                tx.commit().await?;
                Ok(out)
            }
        }
    }

    /// Opens `stream` for `tenant`, starting from the current head of
    /// `previous` (another stream of the tenant) when given; returns the new
    /// head (seq 0, the genesis hash). Opening is optional (the first
    /// append seeds an unlinked head) but it is how a restarted writer
    /// links its new chain to the history it knew. An existing stream, the
    /// reserved [`LEGACY_STREAM`] and an unknown `previous` are refused.
    ///
    /// Unlike the store's other writes this takes no `now`: on PostgreSQL
    /// the stream's `started_at` is the database's own clock, set by the
    /// SECURITY DEFINER function (migration 0006) so that a tenant role can
    /// neither pick nor backdate it, and SQLite mirrors that with the
    /// process clock.
    pub async fn open_stream(
        &self,
        tenant: &str,
        stream: &str,
        previous: Option<&str>,
    ) -> Result<StreamHead> {
        require("tenant", tenant)?;
        super::check_stream(stream)?;
        require_opt("previous stream", previous)?;
        self.store.check_file()?;
        if stream == LEGACY_STREAM {
            return Err(StoreError::InvalidInput(format!(
                "stream name {LEGACY_STREAM} is reserved"
            )));
        }
        match &self.store.backend {
            crate::Backend::Postgres(pool) => {
                // SECURITY DEFINER: reads the previous head itself and
                // checks the tenant of a tenant session.
                let _: String =
                    sqlx::query_scalar("SELECT toolgate_open_decision_stream($1, $2, $3)")
                        .bind(tenant)
                        .bind(stream)
                        .bind(previous)
                        .fetch_one(pool)
                        .await?;
            }
            crate::Backend::Sqlite(pool) => {
                let mut tx = pool.begin_write().await?;
                let link = match previous {
                    None => None,
                    Some(p) => {
                        let (seq, hash) =
                            sqlite_head(&mut tx, tenant, p).await?.ok_or_else(|| {
                                StoreError::InvalidInput(format!(
                                    "previous stream {p} does not exist"
                                ))
                            })?;
                        Some(StreamLink {
                            stream: p.to_owned(),
                            seq,
                            hash,
                        })
                    }
                };
                let genesis = genesis_hash(tenant, stream, link.as_ref())?;
                sqlx::query(
                    "INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, \
                     previous_stream, previous_seq, previous_hash, started_at) \
                     VALUES ($1, $2, 0, $3, $4, $5, $6, $7, $8)",
                )
                .bind(tenant)
                .bind(stream)
                .bind(GENESIS_HASH)
                .bind(&genesis)
                .bind(link.as_ref().map(|l| l.stream.as_str()))
                .bind(link.as_ref().map(|l| l.seq))
                .bind(link.as_ref().map(|l| l.hash.as_str()))
                .bind(Timestamp::now().as_millisecond())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
            }
        }
        self.head(tenant, stream)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("stream {stream} vanished after opening")))
    }
}

/// PostgreSQL: chains `records` after the known head (read when unknown)
/// and inserts them, retrying from a fresh head when the database says the
/// known one is stale. `head` is left unknown unless the append commits.
async fn append_pg(
    pool: &PgDb,
    path: AppendPath,
    head: &mut KnownHead,
    tenant: &str,
    stream: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    let mut attempt = 1;
    loop {
        let from = match head.take() {
            Some(known) => known,
            None => pg_head(pool, tenant, stream).await?,
        };
        let rows = chain(tenant, stream, from, &records);
        let inserted = match (rows.as_slice(), path) {
            // One statement in autocommit: one round trip per decision.
            ([row], _) => pg_insert(pool, path, row).await,
            // A tenant session's batch is one call, atomic as a statement.
            (_, AppendPath::TenantFunction) => pg_tenant_batch(pool, &rows).await,
            (_, AppendPath::Insert) => pg_insert_all(pool, path, &rows).await,
        };
        match inserted {
            Ok(()) => {
                *head = rows.last().map(|r| (r.seq, r.hash.clone()));
                return Ok(rows);
            }
            Err(e) if is_stale_head(&e) && attempt < STALE_HEAD_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

async fn pg_insert_all(
    pool: &PgDb,
    path: AppendPath,
    rows: &[ChainedDecision],
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    for row in rows {
        pg_insert(&mut *tx, path, row).await?;
    }
    tx.commit().await
}

/// PostgreSQL: a tenant session's batch (`rows` chained one after another)
/// in one call of `toolgate_append_decisions`, which derives every link
/// after the first from the rows themselves.
async fn pg_tenant_batch<'c>(
    conn: impl sqlx::Executor<'c, Database = sqlx::Postgres>,
    rows: &[ChainedDecision],
) -> sqlx::Result<()> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let column = |f: fn(&ChainedDecision) -> &String| -> Vec<&str> {
        rows.iter().map(|r| f(r).as_str()).collect()
    };
    let optional = |f: fn(&ChainedDecision) -> &Option<String>| -> Vec<Option<&str>> {
        rows.iter().map(|r| f(r).as_deref()).collect()
    };
    sqlx::query(TENANT_APPEND_BATCH)
        .bind(&first.tenant)
        .bind(&first.stream)
        .bind(first.seq)
        .bind(&first.prev_hash)
        .bind(column(|r| &r.record.decision_id))
        .bind(column(|r| &r.record.run_id))
        .bind(column(|r| &r.record.step_id))
        .bind(column(|r| &r.record.tool))
        .bind(column(|r| &r.record.verdict))
        .bind(column(|r| &r.record.reason))
        .bind(optional(|r| &r.record.message))
        .bind(optional(|r| &r.record.matched_rule))
        .bind(column(|r| &r.record.policy_version))
        .bind(column(|r| &r.record.risk))
        .bind(column(|r| &r.record.args_digest))
        .bind(
            rows.iter()
                .map(|r| r.record.created_at.as_millisecond())
                .collect::<Vec<i64>>(),
        )
        .bind(optional(|r| &r.record.call_digest))
        .bind(optional(|r| &r.record.definition_digest))
        .bind(column(|r| &r.hash))
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether PostgreSQL refused a row because its stream moved on: the row
/// does not continue the stream's last row, or another writer took its
/// seq first (SQLSTATE TG006, migrations 0008 and 0018; before 0018 the
/// primary key refused a taken seq).
fn is_stale_head(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("TG006") => true,
            Some("23505") => db.constraint() == Some("decisions_pkey"),
            _ => false,
        },
        _ => false,
    }
}

/// PostgreSQL: a stream's head seq and hash, or its unlinked genesis when
/// nobody opened or appended to it yet. Not locked: the insert that follows
/// is refused if another writer moved the head meanwhile.
async fn pg_head<'c>(
    conn: impl sqlx::Executor<'c, Database = sqlx::Postgres>,
    tenant: &str,
    stream: &str,
) -> Result<(i64, String)> {
    let head: Option<(i64, String)> = sqlx::query_as(CURRENT_HEAD)
        .bind(tenant)
        .bind(stream)
        .fetch_optional(conn)
        .await?;
    match head {
        Some(head) => Ok(head),
        None => Ok((0, genesis_hash(tenant, stream, None)?)),
    }
}

/// `records` chained one after another from `(seq, hash)`.
fn chain(
    tenant: &str,
    stream: &str,
    (mut seq, mut prev): (i64, String),
    records: &[DecisionRecord],
) -> Vec<ChainedDecision> {
    records
        .iter()
        .map(|record| {
            seq += 1;
            let hash = row_hash(
                tenant,
                stream,
                seq,
                &prev,
                record,
                record.created_at.as_millisecond(),
            );
            let prev_hash = std::mem::replace(&mut prev, hash.clone());
            chained(tenant, stream, (seq, prev_hash, hash), record.clone())
        })
        .collect()
}

/// `record` as chained at `(seq, prev_hash, hash)` of (`tenant`, `stream`).
fn chained(
    tenant: &str,
    stream: &str,
    (seq, prev_hash, hash): (i64, String, String),
    record: DecisionRecord,
) -> ChainedDecision {
    ChainedDecision {
        tenant: tenant.to_owned(),
        stream: stream.to_owned(),
        seq,
        prev_hash,
        hash,
        record,
    }
}

/// Appends one record on PostgreSQL inside the caller's transaction, after
/// the stream's head as the database has it (read here, so a head this
/// process holds in memory is never trusted for it). The caller holds the
/// stream's turn and records the new head once it commits; only another
/// process appending to the same stream meanwhile makes it fail (TG006).
pub(crate) async fn append_pg_in(
    conn: &mut PgTxConn,
    path: AppendPath,
    tenant: &str,
    stream: &str,
    record: DecisionRecord,
) -> Result<ChainedDecision> {
    require("stream", stream)?;
    let from = pg_head(&mut *conn, tenant, stream).await?;
    let mut rows = chain(tenant, stream, from, std::slice::from_ref(&record));
    let row = rows
        .pop()
        .ok_or_else(|| StoreError::Corrupt("append produced no row".into()))?;
    pg_insert(conn, path, &row).await?;
    Ok(row)
}

/// Checks a record and normalises its time to the stored precision, as
/// every append does before hashing.
pub(crate) fn prepared(mut record: DecisionRecord) -> Result<DecisionRecord> {
    validate(&record)?;
    record.created_at = ts_from_ms(record.created_at.as_millisecond())?;
    Ok(record)
}

/// Binds a record's columns in [`INSERT`]'s order: `$1` tenant through
/// `$16` stream (the chain columns follow).
macro_rules! bind_record {
    ($query:expr, $tenant:expr, $stream:expr, $r:expr) => {
        $query
            .bind($tenant)
            .bind(&$r.decision_id)
            .bind(&$r.run_id)
            .bind(&$r.step_id)
            .bind(&$r.tool)
            .bind(&$r.verdict)
            .bind(&$r.reason)
            .bind(&$r.message)
            .bind(&$r.matched_rule)
            .bind(&$r.policy_version)
            .bind(&$r.risk)
            .bind(&$r.args_digest)
            .bind($r.created_at.as_millisecond())
            .bind(&$r.call_digest)
            .bind(&$r.definition_digest)
            .bind($stream)
    };
}

/// PostgreSQL: inserts one chained row, which the database refuses unless
/// it continues the stream's last row (the chain trigger, or the tenant
/// append function, checks the link).
async fn pg_insert<'c>(
    conn: impl sqlx::Executor<'c, Database = sqlx::Postgres>,
    path: AppendPath,
    row: &ChainedDecision,
) -> sqlx::Result<()> {
    let sql = match path {
        AppendPath::Insert => INSERT,
        AppendPath::TenantFunction => TENANT_APPEND,
    };
    bind_record!(sqlx::query(sql), &row.tenant, &row.stream, row.record)
        .bind(row.seq)
        .bind(&row.prev_hash)
        .bind(&row.hash)
        .execute(conn)
        .await?;
    Ok(())
}

/// SQLite: a stream's head seq and hash, read inside the caller's write
/// transaction.
async fn sqlite_head(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    stream: &str,
) -> Result<Option<(i64, String)>> {
    Ok(sqlx::query_as(CURRENT_HEAD)
        .bind(tenant)
        .bind(stream)
        .fetch_optional(&mut *tx)
        .await?)
}

/// SQLite: appends `records` inside the caller's write transaction (which
/// holds the database write lock).
pub(crate) async fn append_sqlite_in(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    stream: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    require("stream", stream)?;
    // A stream nobody opened starts unlinked; the trigger registers it with
    // its first row, as PostgreSQL's trigger does.
    let from = match sqlite_head(tx, tenant, stream).await? {
        Some(head) => head,
        None => (0, genesis_hash(tenant, stream, None)?),
    };
    let rows = chain(tenant, stream, from, &records);
    for row in &rows {
        bind_record!(sqlx::query(INSERT), tenant, stream, row.record)
            .bind(row.seq)
            .bind(&row.prev_hash)
            .bind(&row.hash)
            .execute(&mut *tx)
            .await?;
    }
    Ok(rows)
}
