//! Cancellations wider than one run: every run of a pod, of a profile or
//! of the whole namespace. A run id is the agent's to choose, so these are
//! the stops it cannot step around. Written once, never withdrawn (on
//! PostgreSQL a trigger refuses to change one, `TG004`).

use jiff::Timestamp;
use serde::Serialize;
use toolgate_policy::{Scope, ScopeKind};

use super::{Cancellation, Runs, cancel};
use crate::{Result, StoreError, on_pool, require, require_opt};

/// Who a call is charged for: the tenant, and the pod and profile of the
/// sidecar asking, by which scoped cancellations and per-pod budgets find
/// it. A caller without a pod or profile is held only by the namespace
/// scope and charged no pod budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'a> {
    /// The tenant (the namespace).
    pub tenant: &'a str,
    /// The pod whose sidecar asks.
    pub pod: Option<&'a str>,
    /// The profile the sidecar enforces.
    pub profile: Option<&'a str>,
}

impl<'a> Caller<'a> {
    /// A sidecar's caller: its tenant, pod and profile.
    pub fn new(tenant: &'a str, pod: &'a str, profile: Option<&'a str>) -> Self {
        Self {
            tenant,
            pod: Some(pod),
            profile,
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        require("tenant", self.tenant)?;
        require_opt("pod", self.pod)?;
        require_opt("profile", self.profile)
    }
}

impl<'a> From<&'a str> for Caller<'a> {
    fn from(tenant: &'a str) -> Self {
        Self {
            tenant,
            pod: None,
            profile: None,
        }
    }
}

impl<'a> From<&'a String> for Caller<'a> {
    fn from(tenant: &'a String) -> Self {
        Self::from(tenant.as_str())
    }
}

/// One scoped cancellation, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeCancellation {
    /// What it stops.
    #[serde(serialize_with = "scope_text")]
    pub scope: Scope,
    /// When it was recorded.
    pub requested_at: Timestamp,
    /// Why.
    pub reason: Option<String>,
    /// Who asked.
    pub cancelled_by: String,
}

fn scope_text<S: serde::Serializer>(scope: &Scope, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(scope)
}

/// The cancelled scopes holding a caller, earliest first: `$1` tenant,
/// `$2` pod, `$3` profile (NULL matches nothing). The one predicate both
/// the charge and the sidecar's read use.
macro_rules! holding {
    () => {
        "FROM cancelled_scopes WHERE tenant = $1 AND (scope = 'namespace' \
         OR (scope = 'pod' AND target = $2) OR (scope = 'profile' AND target = $3)) \
         ORDER BY requested_at LIMIT 1"
    };
}

/// The columns of a [`ScopeRow`].
macro_rules! columns {
    () => {
        "SELECT scope, target, requested_at, reason, cancelled_by "
    };
}

/// The reason of the earliest cancelled scope holding a caller.
pub(super) const COVERING: &str = concat!("SELECT reason ", holding!());

/// The earliest cancelled scope holding a caller, whole.
const HOLDING: &str = concat!(columns!(), holding!());

/// Every cancelled scope of tenant `$1`, oldest first.
const LISTING: &str = concat!(
    columns!(),
    "FROM cancelled_scopes WHERE tenant = $1 ORDER BY requested_at LIMIT 10000"
);

type ScopeRow = (String, String, i64, Option<String>, String);

/// A sidecar's one read of what stops it: the earliest cancelled scope
/// holding `$1` (tenant), `$2` (pod), `$3` (profile), and the tenant's runs
/// cancelled since `$4`. One statement, since an idle sidecar makes it on
/// a timer.
const STOPS: &str = concat!(
    "SELECT 'scope', scope, target, requested_at, reason, cancelled_by FROM (",
    columns!(),
    holding!(),
    ") h UNION ALL SELECT 'run', run_id, '', cancel_requested_at, NULL, '' FROM (\
     SELECT run_id, cancel_requested_at FROM runs WHERE tenant = $1 \
     AND cancel_requested_at IS NOT NULL AND cancel_requested_at >= $4 \
     ORDER BY cancel_requested_at LIMIT 10000) r"
);

/// What [`Runs::stops`] read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stops {
    /// The earliest cancelled scope holding the caller.
    pub scope: Option<ScopeCancellation>,
    /// Runs of the tenant cancelled since the time asked, oldest first (at
    /// most 10,000), with when.
    pub runs: Vec<(String, jiff::Timestamp)>,
}

fn from_row((kind, target, at, reason, by): ScopeRow) -> Result<ScopeCancellation> {
    let target = (!target.is_empty()).then_some(target.as_str());
    let scope = Scope::parse(&kind, target)
        .map_err(|e| StoreError::Corrupt(format!("cancelled scope: {e}")))?;
    Ok(ScopeCancellation {
        scope,
        requested_at: crate::ts_from_ms(at)?,
        reason,
        cancelled_by: by,
    })
}

