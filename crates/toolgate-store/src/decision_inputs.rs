//! Recorded inputs of decided calls (`spec.audit.recordInputs`), kept
//! beside the decision log for `toolgate replay` (migration postgres 0023,
//! sqlite 0015).
//!
//! An input row is not chained itself: it is vouched for by its decision,
//! whose chained `message` holds the SHA-256 of the stored text
//! ([`INPUT_SHA256_MEMBER`]). [`DecisionInputs::verify`] (and replay)
//! check every row against it, and that its tool and arguments are the
//! ones the decision names (a masked row that masking changed is counted
//! apart: it is vouched for, but cannot be decided again). A row whose
//! decision is not in the log (the decision was dropped, refused or
//! archived) is reported, and harmless: replay starts from decisions.
//! Rows expire; pruning them ([`DecisionInputs::prune_expired`]) touches
//! nothing of the chain. As a tenant's own PostgreSQL role, row-level
//! security confines reads and writes to its tenant and lets it delete
//! only expired rows.

use std::collections::HashMap;

use jiff::Timestamp;
use serde::Serialize;
use toolgate_policy::audit::RecordedCall;

#[cfg(doc)]
use crate::INPUT_SHA256_MEMBER;
use crate::fields::{require, ts_from_ms};
use crate::{BeginWrite, DecisionMessage, Result, Store, StoreError, on_pool};

/// Largest stored input (canonical JSON bytes); a larger call is not
/// recorded, and replay reports it as having no input. It bounds what the
/// sidecar's queue holds for an agent that sends huge arguments.
pub const MAX_INPUT_BYTES: usize = 64 << 10;

/// 9999-01-01 in Unix milliseconds: the end of the times the migrations
/// (0021, 0022, 0023) let a row hold, so that every row reads back.
const READABLE_UNTIL_MS: i64 = 253_370_764_800_000;

/// Rows one pruning statement deletes.
const PRUNE_BATCH: i64 = 10_000;

/// Most decision ids one [`DecisionInputs::get_many`] looks up.
pub const MAX_LOOKUP: usize = 10_000;

/// One input to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionInput {
    /// The decision it is the input of.
    pub decision_id: String,
    /// The call, as RFC 8785 canonical JSON of a [`RecordedCall`].
    pub call: String,
    /// Whether secrets were masked out of it.
    pub masked: bool,
    /// When it was recorded: its decision's `created_at`, to the
    /// millisecond (how verify finds the decision by its index).
    pub recorded_at: Timestamp,
    /// When it may be pruned.
    pub expires_at: Timestamp,
}

/// What [`DecisionInputs::verify`] found for one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InputCheck {
    /// Tenant checked.
    pub tenant: String,
    /// Rows read.
    pub rows: u64,
    /// Rows whose arguments hash to their decision's `args_digest` and
    /// whose tool is the decision's.
    pub matching: u64,
    /// Masked rows that masking changed: not checkable against the chain.
    pub masked: u64,
    /// Decision ids of rows that contradict their decision (first 100).
    pub mismatched: Vec<String>,
    /// Decision ids of rows whose decision is not in the log (first 100).
    pub orphaned: Vec<String>,
}

impl InputCheck {
    /// Whether no row contradicts its decision (orphans cannot mislead:
    /// replay starts from the decisions).
    pub fn ok(&self) -> bool {
        self.mismatched.is_empty()
    }
}

/// How a stored input compares with its decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStanding {
    /// Its arguments are the ones the decision names.
    Matching,
    /// Masked, and masking changed it: it cannot be checked, nor replayed.
    Masked,
    /// It contradicts the decision (another tool or other arguments), or
    /// does not read back.
    Mismatched,
}

