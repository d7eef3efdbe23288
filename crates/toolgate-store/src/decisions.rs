//! Append-only decision log, hash-chained per (tenant, stream).
//!
//! A stream is one writer: a sidecar instance names its stream
//! `{pod}/{uuidv7}` once at start, so sidecars of one tenant never wait for
//! each other's head row (one chain per tenant serialised every append of
//! the tenant). Rows written before streams existed form the stream
//! [`LEGACY_STREAM`] of their tenant.
//!
//! Row `seq` (1-based per stream) stores `prev_hash`, the previous row's hash
//! (for seq 1 the stream's genesis, see [`genesis_hash`]), and `hash`, the
//! SHA-256 of the RFC 8785 canonical JSON of the record together with
//! tenant, stream, seq and prev_hash. A head row per stream (advanced by
//! every append) holds the last seq and hash: appenders lock it so the chain
//! stays linear under concurrency, and [`Decisions::verify`] compares it with
//! the last row so that truncating the newest rows is detected as well as
//! edits, gaps and reordering in the middle.
//!
//! A stream opened with [`Decisions::open_stream`] starts from the head of
//! the previous stream its writer knew (a restarted sidecar names its pod's
//! last stream): the genesis hash covers that link, and verification checks
//! that the previous chain still contains it.
//!
//! The chain alone proves integrity against edits that do not rewrite every
//! later row and the head; signed checkpoints of the heads
//! ([`crate::Checkpoints`]) are what make a truncation with a rewritten head,
//! or a full rewrite, detectable.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{BeginWrite, Result, Store, StoreError, on_pool, require, require_opt, ts_from_ms};

/// `prev_hash` of the first row of a tenant's [`LEGACY_STREAM`] chain.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The stream of rows written before chains per stream existed (and of
/// writers that name no stream, such as a sidecar of the previous release
/// during a rolling upgrade). Its rows hash the v1 document, without a
/// stream key, so they keep verifying.
pub const LEGACY_STREAM: &str = "legacy";

/// Version tag of the legacy document (no stream key).
const HASH_FORMAT_LEGACY: u32 = 1;
/// Version tag of the per-stream document.
const HASH_FORMAT: u32 = 2;

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

/// A stream's head as the database holds it.
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

const INSERT: &str = "INSERT INTO decisions (tenant, seq, decision_id, run_id, step_id, tool, \
    verdict, reason, message, matched_rule, policy_version, risk, args_digest, call_digest, \
    definition_digest, created_at, prev_hash, hash, stream) VALUES ($1, $2, $3, $4, $5, $6, $7, \
    $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)";

