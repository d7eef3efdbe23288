//! Append-only decision log, hash-chained per (tenant, stream).
//!
//! A stream is one writer: a sidecar instance names its stream
//! `{pod}/{uuidv7}` once at start, so sidecars of one tenant never wait for
//! each other (one chain per tenant serialised every append of the
//! tenant). Rows written before streams existed form the stream
//! [`LEGACY_STREAM`] of their tenant.
//!
//! Row `seq` (1-based per stream) stores `prev_hash`, the previous row's hash
//! (for seq 1 the stream's genesis, see [`genesis_hash`]), and `hash`, the
//! SHA-256 of the RFC 8785 canonical JSON of the record together with
//! tenant, stream, seq and prev_hash. The writer computes all three. The
//! database keeps one row per seq, so a chain cannot fork or rewind, and
//! accepts a row from any role but the tables' owner only if it continues
//! the row before it (its prev_hash is the hash of the previous seq), so a
//! tenant role cannot skip or relink either (migration 0008). A stream's head is
//! its last row: appending writes nothing but the row. `decision_streams`
//! (the head table `decision_heads` until migration 0008; on PostgreSQL
//! that name is now a view computing heads for earlier releases) registers
//! each stream (its previous-stream link, when it started, and the
//! position recorded then), and [`Decisions::verify`] recomputes every hash
//! and requires the chain to reach that recorded position, so edits, gaps
//! and reordering are detected anywhere.
//!
//! A stream opened with [`Decisions::open_stream`] starts from the head of
//! the previous stream its writer knew (a restarted sidecar names its pod's
//! last stream): the genesis hash covers that link, and verification checks
//! that the previous chain still contains it.
//!
//! The chain alone proves integrity against edits that do not rewrite every
//! later row; removing the newest rows, or rewriting a stream from some row
//! on, leaves a shorter or different chain that is consistent in itself.
//! Signed checkpoints of the heads ([`crate::Checkpoints`]) are what make
//! those detectable.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{Result, Store, StoreError, on_pool, require, require_opt, ts_from_ms};

mod append;
mod archive;
mod chain;
mod heads;
mod lookup;
mod message;
mod partitions;
mod query;
mod verify;

pub(crate) use append::{append_pg_in, append_sqlite_in, prepared};
pub use archive::ArchiveRange;
pub use chain::genesis_hash;
pub(crate) use heads::HeadCache;
pub use message::{
    DecisionMessage, INPUT_SHA256_MEMBER, SHADOW_CHANGED_MARK, ShadowOutcome, WouldHave,
};
pub use partitions::{PARTITION_MONTHS_AHEAD, PartitionPrune};
pub use query::{DecisionFilter, DecisionPage, LogCursor, LoggedDecision, MAX_QUERY_LIMIT};

/// `prev_hash` of the first row of a tenant's [`LEGACY_STREAM`] chain.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The stream of rows written before chains per stream existed (and of
/// writers that name no stream, such as a sidecar of the previous release
/// during a rolling upgrade). Its rows hash the v1 document, without a
/// stream key, so they keep verifying.
pub const LEGACY_STREAM: &str = "legacy";

/// Checks a stream name: the store's rule for every id-like field
/// ([`crate::check_field`]: 1 to 1,024 bytes, not blank, no control
/// characters). PostgreSQL's `toolgate_valid_stream_name` (migration 0012)
/// is this rule in SQL, so a tenant role cannot register a stream the store
/// would refuse; a differential test keeps the two the same.
pub fn check_stream(stream: &str) -> Result<()> {
    require("stream", stream)
}

/// Rows read per round trip while verifying.
const VERIFY_PAGE: i64 = 1000;

/// Largest batch accepted by [`Decisions::append_batch`].
const MAX_BATCH: usize = 10_000;

/// One policy decision, as the sidecar reports it. Denials are recorded too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Decision id issued by the policy gate.
    pub decision_id: String,
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Tool that was checked.
    pub tool: String,
    /// Verdict (`allow`, `deny`, `escalate`, ...).
    pub verdict: String,
    /// Closed reason code.
    pub reason: String,
    /// Optional human-readable message.
    pub message: Option<String>,
    /// Rule that matched, if any.
    pub matched_rule: Option<String>,
    /// Policy version that decided.
    pub policy_version: String,
    /// Risk class.
    pub risk: String,
    /// Digest of the checked arguments.
    pub args_digest: String,
    /// Digest of the whole call (tool, action, arguments); `None` only on
    /// rows written before it existed.
    #[serde(default)]
    pub call_digest: Option<String>,
    /// For calls through an MCP gateway: the `sha256:` digest of the tool's
    /// definition as the server announced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_digest: Option<String>,
    /// When the decision was made; stored with millisecond precision.
    pub created_at: Timestamp,
}

