//! Intent ledger: a durable `pending` row committed before a high-risk call
//! runs, an `effect_sent_at` watermark just before the side effect, and the
//! outcome written to the same row afterwards. A crash anywhere in between
//! leaves a row the resume flow can classify instead of an action with no
//! record at all.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{
    Result, Store, StoreError, new_id, on_pool, opt_ts_from_ms, require, require_opt, ts_from_ms,
};

/// What the caller knows before running a high-risk call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewIntent {
    /// Tenant that owns the run.
    pub tenant: String,
    /// Run the call belongs to; [`Intents::pending`] lists by run.
    pub run_id: String,
    /// Step within the run.
    pub step_id: String,
    /// Tool being invoked.
    pub tool: String,
    /// Digest of the exact arguments the policy decision was bound to.
    pub args_digest: String,
    /// Digest of the whole call (tool, action, arguments) the decision allowed.
    pub call_digest: Option<String>,
    /// Decision that allowed the call; at most one intent per decision.
    pub decision_id: String,
    /// Risk class reported by the policy (e.g. `high`).
    pub risk: String,
    /// How a resume flow can check whether the effect happened.
    pub verification_probe: Option<serde_json::Value>,
}

toolgate_contract::wire_enum! {
    /// Lifecycle state of an intent row.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum IntentStatus {
        /// Recorded before the call; outcome not yet known.
        Pending = "pending",
        /// The tool reported its effect happened.
        Completed = "completed",
        /// The tool reported its effect did not happen.
        NotCompleted = "not_completed",
        /// The tool failed; whether the effect happened is in `detail`.
        Error = "error",
    }
}

impl fmt::Display for IntentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IntentStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match Self::from_wire(s) {
            Some(status) => Ok(status),
            None => IntentOutcome::from_str(s).map(IntentStatus::from),
        }
    }
}

toolgate_contract::wire_enum! {
    /// The terminal outcome reported by [`Intents::complete`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum IntentOutcome {
        /// The effect happened.
        Completed = "completed",
        /// The effect did not happen.
        NotCompleted = "not_completed",
        /// The call failed.
        Error = "error",
    }
}

impl From<IntentOutcome> for IntentStatus {
    fn from(o: IntentOutcome) -> Self {
        match o {
            IntentOutcome::Completed => IntentStatus::Completed,
            IntentOutcome::NotCompleted => IntentStatus::NotCompleted,
            IntentOutcome::Error => IntentStatus::Error,
        }
    }
}

impl FromStr for IntentOutcome {
    type Err = StoreError;
    /// Parses `completed`, `not_completed` or `error`; anything else is
    /// `invalid_input`.
    fn from_str(s: &str) -> Result<Self> {
        Self::from_wire(s).ok_or_else(|| {
            StoreError::InvalidInput(format!(
                "unknown intent outcome {s:?} (expected completed, not_completed or error)"
            ))
        })
    }
}

/// One intent row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Intent {
    /// Generated id (UUIDv7).
    pub id: String,
    /// Tenant that owns the run.
    pub tenant: String,
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Tool name.
    pub tool: String,
    /// Bound argument digest.
    pub args_digest: String,
    /// Bound whole-call digest (`None` on rows from before it existed).
    #[serde(default)]
    pub call_digest: Option<String>,
    /// Decision that allowed the call.
    pub decision_id: String,
    /// Risk class.
    pub risk: String,
    /// Probe for checking the effect on resume.
    pub verification_probe: Option<serde_json::Value>,
    /// Current status.
    pub status: IntentStatus,
    /// Free-form detail given at completion.
    pub detail: Option<String>,
    /// When the pending row was committed.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub created_at: Timestamp,
    /// When the caller said the side effect was about to be sent.
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub effect_sent_at: Option<Timestamp>,
    /// When the outcome was recorded.
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub completed_at: Option<Timestamp>,
}

toolgate_contract::wire_enum! {
    /// How the resume flow may treat an open intent.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
    pub enum ResumeClass {
        /// The effect was never sent, so running the call again cannot double it.
        SafeToRetry = "safe_to_retry",
        /// The effect may have happened; a human or the verification probe must
        /// decide. Never replay silently.
        Uncertain = "uncertain",
    }
}

/// An open intent plus its resume classification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingIntent {
    /// The open row.
    pub intent: Intent,
    /// Whether a retry is safe.
    pub class: ResumeClass,
}