impl DecisionRow {
    fn into_chained(self) -> Result<ChainedDecision> {
        Ok(ChainedDecision {
            record: DecisionRecord {
                decision_id: self.decision_id,
                run_id: self.run_id,
                step_id: self.step_id,
                tool: self.tool,
                verdict: self.verdict,
                reason: self.reason,
                message: self.message,
                matched_rule: self.matched_rule,
                policy_version: self.policy_version,
                risk: self.risk,
                args_digest: self.args_digest,
                call_digest: self.call_digest,
                definition_digest: self.definition_digest,
                created_at: ts_from_ms(self.created_at)?,
            },
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

/// Canonical JSON (RFC 8785) of the record alone, with `created_at` as the
/// stored millisecond value. `call_digest` is hashed when present; rows from
/// before it existed keep the document (and so the hash) they were written
/// with.
fn record_canonical(r: &DecisionRecord, created_at_ms: i64) -> Result<String> {
    let mut value = serde_json::json!({
        "decision_id": r.decision_id,
        "run_id": r.run_id,
        "step_id": r.step_id,
        "tool": r.tool,
        "verdict": r.verdict,
        "reason": r.reason,
        "message": r.message,
        "matched_rule": r.matched_rule,
        "policy_version": r.policy_version,
        "risk": r.risk,
        "args_digest": r.args_digest,
        "created_at_ms": created_at_ms,
    });
    if let (Some(digest), Some(obj)) = (&r.call_digest, value.as_object_mut()) {
        obj.insert("call_digest".into(), digest.clone().into());
    }
    if let (Some(digest), Some(obj)) = (&r.definition_digest, value.as_object_mut()) {
        obj.insert("definition_digest".into(), digest.clone().into());
    }
    serde_json_canonicalizer::to_string(&value)
        .map_err(|e| StoreError::InvalidInput(format!("cannot canonicalize record: {e}")))
}

/// Canonical JSON of a string (tenant, stream names).
fn string_canonical(value: &str) -> Result<String> {
    serde_json_canonicalizer::to_string(&serde_json::Value::String(value.to_owned()))
        .map_err(|e| StoreError::InvalidInput(format!("cannot canonicalize string: {e}")))
}

/// The hashed document of one row: the RFC 8785 canonical JSON of
/// `{"prev_hash", "record", "seq", "stream", "tenant", "v": 2}`, or for the
/// [`LEGACY_STREAM`] the v1 document without `"stream"` (so rows written
/// before streams keep their hashes, and a row cannot be moved between the
/// legacy chain and another stream). RFC 8785 sorts keys and adds no
/// whitespace, so the document can be assembled from canonical parts; on
/// PostgreSQL the `decisions_chain` trigger (migration 0006) assembles the
/// same text so that the database, not the caller, chains each row.
/// `prev_hash` is lowercase hex and `seq` an integer, so neither needs
/// escaping.
fn hashed_document(
    tenant_json: &str,
    stream_json: Option<&str>,
    seq: i64,
    prev_hash: &str,
    record_json: &str,
) -> String {
    match stream_json {
        None => format!(
            "{{\"prev_hash\":\"{prev_hash}\",\"record\":{record_json},\"seq\":{seq},\
             \"tenant\":{tenant_json},\"v\":{HASH_FORMAT_LEGACY}}}"
        ),
        Some(stream_json) => format!(
            "{{\"prev_hash\":\"{prev_hash}\",\"record\":{record_json},\"seq\":{seq},\
             \"stream\":{stream_json},\"tenant\":{tenant_json},\"v\":{HASH_FORMAT}}}"
        ),
    }
}

/// The hash of one row: hex SHA-256 of [`hashed_document`].
fn row_hash(
    tenant: &str,
    stream: &str,
    seq: i64,
    prev_hash: &str,
    r: &DecisionRecord,
    created_at_ms: i64,
) -> Result<String> {
    let stream_json = if stream == LEGACY_STREAM {
        None
    } else {
        Some(string_canonical(stream)?)
    };
    let doc = hashed_document(
        &string_canonical(tenant)?,
        stream_json.as_deref(),
        seq,
        prev_hash,
        &record_canonical(r, created_at_ms)?,
    );
    Ok(crate::sha256_hex(doc.as_bytes()))
}

/// The `prev_hash` of a stream's first row. [`GENESIS_HASH`] for the
/// [`LEGACY_STREAM`]; otherwise the SHA-256 of the RFC 8785 canonical start
/// document `{"previous": null | {"hash", "seq", "stream"}, "stream",
/// "tenant", "type": "toolgate.stream.start", "v": 2}`, so the first row
/// commits to the stream's name and to the previous head its writer knew.
/// Migration 0006 (`toolgate_stream_genesis`) computes the same text.
pub fn genesis_hash(tenant: &str, stream: &str, previous: Option<&StreamLink>) -> Result<String> {
    if stream == LEGACY_STREAM {
        return Ok(GENESIS_HASH.to_owned());
    }
    let previous = match previous {
        None => "null".to_owned(),
        Some(link) => format!(
            "{{\"hash\":{},\"seq\":{},\"stream\":{}}}",
            string_canonical(&link.hash)?,
            link.seq,
            string_canonical(&link.stream)?
        ),
    };
    let doc = format!(
        "{{\"previous\":{previous},\"stream\":{},\"tenant\":{},\
         \"type\":\"toolgate.stream.start\",\"v\":{HASH_FORMAT}}}",
        string_canonical(stream)?,
        string_canonical(tenant)?
    );
    Ok(crate::sha256_hex(doc.as_bytes()))
}

/// PostgreSQL: append one row. The `decisions_chain` trigger (migration
/// 0006) assigns seq, prev_hash and hash from the stream's head row, which
/// it locks and advances in the same statement, over the same canonical
/// document as [`hashed_document`]; it seeds the head on the stream's first
/// append. A concurrent appender of the same stream waits for the head row,
/// so the chain stays linear; other streams are not affected. A tenant role
/// that may only INSERT cannot choose its chain position or hashes.
const PG_APPEND: &str = "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, \
        verdict, reason, message, matched_rule, policy_version, risk, args_digest, created_at, \
        call_digest, definition_digest, stream) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
    RETURNING seq, prev_hash, hash";

/// Decision log operations. Obtain with [`Store::decisions`].
#[derive(Debug, Clone, Copy)]
pub struct Decisions<'a> {
    pub(crate) store: &'a Store,
}

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
            crate::Backend::Sqlite(pool) => append_sqlite(pool, tenant, stream, records).await,
        }
    }