/// A record as stored in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainedDecision {
    /// Owning tenant.
    pub tenant: String,
    /// Stream (chain) of the tenant the record belongs to.
    pub stream: String,
    /// Position in the stream's chain, starting at 1.
    pub seq: i64,
    /// Hash of the previous row (the stream's genesis hash for seq 1).
    pub prev_hash: String,
    /// Hash of this row.
    pub hash: String,
    /// The record (created_at truncated to milliseconds).
    pub record: DecisionRecord,
}

/// Result of verifying one stream's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainReport {
    /// Tenant verified.
    pub tenant: String,
    /// Stream verified.
    pub stream: String,
    /// Rows read.
    pub rows: u64,
    /// Seq of the last row that checked out (0 when none did).
    pub last_seq: i64,
    /// Hash of that row (the genesis hash when `last_seq` is 0): what a
    /// checkpoint signs.
    pub last_hash: String,
    /// Whether the whole chain, including the head, checks out.
    pub ok: bool,
    /// The first seq at which the chain is broken (edited, missing or out of
    /// place).
    pub first_broken_seq: Option<i64>,
    /// What was wrong at `first_broken_seq`.
    pub problem: Option<String>,
}

/// A position in one stream: its seq and the hash of the row there (the
/// stream's genesis hash at seq 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// Seq of the row.
    pub seq: i64,
    /// Its hash.
    pub hash: String,
}

/// The previous stream's head a stream started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamLink {
    /// Previous stream of the same tenant.
    pub stream: String,
    /// Its head seq when this stream was opened.
    pub seq: i64,
    /// Its head hash then.
    pub hash: String,
}

/// A stream's head: its last row (or, before it has rows beyond it, the
/// position recorded when it was registered) and how it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHead {
    /// Tenant.
    pub tenant: String,
    /// Stream.
    pub stream: String,
    /// Last appended seq (0 for an opened, empty stream).
    pub seq: i64,
    /// Hash of the last row (the genesis hash at seq 0).
    pub hash: String,
    /// The previous stream's head this stream started from, if named.
    pub previous: Option<StreamLink>,
    /// When the stream was opened (unknown for heads from before streams).
    pub started_at: Option<Timestamp>,
}

#[derive(sqlx::FromRow)]
struct HeadRow {
    tenant: String,
    stream: String,
    seq: i64,
    hash: String,
    previous_stream: Option<String>,
    previous_seq: Option<i64>,
    previous_hash: Option<String>,
    started_at: Option<i64>,
}

/// Seq and hash of a stream's last row (`$1` tenant, `$2` stream).
const LAST_ROW: &str = "SELECT seq, hash FROM decisions WHERE tenant = $1 AND stream = $2 \
     ORDER BY seq DESC LIMIT 1";

/// A stream's current head (`$1` tenant, `$2` stream): its last row or its
/// recorded position, whichever is further; no row when the stream is
/// neither registered nor written.
const CURRENT_HEAD: &str = "SELECT seq, hash FROM (\
     SELECT seq, hash FROM decision_streams WHERE tenant = $1 AND stream = $2 \
     UNION ALL SELECT seq, hash FROM (SELECT seq, hash FROM decisions \
     WHERE tenant = $1 AND stream = $2 ORDER BY seq DESC LIMIT 1) AS last_row\
     ) AS positions ORDER BY seq DESC LIMIT 1";

const HEAD_COLUMNS: &str =
    "tenant, stream, seq, hash, previous_stream, previous_seq, previous_hash, started_at";

impl HeadRow {
    fn into_head(self) -> Result<StreamHead> {
        let previous = match (self.previous_stream, self.previous_seq, self.previous_hash) {
            (Some(stream), Some(seq), Some(hash)) => Some(StreamLink { stream, seq, hash }),
            (None, None, None) => None,
            _ => {
                return Err(StoreError::Corrupt(format!(
                    "stream {} of tenant {} has a partial previous-stream link",
                    self.stream, self.tenant
                )));
            }
        };
        Ok(StreamHead {
            started_at: self.started_at.map(ts_from_ms).transpose()?,
            tenant: self.tenant,
            stream: self.stream,
            seq: self.seq,
            hash: self.hash,
            previous,
        })
    }
}

#[derive(sqlx::FromRow)]
struct DecisionRow {
    tenant: String,
    stream: String,
    seq: i64,
    decision_id: String,
    run_id: String,
    step_id: String,
    tool: String,
    verdict: String,
    reason: String,
    message: Option<String>,
    matched_rule: Option<String>,
    policy_version: String,
    risk: String,
    args_digest: String,
    call_digest: Option<String>,
    definition_digest: Option<String>,
    created_at: i64,
    prev_hash: String,
    hash: String,
}

