//! Signed checkpoints of decision stream heads.
//!
//! A hash chain detects edits, but a writer with database access can cut
//! the newest rows and rewrite the head to match: the shorter chain is
//! internally consistent. A checkpoint is a position `(tenant, stream, seq,
//! hash)` signed outside the database (a DSSE envelope, see
//! `toolgate audit checkpoint`); verifying against checkpoints fails when a
//! signed position is no longer in the chain. The store keeps the signed
//! envelope verbatim and never trusts the plain columns on their own: they
//! exist to find rows, and a verifier re-reads the position from the
//! envelope's signed payload.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{Result, Store, StoreError, on_pool, require, ts_from_ms};

/// One stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Tenant of the signed head.
    pub tenant: String,
    /// Stream of the signed head.
    pub stream: String,
    /// Signed seq (0: an empty, opened stream).
    pub seq: i64,
    /// Signed hash at `seq`.
    pub hash: String,
    /// When the head was signed.
    pub at: Timestamp,
    /// Key id of the signer.
    pub keyid: String,
    /// The DSSE envelope (JSON) as signed.
    pub envelope: String,
}

#[derive(sqlx::FromRow)]
struct CheckpointRow {
    tenant: String,
    stream: String,
    seq: i64,
    hash: String,
    at: i64,
    keyid: String,
    envelope: String,
}

/// Largest envelope stored; a checkpoint envelope is a few hundred bytes.
const MAX_ENVELOPE: usize = 64 * 1024;

/// Checkpoint operations. Obtain with [`Store::checkpoints`].
#[derive(Debug, Clone, Copy)]
pub struct Checkpoints<'a> {
    pub(crate) store: &'a Store,
}

impl Checkpoints<'_> {
    /// Stores a checkpoint; `false` when one for the same position exists
    /// already (checkpointing an idle stream twice is not an error).
    pub async fn record(&self, c: &Checkpoint) -> Result<bool> {
        require("tenant", &c.tenant)?;
        require("stream", &c.stream)?;
        require("hash", &c.hash)?;
        require("keyid", &c.keyid)?;
        if c.seq < 0 {
            return Err(StoreError::InvalidInput(
                "checkpoint seq is negative".into(),
            ));
        }
        if c.envelope.is_empty() || c.envelope.len() > MAX_ENVELOPE {
            return Err(StoreError::InvalidInput(format!(
                "checkpoint envelope must be 1..={MAX_ENVELOPE} bytes"
            )));
        }
        self.store.check_file()?;
        let done = on_pool!(self.store, pool => {
            sqlx::query(
                "INSERT INTO checkpoints (tenant, stream, seq, hash, at, keyid, envelope) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (tenant, stream, seq) DO NOTHING",
            )
            .bind(&c.tenant)
            .bind(&c.stream)
            .bind(c.seq)
            .bind(&c.hash)
            .bind(c.at.as_millisecond())
            .bind(&c.keyid)
            .bind(&c.envelope)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(done == 1)
    }

    /// Checkpoints of `tenant` (every tenant when `None`), optionally of one
    /// stream, ordered by tenant, stream and seq.
    pub async fn list(
        &self,
        tenant: Option<&str>,
        stream: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        if let Some(t) = tenant {
            require("tenant", t)?;
        }
        if let Some(s) = stream {
            require("stream", s)?;
        }
        let rows: Vec<CheckpointRow> = on_pool!(self.store, pool => {
            sqlx::query_as(
                "SELECT tenant, stream, seq, hash, at, keyid, envelope FROM checkpoints \
                 WHERE ($1 IS NULL OR tenant = $1) AND ($2 IS NULL OR stream = $2) \
                 ORDER BY tenant, stream, seq",
            )
            .bind(tenant)
            .bind(stream)
            .fetch_all(pool)
            .await?
        });
        rows.into_iter()
            .map(CheckpointRow::into_checkpoint)
            .collect()
    }

    /// The newest checkpoint (highest seq) of each stream of `tenant`
    /// (every tenant when `None`), among those stored under `keyid` when
    /// given, ordered by tenant and stream. One row per stream however many
    /// checkpoints a stream has collected: what a periodic pass and the
    /// published copy need, at a cost that does not grow with the log's age.
    pub async fn latest(
        &self,
        tenant: Option<&str>,
        keyid: Option<&str>,
    ) -> Result<Vec<Checkpoint>> {
        if let Some(t) = tenant {
            require("tenant", t)?;
        }
        if let Some(k) = keyid {
            require("keyid", k)?;
        }
        let rows: Vec<CheckpointRow> = on_pool!(self.store, pool => {
            sqlx::query_as(
                "SELECT c.tenant, c.stream, c.seq, c.hash, c.at, c.keyid, c.envelope \
                 FROM checkpoints c \
                 WHERE ($1 IS NULL OR c.tenant = $1) AND ($2 IS NULL OR c.keyid = $2) \
                 AND c.seq = (SELECT max(m.seq) FROM checkpoints m \
                     WHERE m.tenant = c.tenant AND m.stream = c.stream \
                     AND ($2 IS NULL OR m.keyid = $2)) \
                 ORDER BY c.tenant, c.stream",
            )
            .bind(tenant)
            .bind(keyid)
            .fetch_all(pool)
            .await?
        });
        rows.into_iter()
            .map(CheckpointRow::into_checkpoint)
            .collect()
    }
}

impl CheckpointRow {
    fn into_checkpoint(self) -> Result<Checkpoint> {
        Ok(Checkpoint {
            at: ts_from_ms(self.at)?,
            tenant: self.tenant,
            stream: self.stream,
            seq: self.seq,
            hash: self.hash,
            keyid: self.keyid,
            envelope: self.envelope,
        })
    }
}