/// Compares an input with its decision: the SHA-256 its chained
/// `message` holds, its tool and its `args_digest`.
pub fn standing(
    input: &DecisionInput,
    tool: &str,
    args_digest: &str,
    message: Option<&str>,
) -> InputStanding {
    let vouched = DecisionMessage::parse(message)
        .input_sha256
        .is_some_and(|sha| sha == toolgate_policy::digest::sha256_hex(input.call.as_bytes()));
    if !vouched {
        return InputStanding::Mismatched;
    }
    match RecordedCall::parse(&input.call) {
        Ok(call) if call.tool != tool => InputStanding::Mismatched,
        Ok(call) if call.matches_digest(args_digest) => InputStanding::Matching,
        Ok(_) if input.masked => InputStanding::Masked,
        _ => InputStanding::Mismatched,
    }
}

type Row = (String, String, bool, i64, i64);
/// An input row with its decision's tool and `args_digest`, if logged.
type CheckRow = (
    String,
    String,
    bool,
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn input(row: Row) -> Result<DecisionInput> {
    Ok(DecisionInput {
        decision_id: row.0,
        call: row.1,
        masked: row.2,
        recorded_at: ts_from_ms(row.3)?,
        expires_at: ts_from_ms(row.4)?,
    })
}

/// Rows the check reads per round trip.
const VERIFY_PAGE: i64 = 1000;
/// Decision ids a check names per problem.
const NAMED: usize = 100;

/// The recorded inputs of a store.
pub struct DecisionInputs<'a> {
    pub(crate) store: &'a Store,
}