const COLUMNS: &str = "tenant, stream, seq, decision_id, run_id, step_id, tool, verdict, reason, \
    message, matched_rule, policy_version, risk, args_digest, call_digest, definition_digest, \
    created_at, prev_hash, hash";

/// One chained row, on either backend: the record's sixteen columns, then
/// the chain columns the store computed.
const INSERT: &str = "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, \
    verdict, reason, message, matched_rule, policy_version, risk, args_digest, created_at, \
    call_digest, definition_digest, stream, seq, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, \
    $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";

/// A tenant session's append (PostgreSQL, migration 0010): the parameters
/// of [`INSERT`] in the same order.
const TENANT_APPEND: &str = "SELECT toolgate_append_decision($1, $2, $3, $4, $5, $6, $7, $8, \
    $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";

/// A tenant session's batch append (PostgreSQL, migration 0011): tenant,
/// stream, the first row's seq and prev_hash, then one array per column of
/// [`INSERT`] from decision_id to definition_digest, then the hashes.
const TENANT_APPEND_BATCH: &str = "SELECT toolgate_append_decisions($1, $2, $3, $4, $5, $6, \
    $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";

impl DecisionRow {
    /// The record this row holds (created_at as stored).
    fn record(&self) -> Result<DecisionRecord> {
        Ok(DecisionRecord {
            decision_id: self.decision_id.clone(),
            run_id: self.run_id.clone(),
            step_id: self.step_id.clone(),
            tool: self.tool.clone(),
            verdict: self.verdict.clone(),
            reason: self.reason.clone(),
            message: self.message.clone(),
            matched_rule: self.matched_rule.clone(),
            policy_version: self.policy_version.clone(),
            risk: self.risk.clone(),
            args_digest: self.args_digest.clone(),
            call_digest: self.call_digest.clone(),
            definition_digest: self.definition_digest.clone(),
            created_at: ts_from_ms(self.created_at)?,
        })
    }

