//! Cancelling one run, and reading which runs are cancelled.

use jiff::Timestamp;
use toolgate_policy::RunId;

use super::{Caller, Cancellation, ENSURE_RUN, Runs, count};
use crate::{BeginWrite, Result, StoreError, on_pool, opt_ts_from_ms, require, require_opt};

/// A cancellation that holds a run: when, and whether a scope holding the
/// run (its pod, profile or namespace) rather than the run itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// When it was recorded.
    pub at: Timestamp,
    /// True for a scope's cancellation.
    pub scoped: bool,
}

impl Runs<'_> {
    /// Cancels `tenant`'s run: from now on its calls are refused. Pending
    /// approvals of the run become `cancelled` (each with a run event, and
    /// their waiters woken); open intents are left as they are, to be
    /// resumed or inspected, never replayed. Idempotent: cancelling again
    /// changes nothing and reports the first request's time.
    pub async fn cancel(
        &self,
        tenant: &str,
        run_id: &RunId,
        reason: Option<&str>,
        by: &str,
        now: Timestamp,
    ) -> Result<Cancellation> {
        require("tenant", tenant)?;
        let run_id = run_id.as_str();
        require("by", by)?;
        require_opt("reason", reason)?;
        self.store.check_file()?;
        let now = now.as_millisecond();
        let recorded = match &self.store.backend {
            crate::Backend::Postgres(pool) => {
                let row: PgCancelRow =
                    sqlx::query_as("SELECT * FROM toolgate_cancel_run($1, $2, $3, $4, $5)")
                        .bind(tenant)
                        .bind(run_id)
                        .bind(reason)
                        .bind(by)
                        .bind(now)
                        .fetch_one(pool)
                        .await?;
                from_pg(row)
            }
            crate::Backend::Sqlite(pool) => {
                let mut tx = pool.begin_write().await?;
                let out = cancel_sqlite(&mut tx, tenant, run_id, reason, by, now).await?;
                tx.commit().await?;
                out
            }
        };
        answer(recorded)
    }

    /// When the caller's run, or a scope holding it, was cancelled, if
    /// either was (the scope's, saying so, when both were).
    pub async fn cancelled_at<'c>(
        &self,
        caller: impl Into<Caller<'c>>,
        run_id: &RunId,
    ) -> Result<Option<Stopped>> {
        let caller = caller.into();
        caller.check()?;
        if let Some(scoped) = self.scope_cancellation(caller).await? {
            return Ok(Some(Stopped {
                at: scoped.requested_at,
                scoped: true,
            }));
        }
        let sql = "SELECT cancel_requested_at FROM runs WHERE tenant = $1 AND run_id = $2";
        let at: Option<Option<i64>> = on_pool!(self.store, pool => {
            sqlx::query_scalar(sql)
                .bind(caller.tenant)
                .bind(run_id.as_str())
                .fetch_optional(pool)
                .await?
        });
        Ok(opt_ts_from_ms(at.flatten())?.map(|at| Stopped { at, scoped: false }))
    }

    /// Runs of `tenant` whose cancellation was requested at or after
    /// `since`, with that time: how a sidecar learns of cancellations made
    /// elsewhere (the CLI, the controller, another sidecar).
    pub async fn cancelled_since(
        &self,
        tenant: &str,
        since: Timestamp,
    ) -> Result<Vec<(String, Timestamp)>> {
        require("tenant", tenant)?;
        let sql = "SELECT run_id, cancel_requested_at FROM runs WHERE tenant = $1 \
            AND cancel_requested_at IS NOT NULL AND cancel_requested_at >= $2 \
            ORDER BY cancel_requested_at LIMIT 10000";
        let rows: Vec<(String, i64)> = on_pool!(self.store, pool => {
            sqlx::query_as(sql)
                .bind(tenant)
                .bind(since.as_millisecond())
                .fetch_all(pool)
                .await?
        });
        rows.into_iter()
            .map(|(run, at)| Ok((run, crate::ts_from_ms(at)?)))
            .collect()
    }
}

/// What a cancel function answers on PostgreSQL: when the cancellation was
/// first recorded, whether by this call, and the approvals it reaped.
pub(super) type PgCancelRow = (Option<i64>, bool, i32);

/// The same answer as the SQLite implementations give it.
pub(super) type CancelRow = (Option<i64>, bool, i64);

pub(super) fn from_pg((at, newly, reaped): PgCancelRow) -> CancelRow {
    (at, newly, i64::from(reaped))
}

/// The [`Cancellation`] a cancel function's answer reports.
pub(super) fn answer((at, newly, reaped): CancelRow) -> Result<Cancellation> {
    let at = at.ok_or_else(|| StoreError::Corrupt("cancellation has no time".into()))?;
    Ok(Cancellation {
        requested_at: crate::ts_from_ms(at)?,
        newly_cancelled: newly,
        approvals_cancelled: count(reaped),
    })
}

async fn cancel_sqlite(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    run_id: &str,
    reason: Option<&str>,
    by: &str,
    now: i64,
) -> Result<(Option<i64>, bool, i64)> {
    const EVENT: &str = "INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, \
        created_at) VALUES ($1, $2, $3, $4, $5, $6)";
    sqlx::query(ENSURE_RUN)
        .bind(tenant)
        .bind(run_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    let marked = sqlx::query(
        "UPDATE runs SET cancel_requested_at = $3, cancel_reason = $4, cancelled_by = $5 \
         WHERE tenant = $1 AND run_id = $2 AND cancel_requested_at IS NULL",
    )
    .bind(tenant)
    .bind(run_id)
    .bind(now)
    .bind(reason)
    .bind(by)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if marked == 0 {
        let at: Option<i64> = sqlx::query_scalar(
            "SELECT cancel_requested_at FROM runs WHERE tenant = $1 AND run_id = $2",
        )
        .bind(tenant)
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await?;
        return Ok((at, false, 0));
    }
    sqlx::query(EVENT)
        .bind(tenant)
        .bind(run_id)
        .bind("run.cancelled")
        .bind(run_id)
        .bind(serde_json::json!({"reason": reason, "by": by}).to_string())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    let reaped: Vec<(String,)> = sqlx::query_as(
        "UPDATE approvals SET status = 'cancelled', resolved_at = $3, resolved_by = $4, \
         reason = COALESCE($5, 'run cancelled') \
         WHERE tenant = $1 AND run_id = $2 AND status = 'pending' RETURNING id",
    )
    .bind(tenant)
    .bind(run_id)
    .bind(now)
    .bind(by)
    .bind(reason)
    .fetch_all(&mut *tx)
    .await?;
    for (id,) in &reaped {
        sqlx::query(EVENT)
            .bind(tenant)
            .bind(run_id)
            .bind("approval.cancelled")
            .bind(id)
            .bind(serde_json::json!({"approval_id": id}).to_string())
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    Ok((Some(now), true, reaped.len() as i64))
}