    /// Opens `stream` for `tenant`, starting from the current head of
    /// `previous` (another stream of the tenant) when given; returns the new
    /// head (seq 0, the genesis hash). Opening is optional (the first
    /// append seeds an unlinked head) but it is how a restarted writer
    /// links its new chain to the history it knew. An existing stream, the
    /// reserved [`LEGACY_STREAM`] and an unknown `previous` are refused.
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
                        let head: Option<(i64, String)> = sqlx::query_as(
                            "SELECT seq, hash FROM decision_heads WHERE tenant = $1 AND stream = $2",
                        )
                        .bind(tenant)
                        .bind(p)
                        .fetch_optional(&mut *tx)
                        .await?;
                        let (seq, hash) = head.ok_or_else(|| {
                            StoreError::InvalidInput(format!("previous stream {p} does not exist"))
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

    /// The head of one stream, if the stream exists.
    pub async fn head(&self, tenant: &str, stream: &str) -> Result<Option<StreamHead>> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        let sql =
            format!("SELECT {HEAD_COLUMNS} FROM decision_heads WHERE tenant = $1 AND stream = $2");
        let row: Option<HeadRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(stream).fetch_optional(pool).await?
        });
        row.map(HeadRow::into_head).transpose()
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
                "SELECT stream FROM decision_heads WHERE tenant = $1 \
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
                 UNION SELECT stream FROM decision_heads WHERE tenant = $1 ORDER BY stream",
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

    async fn max_seq(&self, tenant: &str, stream: &str) -> Result<Option<i64>> {
        Ok(on_pool!(self.store, pool => {
            sqlx::query_scalar(
                "SELECT max(seq) FROM decisions WHERE tenant = $1 AND stream = $2",
            )
            .bind(tenant)
            .bind(stream)
            .fetch_one(pool)
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
        let found: Option<String> = if seq == 0 {
            match self.head(tenant, stream).await? {
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
                "stream {stream} has no seq {seq} (truncated or removed)"
            )),
            Some(h) if h != hash => Some(format!(
                "stream {stream} seq {seq} has another hash (rewritten)"
            )),
            Some(_) => None,
        })
    }

    /// Recomputes every stream's chain of `tenant`, or of every tenant with
    /// rows or a head when `None`, and reports the first broken seq of each.
    pub async fn verify(&self, tenant: Option<&str>) -> Result<Vec<ChainReport>> {
        let chains: Vec<(String, String)> = match tenant {
            Some(t) => {
                require("tenant", t)?;
                on_pool!(self.store, pool => {
                    sqlx::query_as(
                        "SELECT tenant, stream FROM decisions WHERE tenant = $1 \
                         UNION SELECT tenant, stream FROM decision_heads WHERE tenant = $1 \
                         ORDER BY tenant, stream",
                    )
                    .bind(t)
                    .fetch_all(pool)
                    .await?
                })
            }
            None => on_pool!(self.store, pool => {
                sqlx::query_as(
                    "SELECT tenant, stream FROM decisions \
                     UNION SELECT tenant, stream FROM decision_heads ORDER BY tenant, stream",
                )
                .fetch_all(pool)
                .await?
            }),
        };
        let mut reports = Vec::with_capacity(chains.len());
        for (t, s) in chains {
            reports.push(self.verify_one(t, s).await?);
        }
        Ok(reports)
    }

    /// Verifies one stream's chain.
    pub async fn verify_stream(&self, tenant: &str, stream: &str) -> Result<ChainReport> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.verify_one(tenant.to_owned(), stream.to_owned()).await
    }

