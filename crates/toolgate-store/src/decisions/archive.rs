//! Archiving a stream's oldest rows (`toolgate audit archive`).
//!
//! A stream's prefix (its rows from the first live one up to a chosen seq,
//! never leaving a gap) is read out with [`Decisions::archive_range`] and
//! [`Decisions::list`], written elsewhere, and the last archived row is
//! signed as a checkpoint and stored ([`crate::Checkpoints::record`]). Only
//! then does [`Decisions::prune_through`] delete the rows up to that
//! checkpoint, in one transaction that also records in
//! `decision_archives` (migration 0017 / SQLite 0012) the position the
//! stream now starts after. Verification walks an archived stream from that
//! position, so the live chain is checked from its first remaining row; rows
//! deleted without such a record (or beyond it) are still a gap.
//!
//! A stream's last row always stays live: it is the stream's head, which
//! appends continue from and which a later stream's link names.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::chain::{genesis_hash, row_hash};
use super::{ChainedDecision, Decisions, LAST_ROW, Position, StreamLink};
use crate::{BeginWrite, Checkpoint, Result, StoreError, on_pool, require};

/// The prefix of one stream that archiving takes: rows `first_seq` to
/// `last_seq`, chained on from `prev_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRange {
    /// Tenant.
    pub tenant: String,
    /// Stream.
    pub stream: String,
    /// First row archived: 1, or the row after the stream's last archive.
    pub first_seq: i64,
    /// Last row archived.
    pub last_seq: i64,
    /// The hash `first_seq` chains on from: the stream's genesis hash at
    /// seq 1, else the hash its previous archive ended with.
    pub prev_hash: String,
    /// At seq 1: the previous stream's head the genesis hash covers, so a
    /// reader of the archive alone can recompute it.
    pub previous: Option<StreamLink>,
}

impl ChainedDecision {
    /// The hash this row's content, position and `prev_hash` give (what
    /// [`ChainedDecision::hash`] must be).
    pub fn computed_hash(&self) -> String {
        row_hash(
            &self.tenant,
            &self.stream,
            self.seq,
            &self.prev_hash,
            &self.record,
            self.record.created_at.as_millisecond(),
        )
    }

    /// What is wrong with this row where the row at `expected_seq` chained
    /// on from `prev` should be, or `None` if it checks out.
    pub fn chain_problem(&self, expected_seq: i64, prev: &str) -> Option<String> {
        if self.seq != expected_seq {
            return Some(format!(
                "seq {expected_seq} is missing (next row present is seq {})",
                self.seq
            ));
        }
        if self.prev_hash != prev {
            return Some(format!(
                "seq {} prev_hash does not match the hash before it",
                self.seq
            ));
        }
        (self.computed_hash() != self.hash).then(|| {
            format!(
                "seq {} content does not match its hash (edited or moved)",
                self.seq
            )
        })
    }
}

/// Deletes a stream's rows through a seq (`$4`, now, matters only to
/// [`PRUNE_PARTITIONED`]).
const PRUNE: &str =
    "DELETE FROM decisions WHERE tenant = $1 AND stream = $2 AND seq <= $3 AND $4 IS NOT NULL";

/// [`PRUNE`] on PostgreSQL: only the rows of the current month and later
/// (`$4` is now). The archived rows of past months go with their
/// partition, or row by row where it also holds rows not archived
/// ([`Decisions::drop_archived_partitions`], which archiving runs next);
/// verification reads a stream from after its archived position, so rows
/// below it that wait for that are never read.
const PRUNE_PARTITIONED: &str = "DELETE FROM decisions WHERE tenant = $1 AND stream = $2 \
     AND seq <= $3 AND created_at >= toolgate_decision_month($4, 0)";

