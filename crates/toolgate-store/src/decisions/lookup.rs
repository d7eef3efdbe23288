//! Reading single decisions back: the one that escalated a call (what an
//! approver is shown as the why), the one that set a flow label, and a
//! run's latest decisions.
//!
//! The decision log is indexed by (tenant, created_at) and (tenant, run_id,
//! created_at) (migration 0020), not by decision id, so each read is
//! bounded by `created_at` (also the partition key on PostgreSQL): a
//! decision is looked up at the instant it was made, which the approval row
//! and the flow label row both hold, and a run's history within a window.

use jiff::Timestamp;

use super::{COLUMNS, DecisionRecord, DecisionRow, Decisions};
use crate::{Result, on_pool, require};

/// Most decisions [`Decisions::run_history`] returns.
const MAX_RUN_HISTORY: u32 = 100;

impl Decisions<'_> {
    /// The record of `tenant`'s decision `decision_id`, made at `at`
    /// (millisecond precision, as stored), if the log holds it.
    pub async fn at(
        &self,
        tenant: &str,
        decision_id: &str,
        at: Timestamp,
    ) -> Result<Option<DecisionRecord>> {
        require("tenant", tenant)?;
        require("decision_id", decision_id)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM decisions WHERE tenant = $1 AND created_at = $2 \
             AND decision_id = $3 ORDER BY stream, seq LIMIT 1"
        );
        let row: Option<DecisionRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(at.as_millisecond())
                .bind(decision_id)
                .fetch_optional(pool)
                .await?
        });
        row.map(|r| r.record()).transpose()
    }

    /// Up to `limit` (at most [`MAX_RUN_HISTORY`]) of the latest decisions
    /// of `tenant`'s run `run_id` made in `[since, until]`, newest first.
    pub async fn run_history(
        &self,
        tenant: &str,
        run_id: &str,
        since: Timestamp,
        until: Timestamp,
        limit: u32,
    ) -> Result<Vec<DecisionRecord>> {
        require("tenant", tenant)?;
        require("run_id", run_id)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM decisions WHERE tenant = $1 AND run_id = $2 \
             AND created_at >= $3 AND created_at <= $4 \
             ORDER BY created_at DESC, stream DESC, seq DESC LIMIT $5"
        );
        let rows: Vec<DecisionRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(run_id)
                .bind(since.as_millisecond())
                .bind(until.as_millisecond())
                .bind(i64::from(limit.min(MAX_RUN_HISTORY)))
                .fetch_all(pool)
                .await?
        });
        rows.iter().map(DecisionRow::record).collect()
    }
}