impl Runs<'_> {
    /// Cancels every run of `scope` in `tenant`: from now on their calls are
    /// refused, whatever run id they carry. Pending approvals it covers are
    /// cancelled (the namespace's all; a pod's, those its sidecar asked
    /// for). Idempotent: cancelling again reports the first request.
    pub async fn cancel_scope(
        &self,
        tenant: &str,
        scope: &Scope,
        reason: Option<&str>,
        by: &str,
        now: Timestamp,
    ) -> Result<Cancellation> {
        require("tenant", tenant)?;
        require("by", by)?;
        require_opt("reason", reason)?;
        self.store.check_file()?;
        let (kind, target) = (scope.kind().as_str(), scope.target());
        let now = now.as_millisecond();
        let recorded = match &self.store.backend {
            crate::Backend::Postgres(pool) => {
                let row: cancel::PgCancelRow =
                    sqlx::query_as("SELECT * FROM toolgate_cancel_scope($1, $2, $3, $4, $5, $6)")
                        .bind(tenant)
                        .bind(kind)
                        .bind(target)
                        .bind(reason)
                        .bind(by)
                        .bind(now)
                        .fetch_one(pool)
                        .await?;
                cancel::from_pg(row)
            }
            crate::Backend::Sqlite(pool) => {
                use crate::BeginWrite;
                let mut tx = pool.begin_write().await?;
                let out = cancel_scope_sqlite(&mut tx, tenant, scope, reason, by, now).await?;
                tx.commit().await?;
                out
            }
        };
        cancel::answer(recorded)
    }

    /// The earliest cancelled scope holding `caller`, if any.
    pub async fn scope_cancellation(
        &self,
        caller: super::Caller<'_>,
    ) -> Result<Option<ScopeCancellation>> {
        caller.check()?;
        let row: Option<ScopeRow> = on_pool!(self.store, pool => {
            sqlx::query_as(HOLDING)
                .bind(caller.tenant)
                .bind(caller.pod)
                .bind(caller.profile)
                .fetch_optional(pool)
                .await?
        });
        row.map(from_row).transpose()
    }

    /// [`Runs::scope_cancellation`] of `caller` and
    /// [`Runs::cancelled_since`] of its tenant, in one statement.
    pub async fn stops(&self, caller: super::Caller<'_>, since: jiff::Timestamp) -> Result<Stops> {
        caller.check()?;
        let rows: Vec<(String, String, String, i64, Option<String>, String)> = on_pool!(self.store, pool => {
            sqlx::query_as(STOPS)
                .bind(caller.tenant)
                .bind(caller.pod)
                .bind(caller.profile)
                .bind(since.as_millisecond())
                .fetch_all(pool)
                .await?
        });
        let mut stops = Stops::default();
        for (kind, a, b, at, reason, by) in rows {
            if kind == "scope" {
                stops.scope = Some(from_row((a, b, at, reason, by))?);
            } else {
                stops.runs.push((a, crate::ts_from_ms(at)?));
            }
        }
        Ok(stops)
    }

    /// Every scoped cancellation of `tenant`, oldest first (at most
    /// 10,000). A sidecar reads only those holding it
    /// ([`Runs::scope_cancellation`]).
    pub async fn scope_cancellations(&self, tenant: &str) -> Result<Vec<ScopeCancellation>> {
        require("tenant", tenant)?;
        let rows: Vec<ScopeRow> = on_pool!(self.store, pool => {
            sqlx::query_as(LISTING).bind(tenant).fetch_all(pool).await?
        });
        rows.into_iter().map(from_row).collect()
    }
}

async fn cancel_scope_sqlite(
    tx: &mut sqlx::SqliteConnection,
    tenant: &str,
    scope: &Scope,
    reason: Option<&str>,
    by: &str,
    now: i64,
) -> Result<cancel::CancelRow> {
    let (kind, target) = (scope.kind().as_str(), scope.target());
    let inserted = sqlx::query(
        "INSERT INTO cancelled_scopes (tenant, scope, target, requested_at, reason, \
         cancelled_by) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (tenant, scope, target) DO NOTHING",
    )
    .bind(tenant)
    .bind(kind)
    .bind(target)
    .bind(now)
    .bind(reason)
    .bind(by)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 0 {
        let at: i64 = sqlx::query_scalar(
            "SELECT requested_at FROM cancelled_scopes \
             WHERE tenant = $1 AND scope = $2 AND target = $3",
        )
        .bind(tenant)
        .bind(kind)
        .bind(target)
        .fetch_one(&mut *tx)
        .await?;
        return Ok((Some(at), false, 0));
    }
    // A sidecar asks as `sidecar:<its namespace>/<its pod>`; a pod name
    // holds no LIKE wildcard.
    // An approval does not record its profile: a profile stop reaps none.
    let requester = match scope.kind() {
        ScopeKind::Pod => Some(format!("sidecar:%/{target}")),
        ScopeKind::Profile => return Ok((Some(now), true, 0)),
        ScopeKind::Namespace | ScopeKind::Run => None,
    };
    let reaped: Vec<(String, String)> = sqlx::query_as(
        "UPDATE approvals SET status = 'cancelled', resolved_at = $2, resolved_by = $3, \
         reason = COALESCE($4, $5 || ' cancelled') \
         WHERE tenant = $1 AND status = 'pending' AND ($6 IS NULL OR requested_by LIKE $6) \
         RETURNING id, run_id",
    )
    .bind(tenant)
    .bind(now)
    .bind(by)
    .bind(reason)
    .bind(kind)
    .bind(requester)
    .fetch_all(&mut *tx)
    .await?;
    for (id, run) in &reaped {
        sqlx::query(
            "INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at) \
             VALUES ($1, $2, 'approval.cancelled', $3, $4, $5)",
        )
        .bind(tenant)
        .bind(run)
        .bind(id)
        .bind(serde_json::json!({"approval_id": id}).to_string())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    Ok((Some(now), true, reaped.len() as i64))
}
