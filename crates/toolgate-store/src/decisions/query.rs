//! Reading the decision log page by page (`toolgate audit log`): filters
//! on what an auditor asks (tenant, run, tool, verdict, reason, policy
//! version, a time window) and keyset paging.
//!
//! Rows come in (tenant, created_at, stream, seq) order, the order of the
//! `decisions_by_time` and `decisions_by_run` indexes (migration 0020 on
//! PostgreSQL, 0014 on SQLite) up to the ties that stream and seq break.
//! A page continues strictly after the last row of the one before
//! ([`LogCursor`]), so the millionth page costs what the first does: an
//! OFFSET would read and throw away every row before it. As a tenant's
//! own PostgreSQL role, row-level security confines the rows to its
//! tenant whatever the filter says.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::Serialize;
use toolgate_policy::{Decision, Reason};

use super::chain::row_hash;
use super::message::{DecisionMessage, SHADOW_CHANGED_MARK, ShadowOutcome};
use super::{COLUMNS, ChainReport, ChainedDecision, DecisionRow, Decisions, Position};
use crate::{Result, StoreError, on_pool, require};

/// Most rows one page of [`Decisions::query`] returns.
pub const MAX_QUERY_LIMIT: u32 = 10_000;

/// Which decisions [`Decisions::query`] returns; `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionFilter {
    /// Only this tenant's decisions.
    pub tenant: Option<String>,
    /// Only this run's.
    pub run_id: Option<String>,
    /// Only calls of this tool (exact name).
    pub tool: Option<String>,
    /// Only this verdict.
    pub verdict: Option<Decision>,
    /// Only this reason.
    pub reason: Option<Reason>,
    /// Only decisions of this policy version (exact).
    pub policy_version: Option<String>,
    /// Decided at or after this instant.
    pub since: Option<Timestamp>,
    /// Decided before this instant (exclusive, so consecutive windows do
    /// not share a row).
    pub until: Option<Timestamp>,
    /// Only decisions a shadowed candidate decided differently from the
    /// active policy ([`ShadowOutcome::disagrees`]).
    pub shadow_changed: bool,
}

/// Where a page ended: the last row's position in the log's order. Its
/// text form (`Display`/`FromStr`) is what the CLI prints and takes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCursor {
    /// The row's tenant.
    pub tenant: String,
    /// Its `created_at` in Unix milliseconds, as stored.
    pub created_at_ms: i64,
    /// Its stream.
    pub stream: String,
    /// Its seq.
    pub seq: i64,
}

/// Version tag of the cursor text, so a later order can refuse old ones.
const CURSOR_TAG: &str = "c1.";

impl fmt::Display for LogCursor {
    /// Hex of the JSON `[tenant, created_at_ms, stream, seq]`: opaque, and
    /// safe in a shell whatever the stream's name holds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::json!([self.tenant, self.created_at_ms, self.stream, self.seq]);
        write!(f, "{CURSOR_TAG}{}", hex::encode(json.to_string()))
    }
}

impl FromStr for LogCursor {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self> {
        let bad = || StoreError::InvalidInput(format!("not a cursor of `audit log`: {text:?}"));
        let bytes = text
            .strip_prefix(CURSOR_TAG)
            .and_then(|h| hex::decode(h).ok())
            .ok_or_else(bad)?;
        let (tenant, created_at_ms, stream, seq): (String, i64, String, i64) =
            serde_json::from_slice(&bytes).map_err(|_| bad())?;
        Ok(LogCursor {
            tenant,
            created_at_ms,
            stream,
            seq,
        })
    }
}

/// One decision as recorded, with the flow labels it set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoggedDecision {
    /// The row: chain position, hashes and the record.
    #[serde(flatten)]
    pub decision: ChainedDecision,
    /// Flow labels the decision set, as its `message` records them (the
    /// `flow_labels_set` the gate writes there; the chain covers it, while
    /// a `flow_labels` row names only a label's first setter).
    pub flow_labels_set: Vec<String>,
    /// What the bundle's candidate decided beside the active policy, when
    /// the bundle shadowed one (also from the chained `message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowOutcome>,
}

