//! Appending to a chain: on PostgreSQL the `decisions_chain` trigger
//! chains each row; on SQLite the store computes the same hashes under the
//! database write lock.

use jiff::Timestamp;

use super::chain::{genesis_hash, row_hash};
use super::{
    ChainedDecision, DecisionRecord, Decisions, GENESIS_HASH, INSERT, LEGACY_STREAM, MAX_BATCH,
    StreamHead, StreamLink, validate,
};
use crate::{BeginWrite, Result, StoreError, require, require_opt, ts_from_ms};

/// PostgreSQL: append one row. The `decisions_chain` trigger (migration
/// 0006) assigns seq, prev_hash and hash from the stream's head row, which
/// it locks and advances in the same statement, over the same canonical
/// document as [`hashed_document`]; it seeds the head on the stream's first
/// append. A concurrent appender of the same stream waits for the head row,
/// so the chain stays linear; other streams are not affected. A tenant role
/// that may only INSERT cannot choose its chain position or hashes.
pub(super) const PG_APPEND: &str = "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, \
        verdict, reason, message, matched_rule, policy_version, risk, args_digest, created_at, \
        call_digest, definition_digest, stream) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
    RETURNING seq, prev_hash, hash";

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
            crate::Backend::Postgres(pool) => append_pg(pool, tenant, stream, records).await,
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
        require("stream", stream)?;
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
                    "INSERT INTO decision_heads (tenant, stream, seq, prev_hash, hash, \
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

async fn append_pg(
    pool: &sqlx::PgPool,
    tenant: &str,
    stream: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    let rows = if records.len() == 1 {
        // One statement in autocommit: one round trip per decision.
        vec![pg_append_one(&mut *pool.acquire().await?, tenant, stream, &records[0]).await?]
    } else {
        let mut tx = pool.begin().await?;
        let mut out = Vec::with_capacity(records.len());
        for r in &records {
            out.push(pg_append_one(&mut tx, tenant, stream, r).await?);
        }
        tx.commit().await?;
        out
    };
    Ok(rows
        .into_iter()
        .zip(records)
        .map(|(position, record)| chained(tenant, stream, position, record))
        .collect())
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

/// Appends one record on PostgreSQL inside the caller's transaction.
pub(crate) async fn append_pg_in(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    stream: &str,
    record: DecisionRecord,
) -> Result<ChainedDecision> {
    require("stream", stream)?;
    let position = pg_append_one(conn, tenant, stream, &record).await?;
    Ok(chained(tenant, stream, position, record))
}

/// Checks a record and normalises its time to the stored precision, as
/// every append does before hashing.
pub(crate) fn prepared(mut record: DecisionRecord) -> Result<DecisionRecord> {
    validate(&record)?;
    record.created_at = ts_from_ms(record.created_at.as_millisecond())?;
    Ok(record)
}

/// Binds a record's columns in the order [`PG_APPEND`] and the SQLite
/// `INSERT` share: `$1` tenant through `$16` stream.
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

/// Runs [`PG_APPEND`] for one record and returns its seq and hashes.
async fn pg_append_one(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    stream: &str,
    r: &DecisionRecord,
) -> Result<(i64, String, String)> {
    Ok(bind_record!(sqlx::query_as(PG_APPEND), tenant, stream, r)
        .fetch_one(conn)
        .await?)
}

/// SQLite: a stream's head seq and hash, read inside the caller's write
/// transaction.
async fn sqlite_head(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    stream: &str,
) -> Result<Option<(i64, String)>> {
    Ok(
        sqlx::query_as("SELECT seq, hash FROM decision_heads WHERE tenant = $1 AND stream = $2")
            .bind(tenant)
            .bind(stream)
            .fetch_optional(&mut *tx)
            .await?,
    )
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
    let head = sqlite_head(tx, tenant, stream).await?;
    // A stream nobody opened starts unlinked; the trigger creates its head
    // with the first row, as PostgreSQL's trigger does.
    let (mut seq, mut prev) = match head {
        Some(h) => h,
        None => (0, genesis_hash(tenant, stream, None)?),
    };
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        seq += 1;
        let created_ms = record.created_at.as_millisecond();
        let hash = row_hash(tenant, stream, seq, &prev, &record, created_ms);
        bind_record!(sqlx::query(INSERT), tenant, stream, record)
            .bind(seq)
            .bind(&prev)
            .bind(&hash)
            .execute(&mut *tx)
            .await?;
        let prev_hash = std::mem::replace(&mut prev, hash.clone());
        out.push(chained(tenant, stream, (seq, prev_hash, hash), record));
    }
    Ok(out)
}