    async fn verify_one(&self, tenant: String, stream: String) -> Result<ChainReport> {
        // The head first: rows appended while we read are beyond it and
        // ignored, so verifying a live stream does not race its writer
        // (on PostgreSQL a row and its head advance commit together).
        let head = match self.head(&tenant, &stream).await {
            Ok(h) => h,
            Err(StoreError::Corrupt(problem)) => {
                return Ok(broken(tenant, stream, 0, problem));
            }
            Err(e) => return Err(e),
        };
        let genesis = genesis_hash(
            &tenant,
            &stream,
            head.as_ref().and_then(|h| h.previous.as_ref()),
        )?;
        let mut report = ChainReport {
            tenant,
            stream,
            rows: 0,
            last_seq: 0,
            last_hash: genesis.clone(),
            ok: true,
            first_broken_seq: None,
            problem: None,
        };
        let max_seq = head.as_ref().map_or(i64::MAX, |h| h.seq);
        let mut expected_seq = 1i64;
        let mut prev = genesis;
        let mut last_seen = 0i64;
        'pages: loop {
            let rows = self
                .page(
                    &report.tenant,
                    &report.stream,
                    last_seen,
                    max_seq,
                    VERIFY_PAGE,
                )
                .await?;
            let done = (rows.len() as i64) < VERIFY_PAGE;
            for row in rows {
                report.rows += 1;
                last_seen = row.seq;
                if let Some(problem) =
                    check_row(&report.tenant, &report.stream, expected_seq, &prev, &row)
                {
                    report.ok = false;
                    report.first_broken_seq = Some(expected_seq.min(row.seq));
                    report.problem = Some(problem);
                    break 'pages;
                }
                expected_seq += 1;
                prev = row.hash;
            }
            if done {
                break;
            }
        }
        if !report.ok {
            return Ok(report);
        }
        let last_seq = expected_seq - 1;
        report.last_seq = last_seq;
        report.last_hash.clone_from(&prev);
        // Rows end here; the head must agree, or newest rows were removed
        // (or the head was tampered with).
        let problem = match &head {
            None if last_seq > 0 => Some("chain head is missing".to_owned()),
            None => None,
            Some(h) if h.seq > last_seq => Some(format!(
                "rows end at seq {last_seq} but the chain head is at seq {}",
                h.seq
            )),
            Some(h) if h.seq != last_seq || h.hash != prev => Some(format!(
                "chain head (seq {}) does not match the last row (seq {last_seq})",
                h.seq
            )),
            Some(_) => None,
        };
        if let Some(p) = problem {
            report.ok = false;
            report.first_broken_seq = Some(last_seq + 1);
            report.problem = Some(p);
            return Ok(report);
        }
        // Rows past the head read above are either appends that committed
        // since (their head moved with them) or rows slipped in behind a
        // head that was wound back: re-read the head to tell them apart.
        if let Some(h) = &head
            && let Some(beyond) = self.max_seq(&report.tenant, &report.stream).await?
            && beyond > h.seq
        {
            let now = self.head(&report.tenant, &report.stream).await?;
            if now.is_none_or(|n| n.seq < beyond) {
                report.ok = false;
                report.first_broken_seq = Some(h.seq + 1);
                report.problem = Some(format!(
                    "rows up to seq {beyond} lie beyond the chain head (seq {})",
                    h.seq
                ));
                return Ok(report);
            }
        }
        // The previous stream must still hold the head this stream started
        // from: truncating or rewriting it below that point is detected.
        if let Some(link) = head.as_ref().and_then(|h| h.previous.as_ref()) {
            let p = self
                .check_position(&report.tenant, &link.stream, link.seq, &link.hash)
                .await?;
            if let Some(p) = p {
                report.ok = false;
                report.first_broken_seq = Some(0);
                report.problem = Some(format!("previous-stream link broken: {p}"));
            }
        }
        Ok(report)
    }
}