impl LoggedDecision {
    /// This row's position, to continue after it.
    pub fn cursor(&self) -> LogCursor {
        LogCursor {
            tenant: self.decision.tenant.clone(),
            created_at_ms: self.decision.record.created_at.as_millisecond(),
            stream: self.decision.stream.clone(),
            seq: self.decision.seq,
        }
    }
}

/// One page of [`Decisions::query`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionPage {
    /// The rows, in log order.
    pub rows: Vec<LoggedDecision>,
    /// Where the next page starts, when there are more rows.
    pub next: Option<LogCursor>,
}

/// A parameter of the page's statement.
enum Param {
    Text(String),
    Int(i64),
}

impl Decisions<'_> {
    /// Up to `limit` decisions (1 to [`MAX_QUERY_LIMIT`]) matching
    /// `filter`, strictly after `after` in (tenant, created_at, stream,
    /// seq) order.
    pub async fn query(
        &self,
        filter: &DecisionFilter,
        after: Option<&LogCursor>,
        limit: u32,
    ) -> Result<DecisionPage> {
        if !(1..=MAX_QUERY_LIMIT).contains(&limit) {
            return Err(StoreError::InvalidInput(format!(
                "limit must be 1 to {MAX_QUERY_LIMIT}, not {limit}"
            )));
        }
        if let (Some(since), Some(until)) = (filter.since, filter.until)
            && since >= until
        {
            return Err(StoreError::InvalidInput(format!(
                "since ({since}) must be before until ({until})"
            )));
        }
        // Row-level security keeps a tenant role to its tenant, but as a
        // filter the planner cannot start an index at (its policy is OR'ed
        // with the admin's): without a tenant named, the first page would
        // read past every tenant that sorts before it. Name it.
        let session_tenant = match filter.tenant {
            Some(_) => None,
            None => self.store.session_tenant().await?,
        };
        let tenant = filter.tenant.clone().or(session_tenant);
        let mut params = Vec::new();
        let mut conditions = Vec::new();
        let mut text = |column: &str, name: &'static str, value: &Option<String>| {
            if let Some(v) = value {
                require(name, v)?;
                params.push(Param::Text(v.clone()));
                conditions.push(format!("{column} = ${}", params.len()));
            }
            Ok::<(), StoreError>(())
        };
        text("tenant", "tenant", &tenant)?;
        text("run_id", "run_id", &filter.run_id)?;
        text("tool", "tool", &filter.tool)?;
        let verdict = filter.verdict.map(|v| v.as_str().to_owned());
        text("verdict", "verdict", &verdict)?;
        let reason = filter.reason.map(|r| r.as_str().to_owned());
        text("reason", "reason", &reason)?;
        text("policy_version", "policy_version", &filter.policy_version)?;
        if filter.shadow_changed {
            // `_` and `%` are LIKE wildcards; the mark holds `_`, which
            // matching any one character cannot widen to another key.
            params.push(Param::Text(format!("%{SHADOW_CHANGED_MARK}%")));
            conditions.push(format!("message LIKE ${}", params.len()));
        }
        for (value, op) in [(filter.since, ">="), (filter.until, "<")] {
            if let Some(at) = value {
                params.push(Param::Int(at.as_millisecond()));
                conditions.push(format!("created_at {op} ${}", params.len()));
            }
        }
        if let Some(c) = after {
            // The key's leading columns as a bound of their own as well:
            // SQLite starts an index range at these, not at the row
            // comparison below (PostgreSQL does either).
            match &tenant {
                Some(t) if *t == c.tenant => {
                    params.push(Param::Int(c.created_at_ms));
                    conditions.push(format!("created_at >= ${}", params.len()));
                }
                Some(_) => {}
                None => {
                    params.extend([Param::Text(c.tenant.clone()), Param::Int(c.created_at_ms)]);
                    let n = params.len();
                    conditions.push(format!("(tenant, created_at) >= (${}, ${n})", n - 1));
                }
            }
            let n = params.len();
            params.extend([
                Param::Text(c.tenant.clone()),
                Param::Int(c.created_at_ms),
                Param::Text(c.stream.clone()),
                Param::Int(c.seq),
            ]);
            // Strictly after the cursor's row in the whole key.
            conditions.push(format!(
                "(tenant, created_at, stream, seq) > (${}, ${}, ${}, ${})",
                n + 1,
                n + 2,
                n + 3,
                n + 4
            ));
        }
        params.push(Param::Int(i64::from(limit) + 1));
        let filter_sql = if conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conditions.join(" AND "))
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM decisions {filter_sql} \
             ORDER BY tenant, created_at, stream, seq LIMIT ${}",
            params.len()
        );
        let rows: Vec<DecisionRow> = on_pool!(self.store, pool => {
            let mut q = sqlx::query_as(&sql);
            for p in params {
                q = match p {
                    Param::Text(t) => q.bind(t),
                    Param::Int(i) => q.bind(i),
                };
            }
            q.fetch_all(pool).await?
        });
        let more = rows.len() > limit as usize;
        let rows = rows
            .into_iter()
            .take(limit as usize)
            .map(|row| {
                let decision = row.into_chained()?;
                let message = DecisionMessage::parse(decision.record.message.as_deref());
                Ok(LoggedDecision {
                    flow_labels_set: message.flow_labels_set,
                    shadow: message.shadow,
                    decision,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let next = more
            .then(|| rows.last().map(LoggedDecision::cursor))
            .flatten();
        Ok(DecisionPage { rows, next })
    }

    /// Verifies the chain of what a page shows: each stream the rows come
    /// from, from the row before the first of them to the stream's head
    /// (as [`Decisions::verify`] does from seq 1: an edit of a shown row
    /// breaks the link to the row after it unless every later row is
    /// rewritten too, which only a checkpoint shows), and each shown row
    /// against the row the verified chain holds at its seq. One report per
    /// stream, sorted by tenant and stream.
    pub async fn verify_rows(&self, rows: &[ChainedDecision]) -> Result<Vec<ChainReport>> {
        let mut streams: BTreeMap<(&str, &str), Vec<&ChainedDecision>> = BTreeMap::new();
        for row in rows {
            streams
                .entry((&row.tenant, &row.stream))
                .or_default()
                .push(row);
        }
        let mut reports = Vec::with_capacity(streams.len());
        for ((tenant, stream), mut shown) in streams {
            shown.sort_by_key(|r| r.seq);
            let first = shown[0];
            let start = Position {
                seq: first.seq - 1,
                hash: first.prev_hash.clone(),
            };
            let mut report = self
                .verify_one(tenant.to_owned(), stream.to_owned(), Some(start))
                .await?;
            if report.ok {
                for row in shown {
                    if let Some(problem) = self.shown_row_problem(row).await? {
                        report.ok = false;
                        report.first_broken_seq = Some(row.seq);
                        report.problem = Some(problem);
                        break;
                    }
                }
            }
            reports.push(report);
        }
        Ok(reports)
    }

    /// What is wrong with a shown row: content that does not hash to its
    /// hash, or a hash the chain no longer holds at its seq.
    async fn shown_row_problem(&self, row: &ChainedDecision) -> Result<Option<String>> {
        let created_at = row.record.created_at.as_millisecond();
        let hash = row_hash(
            &row.tenant,
            &row.stream,
            row.seq,
            &row.prev_hash,
            &row.record,
            created_at,
        );
        if hash != row.hash {
            return Ok(Some(format!(
                "seq {} content does not match its hash (edited or moved)",
                row.seq
            )));
        }
        self.live_position_problem(&row.tenant, &row.stream, row.seq, &row.hash)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_strangers_are_refused() {
        let c = LogCursor {
            tenant: "team-a".into(),
            created_at_ms: 1_700_000_000_123,
            stream: "pod/ x\"y".into(),
            seq: 42,
        };
        let text = c.to_string();
        assert!(text.starts_with(CURSOR_TAG), "{text}");
        assert!(
            text.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '.')
        );
        assert_eq!(text.parse::<LogCursor>().unwrap(), c);
        for bad in ["", "c1.zz", "c1.00", "c2.5b5d", &text[3..]] {
            assert_eq!(
                bad.parse::<LogCursor>().unwrap_err().code(),
                "invalid_input"
            );
        }
    }
}
