//! Run governance: budget counters per (tenant, run) and per (tenant,
//! pod), and durable cancellation of a run or of a wider scope.
//!
//! Counters live in the shared database, so every sidecar serving one run
//! sees one budget and a restart resets nothing. Charging a call is one
//! conditional `UPDATE`: the row lock serializes sidecars, and the condition
//! is re-checked on the latest row, so a budget is never overshot. A
//! cancellation is written once, never withdrawn (on PostgreSQL a trigger,
//! `TG004`, refuses to lower a counter or clear a cancellation even for a
//! tenant's own role), and reaps the run's pending approvals.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::RunId;

use crate::decisions::{ChainedDecision, DecisionRecord};
use crate::flows::LabelsOnPass;

/// Labels to write with a charge, and whether the call passes with the
/// run's answer (only then are they written).
pub type LabelsIfPassing<'a> = (
    &'a LabelsOnPass<'a>,
    &'a (dyn Fn(&Admission) -> bool + Sync),
);
use crate::intents::{IntentRow, PendingIntent, ResumeClass};
use crate::{BeginWrite, Result, Store, StoreError, on_pool, opt_ts_from_ms, require};

/// The limits a call is charged against, as a profile's `spec.budgets`
/// sets them: its run's and its pod's. `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Allowed calls per run.
    pub max_calls: Option<u64>,
    /// Allowed high-risk calls per run.
    pub max_high_risk_calls: Option<u64>,
    /// Seconds from the run's first counted call.
    pub max_run_seconds: Option<u64>,
    /// Limits on every run of the caller's pod together
    /// (`spec.budgets.perPod`); charged only for a [`Caller`] with a pod.
    #[serde(default)]
    pub per_pod: PodLimits,
}

/// Limits on all runs of one pod together. `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodLimits {
    /// Allowed calls of the pod.
    pub max_calls: Option<u64>,
    /// Allowed high-risk calls of the pod.
    pub max_high_risk_calls: Option<u64>,
}

impl PodLimits {
    fn is_unlimited(&self) -> bool {
        self.max_calls.is_none() && self.max_high_risk_calls.is_none()
    }
}

toolgate_contract::wire_enum! {
    /// Which budget refused a call; its wire name is the profile field that
    /// set the budget.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum Budget {
        /// `maxCallsPerRun`.
        Calls = "maxCallsPerRun",
        /// `maxHighRiskCallsPerRun`.
        HighRiskCalls = "maxHighRiskCallsPerRun",
        /// `maxRunSeconds`.
        RunSeconds = "maxRunSeconds",
        /// `perPod.maxCalls`.
        PodCalls = "perPod.maxCalls",
        /// `perPod.maxHighRiskCalls`.
        PodHighRiskCalls = "perPod.maxHighRiskCalls",
    }
}

/// The answer to charging one call to its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Admission {
    /// Counted; the run's totals after this call.
    Admitted {
        /// Calls counted so far, this one included.
        calls: u64,
        /// High-risk calls counted so far.
        high_risk_calls: u64,
    },
    /// The run, or a scope holding it (its pod, its profile, the
    /// namespace), was cancelled; nothing was counted.
    Cancelled {
        /// The reason given when it was cancelled.
        reason: Option<String>,
        /// True when a scope holding the run was cancelled, not the run
        /// itself (the run id alone says nothing then).
        #[serde(default)]
        scoped: bool,
    },
    /// A budget is used up; nothing was counted.
    Exhausted {
        /// Which one.
        budget: Budget,
        /// Its limit.
        limit: u64,
    },
}

impl Admission {
    /// True when the call was counted and may proceed.
    pub fn is_admitted(&self) -> bool {
        matches!(self, Self::Admitted { .. })
    }
}

/// What [`Runs::cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancellation {
    /// When the run's cancellation was (first) requested.
    pub requested_at: Timestamp,
    /// False when the run was already cancelled (the first request stands).
    pub newly_cancelled: bool,
    /// Pending approvals of the run moved to `cancelled` by this request.
    pub approvals_cancelled: u64,
}