impl DecisionInputs<'_> {
    /// Stores `inputs` of `tenant` in one transaction. An input already
    /// stored for a decision is kept as it is (a decision has one input).
    pub async fn put_batch(&self, tenant: &str, inputs: &[DecisionInput]) -> Result<()> {
        require("tenant", tenant)?;
        for i in inputs {
            require("decision_id", &i.decision_id)?;
            for (name, at) in [("recorded_at", i.recorded_at), ("expires_at", i.expires_at)] {
                if !(0..=READABLE_UNTIL_MS).contains(&at.as_millisecond()) {
                    return Err(StoreError::InvalidInput(format!(
                        "{name} {at} is outside 1970-01-01 to 9999-01-01"
                    )));
                }
            }
            if i.call.len() > MAX_INPUT_BYTES {
                return Err(StoreError::InvalidInput(format!(
                    "input of {} is {} bytes, more than {MAX_INPUT_BYTES}",
                    i.decision_id,
                    i.call.len()
                )));
            }
        }
        const SQL: &str = "INSERT INTO decision_inputs \
            (tenant, decision_id, call, masked, recorded_at, expires_at) \
            VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, decision_id) DO NOTHING";
        on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            for i in inputs {
                sqlx::query(SQL)
                    .bind(tenant)
                    .bind(&i.decision_id)
                    .bind(&i.call)
                    .bind(i.masked)
                    .bind(i.recorded_at.as_millisecond())
                    .bind(i.expires_at.as_millisecond())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The stored inputs of `decision_ids` of `tenant` (up to
    /// [`MAX_LOOKUP`]), by decision id; ids without one are absent.
    pub async fn get_many(
        &self,
        tenant: &str,
        decision_ids: &[&str],
    ) -> Result<HashMap<String, DecisionInput>> {
        require("tenant", tenant)?;
        if decision_ids.len() > MAX_LOOKUP {
            return Err(StoreError::InvalidInput(format!(
                "at most {MAX_LOOKUP} decision ids per lookup"
            )));
        }
        let mut found = HashMap::with_capacity(decision_ids.len());
        // One statement per chunk: SQLite binds at most 32,766 parameters.
        for chunk in decision_ids.chunks(500) {
            let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "SELECT decision_id, call, masked, recorded_at, expires_at FROM decision_inputs \
                 WHERE tenant = $1 AND decision_id IN ({})",
                marks.join(", ")
            );
            let rows: Vec<Row> = on_pool!(self.store, pool => {
                let mut q = sqlx::query_as(&sql).bind(tenant);
                for id in chunk {
                    q = q.bind(*id);
                }
                q.fetch_all(pool).await?
            });
            for row in rows {
                let input = input(row)?;
                found.insert(input.decision_id.clone(), input);
            }
        }
        Ok(found)
    }

    /// Deletes inputs that expired before `now` (as a tenant's role, its
    /// own), in bounded batches; how many.
    pub async fn prune_expired(&self, now: Timestamp) -> Result<u64> {
        let sql = if self.store.is_postgres() {
            "DELETE FROM decision_inputs WHERE ctid IN \
             (SELECT ctid FROM decision_inputs WHERE expires_at < $1 ORDER BY expires_at LIMIT $2)"
        } else {
            "DELETE FROM decision_inputs WHERE rowid IN \
             (SELECT rowid FROM decision_inputs WHERE expires_at < $1 ORDER BY expires_at LIMIT $2)"
        };
        let mut total = 0;
        loop {
            let done = on_pool!(self.store, pool => {
                sqlx::query(sql)
                    .bind(now.as_millisecond())
                    .bind(PRUNE_BATCH)
                    .execute(pool)
                    .await?
                    .rows_affected()
            });
            total += done;
            if done < PRUNE_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Checks every stored input of `tenant` against its decision: the
    /// same tool, and arguments hashing to its `args_digest`.
    pub async fn verify(&self, tenant: &str) -> Result<InputCheck> {
        require("tenant", tenant)?;
        let mut check = InputCheck {
            tenant: tenant.to_owned(),
            ..InputCheck::default()
        };
        let mut after = String::new();
        loop {
            let rows: Vec<CheckRow> = on_pool!(self.store, pool => {
                sqlx::query_as(
                    "SELECT i.decision_id, i.call, i.masked, i.recorded_at, i.expires_at, \
                            d.tool, d.args_digest, d.message \
                     FROM decision_inputs i LEFT JOIN decisions d \
                       ON d.tenant = i.tenant AND d.created_at = i.recorded_at \
                      AND d.decision_id = i.decision_id \
                     WHERE i.tenant = $1 AND i.decision_id > $2 \
                     ORDER BY i.decision_id LIMIT $3",
                )
                .bind(tenant)
                .bind(&after)
                .bind(VERIFY_PAGE)
                .fetch_all(pool)
                .await?
            });
            let Some(last) = rows.last() else { break };
            after = last.0.clone();
            let mut unmatched = Vec::new();
            for (id, call, masked, recorded, expires, tool, digest, message) in rows {
                check.rows += 1;
                let (Some(tool), Some(digest)) = (tool, digest) else {
                    unmatched.push(id);
                    continue;
                };
                let row = input((id, call, masked, recorded, expires))?;
                match standing(&row, &tool, &digest, message.as_deref()) {
                    InputStanding::Matching => check.matching += 1,
                    InputStanding::Masked => check.masked += 1,
                    InputStanding::Mismatched if check.mismatched.len() < NAMED => {
                        check.mismatched.push(row.decision_id)
                    }
                    InputStanding::Mismatched => {}
                }
            }
            // An input naming a logged decision but not its time was moved
            // off it (its time is the writer's to set): mismatched, not an
            // orphan. Only inputs the indexed join missed are looked up.
            let logged = self.logged_ids(tenant, &unmatched).await?;
            for id in unmatched {
                let list = if logged.contains(&id) {
                    &mut check.mismatched
                } else {
                    &mut check.orphaned
                };
                if list.len() < NAMED {
                    list.push(id);
                }
            }
        }
        Ok(check)
    }

    /// Which of `ids` name a decision of `tenant` in the log.
    async fn logged_ids(&self, tenant: &str, ids: &[String]) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (0..ids.len()).map(|i| format!("${}", i + 2)).collect();
        let sql = format!(
            "SELECT DISTINCT decision_id FROM decisions WHERE tenant = $1 AND decision_id IN ({})",
            marks.join(", ")
        );
        let found: Vec<(String,)> = on_pool!(self.store, pool => {
            let mut q = sqlx::query_as(&sql).bind(tenant);
            for id in ids {
                q = q.bind(id);
            }
            q.fetch_all(pool).await?
        });
        Ok(found.into_iter().map(|(id,)| id).collect())
    }
}
