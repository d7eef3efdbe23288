//! Append-only decision log, hash-chained per tenant.
//!
//! Row `seq` (1-based per tenant) stores `prev_hash`, the previous row's hash
//! (or [`GENESIS_HASH`] for seq 1), and `hash`, the SHA-256 of the RFC 8785
//! canonical JSON of the record together with tenant, seq and prev_hash. A
//! per-tenant head row (advanced by every append) holds the last
//! seq and hash: appenders lock it so the chain stays linear under
//! concurrency, and [`Decisions::verify`] compares it with the last row so that
//! truncating the newest rows is detected as well as edits, gaps and
//! reordering in the middle.
//!
//! The chain proves integrity against edits that do not rewrite every later
//! row; anchoring the head hash outside the database (e.g. in logs) is what
//! makes a full rewrite detectable.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{BeginWrite, Result, Store, StoreError, on_pool, require, require_opt, ts_from_ms};

/// `prev_hash` of the first row of every tenant's chain.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Version tag mixed into every hash so the hashed shape can evolve.
const HASH_FORMAT: u32 = 1;

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
    /// Position in the tenant's chain, starting at 1.
    pub seq: i64,
    /// Hash of the previous row ([`GENESIS_HASH`] for seq 1).
    pub prev_hash: String,
    /// Hash of this row.
    pub hash: String,
    /// The record (created_at truncated to milliseconds).
    pub record: DecisionRecord,
}

/// Result of verifying one tenant's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainReport {
    /// Tenant verified.
    pub tenant: String,
    /// Rows read.
    pub rows: u64,
    /// Whether the whole chain, including the head, checks out.
    pub ok: bool,
    /// The first seq at which the chain is broken (edited, missing or out of
    /// place).
    pub first_broken_seq: Option<i64>,
    /// What was wrong at `first_broken_seq`.
    pub problem: Option<String>,
}

#[derive(sqlx::FromRow)]
struct DecisionRow {
    tenant: String,
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

const COLUMNS: &str = "tenant, seq, decision_id, run_id, step_id, tool, verdict, reason, \
    message, matched_rule, policy_version, risk, args_digest, call_digest, definition_digest, \
    created_at, prev_hash, hash";

const INSERT: &str = "INSERT INTO decisions (tenant, seq, decision_id, run_id, step_id, tool, \
    verdict, reason, message, matched_rule, policy_version, risk, args_digest, call_digest, \
    definition_digest, created_at, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
    $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)";

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

/// Canonical JSON of the tenant as a JSON string.
fn tenant_canonical(tenant: &str) -> Result<String> {
    serde_json_canonicalizer::to_string(&serde_json::Value::String(tenant.to_owned()))
        .map_err(|e| StoreError::InvalidInput(format!("cannot canonicalize tenant: {e}")))
}

/// The hashed document of one row: the RFC 8785 canonical JSON of
/// `{"prev_hash", "record", "seq", "tenant", "v"}`. RFC 8785 sorts keys and
/// adds no whitespace, so the document can be assembled from canonical parts;
/// on PostgreSQL the `decisions_chain` trigger (migration 0003) assembles the
/// same text so that the database, not the caller, chains each row. `prev_hash` is lowercase hex and `seq` an integer, so
/// neither needs escaping.
fn hashed_document(tenant_json: &str, seq: i64, prev_hash: &str, record_json: &str) -> String {
    format!(
        "{{\"prev_hash\":\"{prev_hash}\",\"record\":{record_json},\"seq\":{seq},\
         \"tenant\":{tenant_json},\"v\":{HASH_FORMAT}}}"
    )
}

/// The hash of one row: hex SHA-256 of [`hashed_document`].
fn row_hash(
    tenant: &str,
    seq: i64,
    prev_hash: &str,
    r: &DecisionRecord,
    created_at_ms: i64,
) -> Result<String> {
    let doc = hashed_document(
        &tenant_canonical(tenant)?,
        seq,
        prev_hash,
        &record_canonical(r, created_at_ms)?,
    );
    Ok(crate::sha256_hex(doc.as_bytes()))
}

/// PostgreSQL: append one row. The `decisions_chain` trigger (migration
/// 0003) assigns seq, prev_hash and hash from the tenant's head row, which it
/// locks and advances in the same statement, over the same canonical
/// document as [`hashed_document`]; it seeds the head on the tenant's first
/// append. A concurrent appender waits for the head row, so the chain stays
/// linear, and a tenant role that may only INSERT cannot choose its chain
/// position or hashes.
const PG_APPEND: &str = "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, \
        verdict, reason, message, matched_rule, policy_version, risk, args_digest, created_at, \
        call_digest, definition_digest) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
    RETURNING seq, prev_hash, hash";

/// Decision log operations. Obtain with [`Store::decisions`].
#[derive(Debug, Clone, Copy)]
pub struct Decisions<'a> {
    pub(crate) store: &'a Store,
}