/// A run's state as its agent sees it: cancellation, counters, open intents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Tenant of the run.
    pub tenant: String,
    /// The run.
    pub run_id: String,
    /// First counted call, if any.
    pub started_at: Option<Timestamp>,
    /// Calls counted.
    pub calls: u64,
    /// High-risk calls counted.
    pub high_risk_calls: u64,
    /// When cancellation was requested, if it was.
    pub cancel_requested_at: Option<Timestamp>,
    /// Why.
    pub cancel_reason: Option<String>,
    /// Who asked.
    pub cancelled_by: Option<String>,
    /// Intents of the run still `pending`, oldest first, each classified.
    pub open_intents: Vec<PendingIntent>,
}

/// Run operations. Obtain with [`Store::runs`].
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    pub(crate) store: &'a Store,
}

const ENSURE_RUN: &str = "INSERT INTO runs (tenant, run_id, started_at) VALUES ($1, $2, $3) \
    ON CONFLICT (tenant, run_id) DO NOTHING";

/// Counts one call unless the run is cancelled or a budget would be passed.
/// `$3` is 1 for a high-risk call; `$4`..`$6` are the limits (NULL = none).
const CHARGE: &str = "UPDATE runs SET calls = calls + 1, high_risk_calls = high_risk_calls + $3 \
    WHERE tenant = $1 AND run_id = $2 AND cancel_requested_at IS NULL \
    AND ($4 IS NULL OR calls < $4) \
    AND ($5 IS NULL OR $3 = 0 OR high_risk_calls < $5) \
    AND ($6 IS NULL OR started_at + $6 > $7) \
    RETURNING calls, high_risk_calls";

const READ_RUN: &str = "SELECT started_at, calls, high_risk_calls, cancel_requested_at, \
    cancel_reason FROM runs WHERE tenant = $1 AND run_id = $2";

type RunRow = (i64, i64, i64, Option<i64>, Option<String>);

mod cancel;
pub use cancel::Stopped;
mod pods;
mod refusal;
mod scopes;
use refusal::{refusal, refused};
pub use scopes::{Caller, ScopeCancellation, Stops};