impl Decisions<'_> {
    /// The prefix of every stream of `tenant` (every tenant when `None`)
    /// that archiving rows created before `before` takes, ordered by tenant
    /// and stream; see [`Decisions::archive_range`].
    pub async fn archive_ranges(
        &self,
        tenant: Option<&str>,
        before: Timestamp,
    ) -> Result<Vec<ArchiveRange>> {
        if let Some(t) = tenant {
            require("tenant", t)?;
        }
        let candidates: Vec<(String, String, i64)> = on_pool!(self.store, pool => {
            sqlx::query_as(
                "SELECT tenant, stream, max(seq) FROM decisions \
                 WHERE created_at < $1 AND ($2 IS NULL OR tenant = $2) \
                 GROUP BY tenant, stream ORDER BY tenant, stream",
            )
            .bind(before.as_millisecond())
            .bind(tenant)
            .fetch_all(pool)
            .await?
        });
        let mut out = Vec::new();
        for (t, s, through) in candidates {
            if let Some(range) = self.range_through(&t, &s, through).await? {
                out.push(range);
            }
        }
        Ok(out)
    }

    /// The prefix of (`tenant`, `stream`) that archiving rows created before
    /// `before` takes: from the first live row through the last row created
    /// before `before` (so every row before it, whatever its time, goes
    /// too: no gap), but never the stream's last row. `None` when there is
    /// nothing to archive.
    pub async fn archive_range(
        &self,
        tenant: &str,
        stream: &str,
        before: Timestamp,
    ) -> Result<Option<ArchiveRange>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        let through: Option<i64> = on_pool!(self.store, pool => {
            sqlx::query_scalar(
                "SELECT max(seq) FROM decisions WHERE tenant = $1 AND stream = $2 \
                 AND created_at < $3",
            )
            .bind(tenant)
            .bind(stream)
            .bind(before.as_millisecond())
            .fetch_one(pool)
            .await?
        });
        match through {
            Some(through) => self.range_through(tenant, stream, through).await,
            None => Ok(None),
        }
    }

    /// Every row of [`Decisions::archive_range`], in seq order (a
    /// convenience for small streams: the command reads them page by page).
    pub async fn archive_prefix(
        &self,
        tenant: &str,
        stream: &str,
        before: Timestamp,
    ) -> Result<Vec<ChainedDecision>> {
        let Some(range) = self.archive_range(tenant, stream, before).await? else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        let mut after = range.first_seq - 1;
        while after < range.last_seq {
            let page = self.list(tenant, stream, after, 10_000).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            rows.extend(page.into_iter().filter(|r| r.seq <= range.last_seq));
        }
        Ok(rows)
    }

    async fn range_through(
        &self,
        tenant: &str,
        stream: &str,
        through: i64,
    ) -> Result<Option<ArchiveRange>> {
        let last: Option<(i64, String)> = on_pool!(self.store, pool => {
            sqlx::query_as(LAST_ROW).bind(tenant).bind(stream).fetch_optional(pool).await?
        });
        let Some((last, _)) = last else {
            return Ok(None);
        };
        // The head stays live.
        let last_seq = through.min(last - 1);
        let (first_seq, prev_hash, previous) = match self.archived_through(tenant, stream).await? {
            Some(floor) => (floor.seq + 1, floor.hash, None),
            None => {
                let previous = self
                    .registered(tenant, stream)
                    .await?
                    .and_then(|h| h.previous);
                let genesis = genesis_hash(tenant, stream, previous.as_ref())?;
                (1, genesis, previous)
            }
        };
        Ok((last_seq >= first_seq).then(|| ArchiveRange {
            tenant: tenant.to_owned(),
            stream: stream.to_owned(),
            first_seq,
            last_seq,
            prev_hash,
            previous,
        }))
    }

    /// The position a stream's rows were last archived through (its live
    /// rows start after it), if any. The position must be a stored
    /// checkpoint's: a record that disagrees with it is corrupt.
    pub async fn archived_through(&self, tenant: &str, stream: &str) -> Result<Option<Position>> {
        let row: Option<(i64, String, Option<String>)> = on_pool!(self.store, pool => {
            sqlx::query_as(
                "SELECT a.seq, a.hash, c.hash FROM decision_archives a \
                 LEFT JOIN checkpoints c ON c.tenant = a.tenant AND c.stream = a.stream \
                 AND c.seq = a.seq WHERE a.tenant = $1 AND a.stream = $2 \
                 ORDER BY a.seq DESC LIMIT 1",
            )
            .bind(tenant)
            .bind(stream)
            .fetch_optional(pool)
            .await?
        });
        match row {
            None => Ok(None),
            Some((seq, hash, Some(signed))) if signed == hash => Ok(Some(Position { seq, hash })),
            Some((seq, _, _)) => Err(StoreError::Corrupt(format!(
                "stream {stream:?} is archived through seq {seq} but no checkpoint there holds \
                 the same hash"
            ))),
        }
    }

    /// Deletes the rows of a stream up to a stored checkpoint, once they
    /// are archived: the caller has written them out (and made the copy
    /// durable) and stored `checkpoint`, the signed position of the last
    /// of them. In one transaction: the checkpoint must be stored with the
    /// same hash, the row at its seq must still hold that hash, and a later
    /// row must exist (the head stays live); then the rows through its seq
    /// are deleted and the position recorded as the stream's archive.
    /// Returns the rows deleted. On PostgreSQL only the admin role may do
    /// this (a tenant role holds no DELETE on decisions), and the rows of
    /// past months are left to [`Decisions::drop_archived_partitions`],
    /// which the caller runs once every stream is pruned.
    pub async fn prune_through(&self, checkpoint: &Checkpoint) -> Result<u64> {
        let c = checkpoint;
        require("tenant", &c.tenant)?;
        require("stream", &c.stream)?;
        if c.seq < 1 {
            return Err(StoreError::InvalidInput(
                "nothing to prune through seq 0".into(),
            ));
        }
        self.store.check_file()?;
        let prune = if self.store.is_postgres() {
            PRUNE_PARTITIONED
        } else {
            PRUNE
        };
        Ok(on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            let stored: Option<String> = sqlx::query_scalar(
                "SELECT hash FROM checkpoints WHERE tenant = $1 AND stream = $2 AND seq = $3",
            )
            .bind(&c.tenant)
            .bind(&c.stream)
            .bind(c.seq)
            .fetch_optional(&mut *tx)
            .await?;
            if stored.as_deref() != Some(c.hash.as_str()) {
                return Err(StoreError::InvalidInput(format!(
                    "no stored checkpoint of stream {:?} at seq {} with that hash: \
                     rows are pruned only through a stored, signed checkpoint",
                    c.stream, c.seq
                )));
            }
            let row: Option<String> = sqlx::query_scalar(
                "SELECT hash FROM decisions WHERE tenant = $1 AND stream = $2 AND seq = $3",
            )
            .bind(&c.tenant)
            .bind(&c.stream)
            .bind(c.seq)
            .fetch_optional(&mut *tx)
            .await?;
            if row.as_deref() != Some(c.hash.as_str()) {
                return Err(StoreError::Conflict(format!(
                    "stream {:?} seq {} is not the checkpointed row (missing or rewritten)",
                    c.stream, c.seq
                )));
            }
            let later: Option<i64> = sqlx::query_scalar(
                "SELECT seq FROM decisions WHERE tenant = $1 AND stream = $2 AND seq > $3 \
                 LIMIT 1",
            )
            .bind(&c.tenant)
            .bind(&c.stream)
            .bind(c.seq)
            .fetch_optional(&mut *tx)
            .await?;
            if later.is_none() {
                return Err(StoreError::InvalidInput(format!(
                    "seq {} is the head of stream {:?}: a stream's last row stays live",
                    c.seq, c.stream
                )));
            }
            let deleted = sqlx::query(prune)
            .bind(&c.tenant)
            .bind(&c.stream)
            .bind(c.seq)
            .bind(Timestamp::now().as_millisecond())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query(
                "INSERT INTO decision_archives (tenant, stream, seq, hash, at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&c.tenant)
            .bind(&c.stream)
            .bind(c.seq)
            .bind(&c.hash)
            .bind(Timestamp::now().as_millisecond())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            deleted
        }))
    }

    /// [`Decisions::check_position`] for a stream that may be archived: a
    /// position at the stream's archive must match it, one below is
    /// archived (checked offline, with `toolgate audit verify --archive`)
    /// and is not a problem here; beyond, the live row must hold the hash.
    pub async fn check_live_position(
        &self,
        tenant: &str,
        stream: &str,
        seq: i64,
        hash: &str,
    ) -> Result<Option<String>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.live_position_problem(tenant, stream, seq, hash).await
    }

    /// [`Decisions::check_live_position`] without checking the names.
    pub(super) async fn live_position_problem(
        &self,
        tenant: &str,
        stream: &str,
        seq: i64,
        hash: &str,
    ) -> Result<Option<String>> {
        if seq > 0
            && let Some(floor) = self.archived_through(tenant, stream).await?
            && seq <= floor.seq
        {
            return Ok((seq == floor.seq && floor.hash != hash)
                .then(|| format!("stream {stream:?} seq {seq} has another hash (rewritten)")));
        }
        self.position_problem(tenant, stream, seq, hash).await
    }
}