fn broken(tenant: String, stream: String, seq: i64, problem: String) -> ChainReport {
    ChainReport {
        tenant,
        stream,
        rows: 0,
        last_seq: 0,
        last_hash: String::new(),
        ok: false,
        first_broken_seq: Some(seq),
        problem: Some(problem),
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
        .map(|((seq, prev_hash, hash), record)| ChainedDecision {
            tenant: tenant.to_owned(),
            stream: stream.to_owned(),
            seq,
            prev_hash,
            hash,
            record,
        })
        .collect())
}

/// Appends one record on PostgreSQL inside the caller's transaction.
pub(crate) async fn append_pg_in(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    stream: &str,
    record: DecisionRecord,
) -> Result<ChainedDecision> {
    require("stream", stream)?;
    let (seq, prev_hash, hash) = pg_append_one(conn, tenant, stream, &record).await?;
    Ok(ChainedDecision {
        tenant: tenant.to_owned(),
        stream: stream.to_owned(),
        seq,
        prev_hash,
        hash,
        record,
    })
}

/// Checks a record and normalises its time to the stored precision, as
/// every append does before hashing.
pub(crate) fn prepared(mut record: DecisionRecord) -> Result<DecisionRecord> {
    validate(&record)?;
    record.created_at = ts_from_ms(record.created_at.as_millisecond())?;
    Ok(record)
}

/// Runs [`PG_APPEND`] for one record and returns its seq and hashes.
async fn pg_append_one(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    stream: &str,
    r: &DecisionRecord,
) -> Result<(i64, String, String)> {
    Ok(sqlx::query_as(PG_APPEND)
        .bind(tenant)
        .bind(&r.decision_id)
        .bind(&r.run_id)
        .bind(&r.step_id)
        .bind(&r.tool)
        .bind(&r.verdict)
        .bind(&r.reason)
        .bind(&r.message)
        .bind(&r.matched_rule)
        .bind(&r.policy_version)
        .bind(&r.risk)
        .bind(&r.args_digest)
        .bind(r.created_at.as_millisecond())
        .bind(&r.call_digest)
        .bind(&r.definition_digest)
        .bind(stream)
        .fetch_one(conn)
        .await?)
}

/// SQLite: `BEGIN IMMEDIATE` holds the database write lock, so reading the
/// head and inserting after it cannot interleave with another appender.
async fn append_sqlite(
    pool: &sqlx::SqlitePool,
    tenant: &str,
    stream: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    let mut tx = pool.begin_write().await?;
    let out = append_sqlite_in(&mut tx, tenant, stream, records).await?;
    tx.commit().await?;
    Ok(out)
}

/// [`append_sqlite`] inside the caller's write transaction.
pub(crate) async fn append_sqlite_in(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    stream: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    require("stream", stream)?;
    let head_sql = "SELECT seq, hash FROM decision_heads WHERE tenant = $1 AND stream = $2";
    let head: Option<(i64, String)> = sqlx::query_as(head_sql)
        .bind(tenant)
        .bind(stream)
        .fetch_optional(&mut *tx)
        .await?;
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
        let hash = row_hash(tenant, stream, seq, &prev, &record, created_ms)?;
        sqlx::query(INSERT)
            .bind(tenant)
            .bind(seq)
            .bind(&record.decision_id)
            .bind(&record.run_id)
            .bind(&record.step_id)
            .bind(&record.tool)
            .bind(&record.verdict)
            .bind(&record.reason)
            .bind(&record.message)
            .bind(&record.matched_rule)
            .bind(&record.policy_version)
            .bind(&record.risk)
            .bind(&record.args_digest)
            .bind(&record.call_digest)
            .bind(&record.definition_digest)
            .bind(created_ms)
            .bind(&prev)
            .bind(&hash)
            .bind(stream)
            .execute(&mut *tx)
            .await?;
        out.push(ChainedDecision {
            tenant: tenant.to_owned(),
            stream: stream.to_owned(),
            seq,
            prev_hash: std::mem::replace(&mut prev, hash.clone()),
            hash,
            record,
        });
    }
    Ok(out)
}