    fn into_chained(self) -> Result<ChainedDecision> {
        Ok(ChainedDecision {
            record: self.record()?,
            tenant: self.tenant,
            stream: self.stream,
            seq: self.seq,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

impl DecisionRecord {
    /// Checks every field as [`Decisions::append`] would, so a caller can
    /// refuse a record before promising anything about it: one bad record
    /// must never be discovered inside a batch of good ones.
    pub fn validate(&self) -> Result<()> {
        validate(self)
    }
}

fn validate(record: &DecisionRecord) -> Result<()> {
    require("decision_id", &record.decision_id)?;
    require("run_id", &record.run_id)?;
    require("step_id", &record.step_id)?;
    require("tool", &record.tool)?;
    require("verdict", &record.verdict)?;
    require("reason", &record.reason)?;
    require_opt("matched_rule", record.matched_rule.as_deref())?;
    require("policy_version", &record.policy_version)?;
    require("risk", &record.risk)?;
    require("args_digest", &record.args_digest)?;
    require_opt("call_digest", record.call_digest.as_deref())?;
    require_opt("definition_digest", record.definition_digest.as_deref())?;
    if record.message.as_ref().is_some_and(|m| m.len() > 16 * 1024) {
        return Err(StoreError::InvalidInput("message exceeds 16 KiB".into()));
    }
    Ok(())
}

/// Decision log operations. Obtain with [`Store::decisions`].
#[derive(Debug, Clone, Copy)]
pub struct Decisions<'a> {
    pub(crate) store: &'a Store,
}

impl Decisions<'_> {
    /// The head of one stream, if the stream exists: its last row when
    /// that lies beyond the position recorded in its register row.
    pub async fn head(&self, tenant: &str, stream: &str) -> Result<Option<StreamHead>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.head_unchecked(tenant, stream).await
    }

    /// [`Decisions::head`] without checking the names (read from the
    /// database by verification).
    async fn head_unchecked(&self, tenant: &str, stream: &str) -> Result<Option<StreamHead>> {
        let Some(mut head) = self.registered(tenant, stream).await? else {
            return Ok(None);
        };
        if let Some((seq, hash)) = self.last_row(tenant, stream).await?
            && seq > head.seq
        {
            head.seq = seq;
            head.hash = hash;
        }
        Ok(Some(head))
    }

    /// A stream's register row as written when the stream was opened (or
    /// seeded by its first row): seq 0 and the genesis hash, or for a stream
    /// from before migration 0008 its head as of then.
    async fn registered(&self, tenant: &str, stream: &str) -> Result<Option<StreamHead>> {
        let sql = format!(
            "SELECT {HEAD_COLUMNS} FROM decision_streams WHERE tenant = $1 AND stream = $2"
        );
        let row: Option<HeadRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(stream).fetch_optional(pool).await?
        });
        row.map(HeadRow::into_head).transpose()
    }

    /// Seq and hash of the stream's last row, if it has any.
    async fn last_row(&self, tenant: &str, stream: &str) -> Result<Option<(i64, String)>> {
        Ok(on_pool!(self.store, pool => {
            sqlx::query_as(LAST_ROW).bind(tenant).bind(stream).fetch_optional(pool).await?
        }))
    }

    /// The most recently opened stream of `tenant` whose name starts with
    /// `prefix` (a sidecar passes `{pod}/` to find the stream its previous
    /// run wrote), if any.
    pub async fn latest_stream(&self, tenant: &str, prefix: &str) -> Result<Option<String>> {
        require("tenant", tenant)?;
        require("stream prefix", prefix)?;
        let chars = i32::try_from(prefix.chars().count())
            .map_err(|_| StoreError::InvalidInput("stream prefix is too long".into()))?;
        Ok(on_pool!(self.store, pool => {
            sqlx::query_scalar(
                "SELECT stream FROM decision_streams WHERE tenant = $1 \
                 AND substr(stream, 1, $2) = $3 \
                 ORDER BY started_at DESC NULLS LAST, stream DESC LIMIT 1",
            )
            .bind(tenant)
            .bind(chars)
            .bind(prefix)
            .fetch_optional(pool)
            .await?
        }))
    }

    /// Every stream of `tenant` that has rows or a head, sorted by name.
    pub async fn streams(&self, tenant: &str) -> Result<Vec<String>> {
        require("tenant", tenant)?;
        Ok(on_pool!(self.store, pool => {
            sqlx::query_scalar(
                "SELECT stream FROM decisions WHERE tenant = $1 \
                 UNION SELECT stream FROM decision_streams WHERE tenant = $1 ORDER BY stream",
            )
            .bind(tenant)
            .fetch_all(pool)
            .await?
        }))
    }

    /// Reads up to `limit` rows of the chain of (`tenant`, `stream`) with
    /// `seq > after_seq`, in seq order, for audit export.
    pub async fn list(
        &self,
        tenant: &str,
        stream: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<ChainedDecision>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.page(
            tenant,
            stream,
            after_seq,
            i64::MAX,
            i64::from(limit.min(10_000)),
        )
        .await?
        .into_iter()
        .map(DecisionRow::into_chained)
        .collect()
    }

    async fn page(
        &self,
        tenant: &str,
        stream: &str,
        after_seq: i64,
        max_seq: i64,
        limit: i64,
    ) -> Result<Vec<DecisionRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM decisions WHERE tenant = $1 AND stream = $2 AND seq > $3 \
             AND seq <= $4 ORDER BY seq LIMIT $5"
        );
        Ok(on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(stream)
                .bind(after_seq)
                .bind(max_seq)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// Whether the chain of (`tenant`, `stream`) holds `hash` at `seq`
    /// (seq 0 is the stream's genesis): `None` if it does, else what is
    /// wrong. How a signed checkpoint, or a later stream's link, is checked.
    pub async fn check_position(
        &self,
        tenant: &str,
        stream: &str,
        seq: i64,
        hash: &str,
    ) -> Result<Option<String>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.position_problem(tenant, stream, seq, hash).await
    }

    /// [`Decisions::check_position`] for names read from the database, which
    /// verification reports on rather than refuses: a stream whose name the
    /// store would not accept still has a chain to check.
    pub(super) async fn position_problem(
        &self,
        tenant: &str,
        stream: &str,
        seq: i64,
        hash: &str,
    ) -> Result<Option<String>> {
        let found: Option<String> = if seq == 0 {
            match self.head_unchecked(tenant, stream).await? {
                None => None,
                Some(head) => Some(genesis_hash(tenant, stream, head.previous.as_ref())?),
            }
        } else {
            on_pool!(self.store, pool => {
                sqlx::query_scalar(
                    "SELECT hash FROM decisions WHERE tenant = $1 AND stream = $2 AND seq = $3",
                )
                .bind(tenant)
                .bind(stream)
                .bind(seq)
                .fetch_optional(pool)
                .await?
            })
        };
        Ok(match found {
            None => Some(format!(
                "stream {stream:?} has no seq {seq} (truncated or removed)"
            )),
            Some(h) if h != hash => Some(format!(
                "stream {stream:?} seq {seq} has another hash (rewritten)"
            )),
            Some(_) => None,
        })
    }
}