#[derive(sqlx::FromRow)]
pub(crate) struct IntentRow {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) run_id: String,
    pub(crate) step_id: String,
    pub(crate) tool: String,
    pub(crate) args_digest: String,
    pub(crate) call_digest: Option<String>,
    pub(crate) decision_id: String,
    pub(crate) risk: String,
    pub(crate) verification_probe: Option<String>,
    pub(crate) status: String,
    pub(crate) detail: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) effect_sent_at: Option<i64>,
    pub(crate) completed_at: Option<i64>,
}

const COLUMNS: &str = "id, tenant, run_id, step_id, tool, args_digest, call_digest, decision_id, \
    risk, verification_probe, status, detail, created_at, effect_sent_at, completed_at";

impl IntentRow {
    pub(crate) fn into_intent(self) -> Result<Intent> {
        Ok(Intent {
            status: self
                .status
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("intent status {:?}", self.status)))?,
            verification_probe: self
                .verification_probe
                .as_deref()
                .map(|t| crate::parse_json(t, "verification_probe"))
                .transpose()?,
            created_at: ts_from_ms(self.created_at)?,
            effect_sent_at: opt_ts_from_ms(self.effect_sent_at)?,
            completed_at: opt_ts_from_ms(self.completed_at)?,
            id: self.id,
            tenant: self.tenant,
            run_id: self.run_id,
            step_id: self.step_id,
            tool: self.tool,
            args_digest: self.args_digest,
            call_digest: self.call_digest,
            decision_id: self.decision_id,
            risk: self.risk,
            detail: self.detail,
        })
    }
}

/// Intent ledger operations. Obtain with [`Store::intents`].
///
/// Every call names the tenant: an intent of another tenant is `not_found`,
/// enforced by the SQL itself, so no caller has to re-check ownership. Times
/// the store writes (`created_at`, `effect_sent_at`, `completed_at`) are the
/// caller's `now`.
#[derive(Debug, Clone, Copy)]
pub struct Intents<'a> {
    pub(crate) store: &'a Store,
}