impl Decisions<'_> {
    /// Appends one record to `tenant`'s chain and returns it as stored.
    pub async fn append(&self, tenant: &str, record: DecisionRecord) -> Result<ChainedDecision> {
        let mut out = self.append_batch(tenant, vec![record]).await?;
        out.pop()
            .ok_or_else(|| StoreError::Corrupt("append produced no row".into()))
    }

    /// Appends records in order, in one transaction: either all are chained
    /// or none is. Used by the sidecar to batch low-risk decisions.
    pub async fn append_batch(
        &self,
        tenant: &str,
        records: Vec<DecisionRecord>,
    ) -> Result<Vec<ChainedDecision>> {
        require("tenant", tenant)?;
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
            crate::Backend::Postgres(pool) => self.append_pg(pool, tenant, records).await,
            crate::Backend::Sqlite(pool) => append_sqlite(pool, tenant, records).await,
        }
    }

    async fn append_pg(
        &self,
        pool: &sqlx::PgPool,
        tenant: &str,
        records: Vec<DecisionRecord>,
    ) -> Result<Vec<ChainedDecision>> {
        let rows = if records.len() == 1 {
            // One statement in autocommit: one round trip per decision.
            vec![pg_append_one(&mut *pool.acquire().await?, tenant, &records[0]).await?]
        } else {
            let mut tx = pool.begin().await?;
            let mut out = Vec::with_capacity(records.len());
            for r in &records {
                out.push(pg_append_one(&mut tx, tenant, r).await?);
            }
            tx.commit().await?;
            out
        };
        Ok(rows
            .into_iter()
            .zip(records)
            .map(|((seq, prev_hash, hash), record)| ChainedDecision {
                tenant: tenant.to_owned(),
                seq,
                prev_hash,
                hash,
                record,
            })
            .collect())
    }

    /// Reads up to `limit` rows of `tenant`'s chain with `seq > after_seq`,
    /// in seq order, for audit export.
    pub async fn list(
        &self,
        tenant: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<ChainedDecision>> {
        require("tenant", tenant)?;
        self.page(tenant, after_seq, i64::from(limit.min(10_000)))
            .await?
            .into_iter()
            .map(DecisionRow::into_chained)
            .collect()
    }

    async fn page(&self, tenant: &str, after_seq: i64, limit: i64) -> Result<Vec<DecisionRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM decisions WHERE tenant = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        );
        Ok(on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(after_seq)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// Recomputes the chain of `tenant`, or of every tenant with rows or a
    /// head when `None`, and reports the first broken seq of each.
    pub async fn verify(&self, tenant: Option<&str>) -> Result<Vec<ChainReport>> {
        let tenants: Vec<String> = match tenant {
            Some(t) => {
                require("tenant", t)?;
                vec![t.to_owned()]
            }
            None => on_pool!(self.store, pool => {
                sqlx::query_scalar(
                    "SELECT tenant FROM decisions UNION SELECT tenant FROM decision_heads \
                     ORDER BY tenant",
                )
                .fetch_all(pool)
                .await?
            }),
        };
        let mut reports = Vec::with_capacity(tenants.len());
        for t in tenants {
            reports.push(self.verify_one(t).await?);
        }
        Ok(reports)
    }

    async fn verify_one(&self, tenant: String) -> Result<ChainReport> {
        let mut report = ChainReport {
            tenant,
            rows: 0,
            ok: true,
            first_broken_seq: None,
            problem: None,
        };
        let mut expected_seq = 1i64;
        let mut prev = GENESIS_HASH.to_owned();
        let mut last_seen = 0i64;
        'pages: loop {
            let rows = self.page(&report.tenant, last_seen, VERIFY_PAGE).await?;
            let done = (rows.len() as i64) < VERIFY_PAGE;
            for row in rows {
                report.rows += 1;
                last_seen = row.seq;
                if let Some(problem) = check_row(&report.tenant, expected_seq, &prev, &row) {
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
        if report.ok {
            // Rows end here; the head must agree, or newest rows were removed
            // (or the head was tampered with).
            let head: Option<(i64, String)> = on_pool!(self.store, pool => {
                sqlx::query_as("SELECT seq, hash FROM decision_heads WHERE tenant = $1")
                    .bind(&report.tenant)
                    .fetch_optional(pool)
                    .await?
            });
            let last_seq = expected_seq - 1;
            let problem = match head {
                None if last_seq > 0 => Some("chain head is missing".to_owned()),
                None => None,
                Some((seq, _)) if seq > last_seq => Some(format!(
                    "rows end at seq {last_seq} but the chain head is at seq {seq}"
                )),
                Some((seq, hash)) if seq != last_seq || hash != prev => Some(format!(
                    "chain head (seq {seq}) does not match the last row (seq {last_seq})"
                )),
                Some(_) => None,
            };
            if let Some(p) = problem {
                report.ok = false;
                report.first_broken_seq = Some(last_seq + 1);
                report.problem = Some(p);
            }
        }
        Ok(report)
    }
}

/// Appends one record on PostgreSQL inside the caller's transaction.
pub(crate) async fn append_pg_in(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    record: DecisionRecord,
) -> Result<ChainedDecision> {
    let (seq, prev_hash, hash) = pg_append_one(conn, tenant, &record).await?;
    Ok(ChainedDecision {
        tenant: tenant.to_owned(),
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
        .fetch_one(conn)
        .await?)
}

/// SQLite: `BEGIN IMMEDIATE` holds the database write lock, so reading the
/// head and inserting after it cannot interleave with another appender.
async fn append_sqlite(
    pool: &sqlx::SqlitePool,
    tenant: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    let mut tx = pool.begin_write().await?;
    let out = append_sqlite_in(&mut tx, tenant, records).await?;
    tx.commit().await?;
    Ok(out)
}

/// [`append_sqlite`] inside the caller's write transaction.
pub(crate) async fn append_sqlite_in(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    records: Vec<DecisionRecord>,
) -> Result<Vec<ChainedDecision>> {
    let head_sql = "SELECT seq, hash FROM decision_heads WHERE tenant = $1";
    let head: Option<(i64, String)> = sqlx::query_as(head_sql)
        .bind(tenant)
        .fetch_optional(&mut *tx)
        .await?;
    let (mut seq, mut prev) = head.unwrap_or_else(|| (0, GENESIS_HASH.to_owned()));
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        seq += 1;
        let created_ms = record.created_at.as_millisecond();
        let hash = row_hash(tenant, seq, &prev, &record, created_ms)?;
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
            .execute(&mut *tx)
            .await?;
        out.push(ChainedDecision {
            tenant: tenant.to_owned(),
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
fn check_row(tenant: &str, expected_seq: i64, prev: &str, row: &DecisionRow) -> Option<String> {
    if row.seq != expected_seq {
        return Some(format!(
            "seq {expected_seq} is missing (next row present is seq {})",
            row.seq
        ));
    }
    if row.prev_hash != prev {
        return Some(format!(
            "seq {} prev_hash does not match the hash of seq {}",
            row.seq,
            row.seq - 1
        ));
    }
    let record = match DecisionRow::clone_record(row) {
        Ok(r) => r,
        Err(e) => return Some(format!("seq {} is unreadable: {e}", row.seq)),
    };
    match row_hash(tenant, row.seq, &row.prev_hash, &record, row.created_at) {
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
    /// or the PostgreSQL and SQLite hashes (and `verify`) would diverge.
    #[test]
    fn hashed_document_is_rfc8785_canonical() {
        let r = sample();
        for tenant in ["acme", "t\u{e9}nant \"q\"", "\u{1F600}"] {
            let whole = serde_json::json!({
                "v": HASH_FORMAT,
                "tenant": tenant,
                "seq": 42,
                "prev_hash": GENESIS_HASH,
                "record": serde_json::from_str::<serde_json::Value>(
                    &record_canonical(&r, 1_700_000_000_123).unwrap()
                ).unwrap(),
            });
            let expected = serde_json_canonicalizer::to_string(&whole).unwrap();
            let built = hashed_document(
                &tenant_canonical(tenant).unwrap(),
                42,
                GENESIS_HASH,
                &record_canonical(&r, 1_700_000_000_123).unwrap(),
            );
            assert_eq!(built, expected);
        }
        let trigger =
            include_str!("../../../migrations/postgres/0003_tenant_roles_and_approval_preview.sql");
        assert!(trigger.contains(&format!("\"v\":{HASH_FORMAT}}}")));
    }

    #[test]
    fn hash_covers_every_field() {
        let base = row_hash("acme", 1, GENESIS_HASH, &sample(), 5).unwrap();
        assert_ne!(
            base,
            row_hash("acme2", 1, GENESIS_HASH, &sample(), 5).unwrap()
        );
        assert_ne!(
            base,
            row_hash("acme", 2, GENESIS_HASH, &sample(), 5).unwrap()
        );
        assert_ne!(
            base,
            row_hash("acme", 1, &"1".repeat(64), &sample(), 5).unwrap()
        );
        assert_ne!(
            base,
            row_hash("acme", 1, GENESIS_HASH, &sample(), 6).unwrap()
        );
        let mut r = sample();
        r.matched_rule = Some("r".into());
        assert_ne!(base, row_hash("acme", 1, GENESIS_HASH, &r, 5).unwrap());
        let mut r = sample();
        r.call_digest = Some("sha256:2".into());
        assert_ne!(base, row_hash("acme", 1, GENESIS_HASH, &r, 5).unwrap());
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