fn limit(value: Option<u64>) -> Option<i64> {
    value.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Charges one call inside `$tx` (either backend) and evaluates to an
/// [`Admission`]: refused when a scope holding the caller is cancelled,
/// else charged to the run and (under per-pod limits) to the pod, both or
/// neither.
macro_rules! charge_in {
    ($tx:expr, $caller:expr, $run:expr, $high:expr, $limits:expr, $now:expr) => {{
        let caller: &Caller<'_> = $caller;
        let tenant = caller.tenant;
        let high: i64 = if $high { 1 } else { 0 };
        let scoped: Option<Option<String>> = sqlx::query_scalar(scopes::COVERING)
            .bind(tenant)
            .bind(caller.pod)
            .bind(caller.profile)
            .fetch_optional(&mut *$tx)
            .await?;
        let pod = caller.pod.filter(|_| !$limits.per_pod.is_unlimited());
        if let Some(reason) = scoped {
            Admission::Cancelled {
                reason,
                scoped: true,
            }
        } else {
            sqlx::query(ENSURE_RUN)
                .bind(tenant)
                .bind($run)
                .bind($now)
                .execute(&mut *$tx)
                .await?;
            if let Some(pod) = pod {
                sqlx::query(pods::ENSURE)
                    .bind(tenant)
                    .bind(pod)
                    .bind($now)
                    .execute(&mut *$tx)
                    .await?;
                sqlx::query("SAVEPOINT toolgate_charge")
                    .execute(&mut *$tx)
                    .await?;
            }
            let counted: Option<(i64, i64)> = sqlx::query_as(CHARGE)
                .bind(tenant)
                .bind($run)
                .bind(high)
                .bind(limit($limits.max_calls))
                .bind(limit($limits.max_high_risk_calls))
                .bind(limit($limits.max_run_seconds).map(|s| s.saturating_mul(1000)))
                .bind($now)
                .fetch_optional(&mut *$tx)
                .await?;
            let admission = match counted {
                Some((calls, high_risk_calls)) => Admission::Admitted {
                    calls: count(calls),
                    high_risk_calls: count(high_risk_calls),
                },
                None => {
                    let row: Option<RunRow> = sqlx::query_as(READ_RUN)
                        .bind(tenant)
                        .bind($run)
                        .fetch_optional(&mut *$tx)
                        .await?;
                    refusal(row, $limits, $high, $now)
                }
            };
            match pod {
                Some(pod) if admission.is_admitted() => {
                    let charged: Option<(i64, i64)> = sqlx::query_as(pods::CHARGE)
                        .bind(tenant)
                        .bind(pod)
                        .bind(high)
                        .bind(limit($limits.per_pod.max_calls))
                        .bind(limit($limits.per_pod.max_high_risk_calls))
                        .fetch_optional(&mut *$tx)
                        .await?;
                    if charged.is_some() {
                        sqlx::query("RELEASE SAVEPOINT toolgate_charge")
                            .execute(&mut *$tx)
                            .await?;
                        admission
                    } else {
                        // The run's charge goes too: both or neither.
                        sqlx::query("ROLLBACK TO SAVEPOINT toolgate_charge")
                            .execute(&mut *$tx)
                            .await?;
                        sqlx::query("RELEASE SAVEPOINT toolgate_charge")
                            .execute(&mut *$tx)
                            .await?;
                        let row: Option<(i64, i64)> = sqlx::query_as(pods::READ)
                            .bind(tenant)
                            .bind(pod)
                            .fetch_optional(&mut *$tx)
                            .await?;
                        pods::refusal(row, &$limits.per_pod, $high)?
                    }
                }
                Some(_) => {
                    sqlx::query("RELEASE SAVEPOINT toolgate_charge")
                        .execute(&mut *$tx)
                        .await?;
                    admission
                }
                None => admission,
            }
        }
    }};
}

impl Runs<'_> {
    /// Charges one allowed call to the caller's run (and, under per-pod
    /// limits, to its pod): counted unless the run or a scope holding it is
    /// cancelled or a budget is used up. The run starts at its first charge.
    pub async fn admit<'c>(
        &self,
        caller: impl Into<Caller<'c>>,
        run_id: &RunId,
        high_risk: bool,
        limits: &RunLimits,
        now: Timestamp,
    ) -> Result<Admission> {
        let caller = caller.into();
        caller.check()?;
        let run_id = run_id.as_str();
        self.store.check_file()?;
        let now = now.as_millisecond();
        Ok(on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            let admission = charge_in!(tx, &caller, run_id, high_risk, limits, now);
            tx.commit().await?;
            admission
        }))
    }

    /// [`Runs::admit`], and when `passes` says the call goes through with
    /// that answer, its flow labels in the same transaction: a call its
    /// run refused (cancelled, over budget) never labels the run. Returns
    /// the admission and the labels the call added.
    #[allow(clippy::too_many_arguments)]
    pub async fn admit_labelled<'c>(
        &self,
        caller: impl Into<Caller<'c>>,
        run_id: &RunId,
        high_risk: bool,
        limits: &RunLimits,
        now: Timestamp,
        labels: &LabelsOnPass<'_>,
        passes: impl FnOnce(&Admission) -> bool,
    ) -> Result<(Admission, Vec<String>)> {
        let caller = caller.into();
        caller.check()?;
        labels.check()?;
        let run_id = run_id.as_str();
        self.store.check_file()?;
        let now = now.as_millisecond();
        Ok(on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            let admission = charge_in!(tx, &caller, run_id, high_risk, limits, now);
            let added = if passes(&admission) {
                crate::flows::write_labels_in!(tx, caller.tenant, labels, now)
            } else {
                Vec::new()
            };
            tx.commit().await?;
            (admission, added)
        }))
    }

    /// What charging one call would answer now, without charging it: the
    /// refusal a charge would meet ([`Admission::Cancelled`] or
    /// [`Admission::Exhausted`]), or `None` when it would be counted (a run
    /// never charged always would). One read by key. The sidecar asks this
    /// before it asks a human: an escalation the run could not pay for is
    /// refused, not put to an approver.
    pub async fn would_refuse<'c>(
        &self,
        caller: impl Into<Caller<'c>>,
        run_id: &RunId,
        high_risk: bool,
        limits: &RunLimits,
        now: Timestamp,
    ) -> Result<Option<Admission>> {
        let caller = caller.into();
        caller.check()?;
        if let Some(scoped) = self.scope_cancellation(caller).await? {
            return Ok(Some(Admission::Cancelled {
                scoped: true,
                reason: scoped.reason,
            }));
        }
        let row: Option<RunRow> = on_pool!(self.store, pool => {
            sqlx::query_as(READ_RUN)
                .bind(caller.tenant)
                .bind(run_id.as_str())
                .fetch_optional(pool)
                .await?
        });
        if let Some(refusal) =
            row.and_then(|row| refused(row, limits, high_risk, now.as_millisecond()))
        {
            return Ok(Some(refusal));
        }
        match caller.pod.filter(|_| !limits.per_pod.is_unlimited()) {
            None => Ok(None),
            Some(pod) => {
                let row: Option<(i64, i64)> = on_pool!(self.store, pool => {
                    sqlx::query_as(pods::READ).bind(caller.tenant).bind(pod).fetch_optional(pool).await?
                });
                Ok(row.and_then(|row| pods::refused(row, &limits.per_pod, high_risk)))
            }
        }
    }

    /// [`Runs::admit`] and the decision record in one transaction: the
    /// record `decide` builds for the admission's outcome is appended to the
    /// chain of (`tenant`, `stream`), or neither the charge nor the record is kept.
    /// With `labels`, the call's flow labels are written in the same
    /// transaction when their predicate says the call passes with that
    /// admission; `decide` is told which labels the call added.
    // One call on the sidecar's hot path, every argument a plain value the
    // handler has at hand; a parameter struct would only be built and
    // destructured again.
    #[allow(clippy::too_many_arguments)]
    pub async fn admit_and_record<'c>(
        &self,
        caller: impl Into<Caller<'c>>,
        stream: &str,
        run_id: &RunId,
        high_risk: bool,
        limits: &RunLimits,
        now: Timestamp,
        labels: Option<LabelsIfPassing<'_>>,
        decide: impl FnOnce(&Admission, &[String]) -> DecisionRecord,
    ) -> Result<(Admission, ChainedDecision)> {
        let caller = caller.into();
        caller.check()?;
        if let Some((labels, _)) = labels {
            labels.check()?;
        }
        let tenant = caller.tenant;
        let run_id = run_id.as_str();
        self.store.check_file()?;
        let now_ms = now.as_millisecond();
        match &self.store.backend {
            crate::Backend::Postgres(pool) => {
                require("stream", stream)?;
                let path = self.store.heads.append_path(pool).await?;
                // The stream's turn, held until the transaction ends; the
                // head is known again only if it commits.
                let mut head = self.store.heads.lock(tenant, stream).await;
                head.take();
                let mut tx = pool.begin_write().await?;
                let admission = charge_in!(tx, &caller, run_id, high_risk, limits, now_ms);
                let added = match labels {
                    Some((labels, passes)) if passes(&admission) => {
                        crate::flows::write_labels_in!(tx, tenant, labels, now_ms)
                    }
                    _ => Vec::new(),
                };
                let record = crate::decisions::prepared(decide(&admission, &added))?;
                let chained =
                    crate::decisions::append_pg_in(&mut tx, path, tenant, stream, record).await?;
                tx.commit().await?;
                *head = Some((chained.seq, chained.hash.clone()));
                Ok((admission, chained))
            }
            crate::Backend::Sqlite(pool) => {
                let mut tx = pool.begin_write().await?;
                let admission = charge_in!(tx, &caller, run_id, high_risk, limits, now_ms);
                let added = match labels {
                    Some((labels, passes)) if passes(&admission) => {
                        crate::flows::write_labels_in!(tx, tenant, labels, now_ms)
                    }
                    _ => Vec::new(),
                };
                let record = crate::decisions::prepared(decide(&admission, &added))?;
                let mut chained =
                    crate::decisions::append_sqlite_in(&mut tx, tenant, stream, vec![record])
                        .await?;
                tx.commit().await?;
                let chained = chained
                    .pop()
                    .ok_or_else(|| StoreError::Corrupt("append produced no row".into()))?;
                Ok((admission, chained))
            }
        }
    }

    /// The run's cancellation, counters and open intents, read in one query.
    /// A run never seen is returned with zero counters.
    pub async fn state(&self, tenant: &str, run_id: &RunId) -> Result<RunState> {
        require("tenant", tenant)?;
        let run_id = run_id.as_str();
        let sql = "SELECT r.started_at, r.calls, r.high_risk_calls, r.cancel_requested_at, \
            r.cancel_reason, r.cancelled_by, i.id, i.tenant, i.run_id, i.step_id, i.tool, \
            i.args_digest, i.call_digest, i.decision_id, i.risk, i.verification_probe, \
            i.status, i.detail, i.created_at, i.effect_sent_at, i.completed_at \
            FROM (SELECT CAST($1 AS TEXT) AS tenant, CAST($2 AS TEXT) AS run_id) k \
            LEFT JOIN runs r ON r.tenant = k.tenant AND r.run_id = k.run_id \
            LEFT JOIN intents i ON i.tenant = k.tenant AND i.run_id = k.run_id \
                AND i.status = 'pending' \
            ORDER BY i.created_at, i.id";
        let rows: Vec<StateRow> = on_pool!(self.store, pool => {
            sqlx::query_as(sql).bind(tenant).bind(run_id).fetch_all(pool).await?
        });
        let mut state = RunState {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            started_at: None,
            calls: 0,
            high_risk_calls: 0,
            cancel_requested_at: None,
            cancel_reason: None,
            cancelled_by: None,
            open_intents: Vec::new(),
        };
        for row in rows {
            if state.started_at.is_none() {
                state.started_at = opt_ts_from_ms(row.started_at)?;
                state.calls = count(row.calls.unwrap_or(0));
                state.high_risk_calls = count(row.high_risk_calls.unwrap_or(0));
                state.cancel_requested_at = opt_ts_from_ms(row.cancel_requested_at)?;
                state.cancel_reason.clone_from(&row.cancel_reason);
                state.cancelled_by.clone_from(&row.cancelled_by);
            }
            if let Some(intent) = row.intent() {
                let intent = intent.into_intent()?;
                let class = if intent.effect_sent_at.is_some() {
                    ResumeClass::Uncertain
                } else {
                    ResumeClass::SafeToRetry
                };
                state.open_intents.push(PendingIntent { intent, class });
            }
        }
        Ok(state)
    }
}