impl Intents<'_> {
    /// Commits a `pending` intent created at `now` and returns it. The row is
    /// durable when this returns, so the caller may then run the tool.
    pub async fn begin(&self, new: NewIntent, now: Timestamp) -> Result<Intent> {
        require("tenant", &new.tenant)?;
        crate::require_run_id(&new.run_id)?;
        require("step_id", &new.step_id)?;
        require("tool", &new.tool)?;
        require("args_digest", &new.args_digest)?;
        require_opt("call_digest", new.call_digest.as_deref())?;
        require("decision_id", &new.decision_id)?;
        require("risk", &new.risk)?;
        self.store.check_file()?;
        let probe = new
            .verification_probe
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::InvalidInput(format!("verification_probe: {e}")))?;
        let id = new_id();
        let now = now.as_millisecond();
        // `status` is left to its default, 'pending': on PostgreSQL a tenant
        // role may not write it, so every intent starts pending.
        let sql = "INSERT INTO intents (id, tenant, run_id, step_id, tool, args_digest, \
            call_digest, decision_id, risk, verification_probe, created_at) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
        let inserted = on_pool!(self.store, pool => {
            sqlx::query(sql)
                .bind(&id)
                .bind(&new.tenant)
                .bind(&new.run_id)
                .bind(&new.step_id)
                .bind(&new.tool)
                .bind(&new.args_digest)
                .bind(&new.call_digest)
                .bind(&new.decision_id)
                .bind(&new.risk)
                .bind(&probe)
                .bind(now)
                .execute(pool)
                .await
                .map(|_| ())
        });
        match inserted {
            Ok(_) => {}
            // `intents_one_per_decision`: another request won the race.
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                return Err(StoreError::IntentExists {
                    decision_id: new.decision_id,
                });
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Intent {
            id,
            tenant: new.tenant,
            run_id: new.run_id,
            step_id: new.step_id,
            tool: new.tool,
            args_digest: new.args_digest,
            call_digest: new.call_digest,
            decision_id: new.decision_id,
            risk: new.risk,
            verification_probe: new.verification_probe,
            status: IntentStatus::Pending,
            detail: None,
            created_at: ts_from_ms(now)?,
            effect_sent_at: None,
            completed_at: None,
        })
    }

    /// Records that the side effect is about to be sent (at `now`).
    /// Idempotent (the first watermark wins); `conflict` if the intent is
    /// already completed, because a watermark after the outcome would
    /// misclassify it.
    pub async fn mark_effect_sent(&self, tenant: &str, id: &str, now: Timestamp) -> Result<Intent> {
        require("tenant", tenant)?;
        require("id", id)?;
        self.store.check_file()?;
        let sql = format!(
            "UPDATE intents SET effect_sent_at = COALESCE(effect_sent_at, $3) \
             WHERE tenant = $1 AND id = $2 AND status = 'pending' RETURNING {COLUMNS}"
        );
        let updated: Option<IntentRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(id)
                .bind(now.as_millisecond())
                .fetch_optional(pool)
                .await?
        });
        if let Some(row) = updated {
            return row.into_intent();
        }
        let intent = self.get(tenant, id).await?;
        Err(StoreError::Conflict(format!(
            "intent {id} is already {}",
            intent.status
        )))
    }

    /// Moves a pending intent to its outcome, completed at `now`. Repeating
    /// the same outcome is a no-op returning the row; a different outcome is
    /// `conflict`.
    pub async fn complete(
        &self,
        tenant: &str,
        id: &str,
        outcome: IntentOutcome,
        detail: Option<String>,
        now: Timestamp,
    ) -> Result<Intent> {
        require("tenant", tenant)?;
        require("id", id)?;
        self.store.check_file()?;
        if let Some(d) = &detail
            && d.len() > 64 * 1024
        {
            return Err(StoreError::InvalidInput("detail exceeds 64 KiB".into()));
        }
        let sql = format!(
            "UPDATE intents SET status = $3, detail = $4, completed_at = $5 \
             WHERE tenant = $1 AND id = $2 AND status = 'pending' RETURNING {COLUMNS}"
        );
        let updated: Option<IntentRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql)
                .bind(tenant)
                .bind(id)
                .bind(outcome.as_str())
                .bind(&detail)
                .bind(now.as_millisecond())
                .fetch_optional(pool)
                .await?
        });
        if let Some(row) = updated {
            return row.into_intent();
        }
        // Not pending (or absent): same outcome is an idempotent repeat.
        let intent = self.get(tenant, id).await?;
        if intent.status == IntentStatus::from(outcome) {
            Ok(intent)
        } else {
            Err(StoreError::Conflict(format!(
                "intent {id} is already {}, cannot record {}",
                intent.status,
                outcome.as_str()
            )))
        }
    }

    /// Fetches one intent of `tenant`; `not_found` if it does not exist or
    /// belongs to another tenant.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Intent> {
        require("tenant", tenant)?;
        require("id", id)?;
        let sql = format!("SELECT {COLUMNS} FROM intents WHERE tenant = $1 AND id = $2");
        let row: Option<IntentRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(id).fetch_optional(pool).await?
        });
        row.ok_or_else(|| StoreError::not_found("intent", id))?
            .into_intent()
    }

    /// Counts a tenant's open intents by resume class: `(safe_to_retry,
    /// uncertain)`. For the sidecar's `toolgate_open_intents` gauge.
    pub async fn open_counts(&self, tenant: &str) -> Result<(i64, i64)> {
        require("tenant", tenant)?;
        let sql = open_counts_sql(1);
        let (safe, uncertain): (i64, i64) = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).fetch_one(pool).await?
        });
        Ok((safe, uncertain))
    }

    /// Lists the open intents of `tenant`'s run, oldest first, each
    /// classified for resume.
    pub async fn pending(&self, tenant: &str, run_id: &str) -> Result<Vec<PendingIntent>> {
        require("tenant", tenant)?;
        require("run_id", run_id)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM intents WHERE tenant = $1 AND run_id = $2 \
             AND status = 'pending' ORDER BY created_at, id"
        );
        let rows: Vec<IntentRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(run_id).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|r| {
                let intent = r.into_intent()?;
                let class = if intent.effect_sent_at.is_some() {
                    ResumeClass::Uncertain
                } else {
                    ResumeClass::SafeToRetry
                };
                Ok(PendingIntent { intent, class })
            })
            .collect()
    }
}

/// The open intents of the tenant bound as `$n`, by resume class, in one
/// statement (an idle sidecar sends it on a timer).
pub(crate) fn open_counts_sql(n: usize) -> String {
    format!(
        "SELECT COUNT(*) FILTER (WHERE effect_sent_at IS NULL), \
         COUNT(*) FILTER (WHERE effect_sent_at IS NOT NULL) \
         FROM intents WHERE tenant = ${n} AND status = 'pending'"
    )
}