/// Returns what is wrong with `row` when it should be `expected_seq` following
/// a row hashed `prev`, or `None` if it checks out.
fn check_row(
    tenant: &str,
    stream: &str,
    expected_seq: i64,
    prev: &str,
    row: &DecisionRow,
) -> Option<String> {
    if row.seq != expected_seq {
        return Some(format!(
            "seq {expected_seq} is missing (next row present is seq {})",
            row.seq
        ));
    }
    if row.prev_hash != prev {
        return Some(if row.seq == 1 {
            "seq 1 prev_hash does not match the stream's genesis hash".to_owned()
        } else {
            format!(
                "seq {} prev_hash does not match the hash of seq {}",
                row.seq,
                row.seq - 1
            )
        });
    }
    let record = match DecisionRow::clone_record(row) {
        Ok(r) => r,
        Err(e) => return Some(format!("seq {} is unreadable: {e}", row.seq)),
    };
    match row_hash(
        tenant,
        stream,
        row.seq,
        &row.prev_hash,
        &record,
        row.created_at,
    ) {
        Ok(h) if h == row.hash => None,
        Ok(_) => Some(format!(
            "seq {} content does not match its hash (edited or moved)",
            row.seq
        )),
        Err(e) => Some(format!("seq {} cannot be hashed: {e}", row.seq)),
    }
}

impl DecisionRow {
    fn clone_record(&self) -> Result<DecisionRecord> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DecisionRecord {
        DecisionRecord {
            decision_id: "d\u{e9}\"1".into(),
            run_id: "r".into(),
            step_id: "s".into(),
            tool: "t".into(),
            verdict: "allow".into(),
            reason: "x".into(),
            message: Some("line\nbreak \u{1F600}".into()),
            matched_rule: None,
            policy_version: "p@1".into(),
            risk: "low".into(),
            args_digest: "sha256:0".into(),
            call_digest: Some("sha256:1".into()),
            definition_digest: None,
            created_at: Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
        }
    }

    /// The piecewise document must equal canonicalizing the whole object,
    /// or the PostgreSQL and SQLite hashes (and `verify`) would diverge;
    /// both the legacy (v1) and the per-stream (v2) shapes.
    #[test]
    fn hashed_document_is_rfc8785_canonical() {
        let r = sample();
        let record_json = record_canonical(&r, 1_700_000_000_123).unwrap();
        let record_value: serde_json::Value = serde_json::from_str(&record_json).unwrap();
        for tenant in ["acme", "t\u{e9}nant \"q\"", "\u{1F600}"] {
            let legacy = serde_json::json!({
                "v": HASH_FORMAT_LEGACY,
                "tenant": tenant,
                "seq": 42,
                "prev_hash": GENESIS_HASH,
                "record": record_value,
            });
            let built = hashed_document(
                &string_canonical(tenant).unwrap(),
                None,
                42,
                GENESIS_HASH,
                &record_json,
            );
            assert_eq!(built, serde_json_canonicalizer::to_string(&legacy).unwrap());
            for stream in ["pod-1/0190", "p\u{e9}d \"x\"/\u{1F600}"] {
                let streamed = serde_json::json!({
                    "v": HASH_FORMAT,
                    "tenant": tenant,
                    "stream": stream,
                    "seq": 42,
                    "prev_hash": GENESIS_HASH,
                    "record": record_value,
                });
                let built = hashed_document(
                    &string_canonical(tenant).unwrap(),
                    Some(&string_canonical(stream).unwrap()),
                    42,
                    GENESIS_HASH,
                    &record_json,
                );
                assert_eq!(
                    built,
                    serde_json_canonicalizer::to_string(&streamed).unwrap()
                );
            }
        }
        let trigger =
            include_str!("../../../migrations/postgres/0006_decision_streams_and_checkpoints.sql");
        assert!(trigger.contains(&format!("\"v\":{HASH_FORMAT}}}")));
        assert!(trigger.contains(&format!("\"v\":{HASH_FORMAT_LEGACY}}}")));
    }