#[derive(sqlx::FromRow)]
struct StateRow {
    started_at: Option<i64>,
    calls: Option<i64>,
    high_risk_calls: Option<i64>,
    cancel_requested_at: Option<i64>,
    cancel_reason: Option<String>,
    cancelled_by: Option<String>,
    id: Option<String>,
    tenant: Option<String>,
    run_id: Option<String>,
    step_id: Option<String>,
    tool: Option<String>,
    args_digest: Option<String>,
    call_digest: Option<String>,
    decision_id: Option<String>,
    risk: Option<String>,
    verification_probe: Option<String>,
    status: Option<String>,
    detail: Option<String>,
    created_at: Option<i64>,
    effect_sent_at: Option<i64>,
    completed_at: Option<i64>,
}

impl StateRow {
    /// The joined intent, when the row has one.
    fn intent(&self) -> Option<IntentRow> {
        Some(IntentRow {
            id: self.id.clone()?,
            tenant: self.tenant.clone()?,
            run_id: self.run_id.clone()?,
            step_id: self.step_id.clone()?,
            tool: self.tool.clone()?,
            args_digest: self.args_digest.clone()?,
            call_digest: self.call_digest.clone(),
            decision_id: self.decision_id.clone()?,
            risk: self.risk.clone()?,
            verification_probe: self.verification_probe.clone(),
            status: self.status.clone()?,
            detail: self.detail.clone(),
            created_at: self.created_at?,
            effect_sent_at: self.effect_sent_at,
            completed_at: self.completed_at,
        })
    }
}