    /// The genesis document is canonical JSON too, and commits to the link.
    #[test]
    fn genesis_document_is_canonical_and_covers_the_link() {
        let link = StreamLink {
            stream: "pod/\u{e9}".into(),
            seq: 7,
            hash: "ab".repeat(32),
        };
        let whole = serde_json::json!({
            "v": HASH_FORMAT,
            "type": "toolgate.stream.start",
            "tenant": "acme",
            "stream": "pod/2",
            "previous": {"stream": link.stream, "seq": 7, "hash": link.hash},
        });
        let expected = crate::sha256_hex(
            serde_json_canonicalizer::to_string(&whole)
                .unwrap()
                .as_bytes(),
        );
        assert_eq!(
            genesis_hash("acme", "pod/2", Some(&link)).unwrap(),
            expected
        );
        let unlinked = genesis_hash("acme", "pod/2", None).unwrap();
        assert_ne!(unlinked, expected);
        let mut other = link.clone();
        other.seq = 6;
        assert_ne!(
            genesis_hash("acme", "pod/2", Some(&other)).unwrap(),
            expected
        );
        assert_ne!(genesis_hash("acme2", "pod/2", None).unwrap(), unlinked);
        assert_eq!(
            genesis_hash("acme", LEGACY_STREAM, None).unwrap(),
            GENESIS_HASH
        );
    }

    #[test]
    fn hash_covers_every_field() {
        let h = |tenant: &str, stream: &str, seq: i64, prev: &str, r: &DecisionRecord, at: i64| {
            row_hash(tenant, stream, seq, prev, r, at).unwrap()
        };
        let base = h("acme", "s", 1, GENESIS_HASH, &sample(), 5);
        assert_ne!(base, h("acme2", "s", 1, GENESIS_HASH, &sample(), 5));
        assert_ne!(base, h("acme", "s2", 1, GENESIS_HASH, &sample(), 5));
        assert_ne!(
            base,
            h("acme", LEGACY_STREAM, 1, GENESIS_HASH, &sample(), 5)
        );
        assert_ne!(base, h("acme", "s", 2, GENESIS_HASH, &sample(), 5));
        assert_ne!(base, h("acme", "s", 1, &"1".repeat(64), &sample(), 5));
        assert_ne!(base, h("acme", "s", 1, GENESIS_HASH, &sample(), 6));
        let mut r = sample();
        r.matched_rule = Some("r".into());
        assert_ne!(base, h("acme", "s", 1, GENESIS_HASH, &r, 5));
        let mut r = sample();
        r.call_digest = Some("sha256:2".into());
        assert_ne!(base, h("acme", "s", 1, GENESIS_HASH, &r, 5));
    }

    /// A definition digest is hashed with the record when present (in
    /// RFC 8785 key order), and absent rows keep their document.
    #[test]
    fn definition_digest_is_hashed_only_when_present() {
        let mut r = sample();
        let without = record_canonical(&r, 1).unwrap();
        assert!(!without.contains("definition_digest"));
        r.definition_digest = Some("sha256:d".into());
        let with = record_canonical(&r, 1).unwrap();
        assert!(
            with.contains(r#""decision_id":"dé\"1","definition_digest":"sha256:d""#),
            "{with}"
        );
    }

    /// Rows written before `call_digest` existed hash as they always did.
    #[test]
    fn record_without_call_digest_keeps_the_old_document() {
        let mut r = sample();
        r.call_digest = None;
        let doc = record_canonical(&r, 5).unwrap();
        assert!(!doc.contains("call_digest"));
        r.call_digest = Some("sha256:1".into());
        assert!(
            record_canonical(&r, 5)
                .unwrap()
                .contains("\"call_digest\":\"sha256:1\"")
        );
    }
}
