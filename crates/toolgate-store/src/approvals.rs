//! Durable approvals for escalated calls.
//!
//! An approval answers exactly one call: its tool, its argument digest and
//! its policy version, once, before its expiry. Requests are idempotent per
//! `(tenant, invocation_id)`; every state change commits together with its
//! run event, and resolution is idempotent for the same answer.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::{
    BeginWrite, Result, Store, StoreError, duration_ms, new_id, now_ms, on_pool, opt_ts_from_ms,
    require, require_opt, ts_from_ms,
};

/// PostgreSQL notification channel carrying `tenant/approval_id` payloads
/// whenever an approval leaves `pending`.
const CHANNEL: &str = "toolgate_approvals";

/// How often [`Approvals::wait`] re-reads the row: the SQLite poll interval,
/// and on PostgreSQL a safety net in case a notification is missed.
const SQLITE_POLL: Duration = Duration::from_millis(50);
const PG_RECHECK: Duration = Duration::from_secs(1);

/// Longest time to live the store accepts (30 days).
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Longest [`NewApproval::preview`] the store accepts, in characters.
pub const MAX_PREVIEW_CHARS: usize = 512;

/// A request for a human decision on one escalated call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewApproval {
    /// Caller-chosen approval id; generated (UUIDv7) when `None`.
    pub approval_id: Option<String>,
    /// The tool invocation this approval answers. A second request with the
    /// same `(tenant, invocation_id)` returns the existing approval.
    pub invocation_id: String,
    /// Owning tenant; every read is scoped to it.
    pub tenant: String,
    /// Run that is waiting.
    pub run_id: String,
    /// Tool the approval is for.
    pub tool: String,
    /// Digest of the exact arguments to be approved.
    pub args_digest: String,
    /// Digest of the whole call (tool, action, arguments) to be approved;
    /// [`Approvals::consume`] matches on it.
    #[serde(default)]
    pub call_digest: Option<String>,
    /// Policy version that escalated.
    pub policy_version: String,
    /// Decision that escalated.
    pub decision_id: String,
    /// Principal that asked.
    pub requested_by: String,
    /// Time to live; afterwards the approval counts as expired.
    pub ttl: Duration,
    /// The action of the call (e.g. the tool's operation), for the approver.
    #[serde(default)]
    pub action: Option<String>,
    /// A short human-readable preview of the call for the approver, at most
    /// [`MAX_PREVIEW_CHARS`] characters.
    #[serde(default)]
    pub preview: Option<String>,
}

/// The call an approval is being used for: every field must equal the
/// approved request for [`Approvals::consume`] to succeed.
#[derive(Debug, Clone, Copy)]
pub struct ApprovedCall<'a> {
    /// Canonical tool name.
    pub tool: &'a str,
    /// Digest of the arguments.
    pub args_digest: &'a str,
    /// Digest of the whole call (tool, action, arguments).
    pub call_digest: &'a str,
    /// Policy version deciding now.
    pub policy_version: &'a str,
}

/// Effective state of an approval. A `pending` row whose `expires_at` has
/// passed is reported as `Expired` even before [`Approvals::expire`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a human.
    Pending,
    /// Approved; may be consumed once.
    Approved,
    /// Denied.
    Denied,
    /// Nobody answered in time.
    Expired,
    /// Its run was cancelled before anyone answered.
    Cancelled,
}

impl ApprovalStatus {
    /// The stored, wire-stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalStatus {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "pending" => Ok(ApprovalStatus::Pending),
            "approved" => Ok(ApprovalStatus::Approved),
            "denied" => Ok(ApprovalStatus::Denied),
            "expired" => Ok(ApprovalStatus::Expired),
            "cancelled" => Ok(ApprovalStatus::Cancelled),
            other => Err(StoreError::InvalidInput(format!(
                "unknown approval status {other:?}"
            ))),
        }
    }
}

/// A human's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Let the call through (once).
    Approved,
    /// Refuse the call.
    Denied,
}

impl ApprovalDecision {
    /// The stored, wire-stable name.
    pub fn as_str(self) -> &'static str {
        ApprovalStatus::from(self).as_str()
    }
}

impl From<ApprovalDecision> for ApprovalStatus {
    fn from(d: ApprovalDecision) -> Self {
        match d {
            ApprovalDecision::Approved => ApprovalStatus::Approved,
            ApprovalDecision::Denied => ApprovalStatus::Denied,
        }
    }
}

impl FromStr for ApprovalDecision {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "approved" | "approve" => Ok(ApprovalDecision::Approved),
            "denied" | "deny" => Ok(ApprovalDecision::Denied),
            other => Err(StoreError::InvalidInput(format!(
                "unknown approval decision {other:?} (expected approved or denied)"
            ))),
        }
    }
}

/// One approval row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// Approval id.
    pub id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Invocation it answers.
    pub invocation_id: String,
    /// Waiting run.
    pub run_id: String,
    /// Approved tool.
    pub tool: String,
    /// Approved argument digest.
    pub args_digest: String,
    /// Approved whole-call digest (`None` on rows from before it existed,
    /// which can never be consumed).
    #[serde(default)]
    pub call_digest: Option<String>,
    /// Policy version that escalated.
    pub policy_version: String,
    /// Escalating decision.
    pub decision_id: String,
    /// Who asked.
    pub requested_by: String,
    /// Effective status (lazy expiry applied).
    pub status: ApprovalStatus,
    /// When it was requested.
    pub created_at: Timestamp,
    /// When it stops being answerable.
    pub expires_at: Timestamp,
    /// Who resolved it.
    pub resolved_by: Option<String>,
    /// Why, in the resolver's words.
    pub reason: Option<String>,
    /// When it was resolved or swept to expired.
    pub resolved_at: Option<Timestamp>,
    /// When the single re-authorization it grants was used.
    pub consumed_at: Option<Timestamp>,
    /// The action of the call, as requested.
    #[serde(default)]
    pub action: Option<String>,
    /// The preview shown to the approver, as requested.
    #[serde(default)]
    pub preview: Option<String>,
}

/// An audit event attached to a run (`approval.requested`, `approval.resolved`,
/// `approval.expired`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// Monotonic event id.
    pub id: i64,
    /// Owning tenant.
    pub tenant: String,
    /// Run id.
    pub run_id: String,
    /// Event kind.
    pub kind: String,
    /// The record the event is about (approval id).
    pub subject_id: String,
    /// Event body.
    pub payload: serde_json::Value,
    /// When it was written.
    pub created_at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct ApprovalRow {
    id: String,
    tenant: String,
    invocation_id: String,
    run_id: String,
    tool: String,
    args_digest: String,
    call_digest: Option<String>,
    policy_version: String,
    decision_id: String,
    requested_by: String,
    status: String,
    created_at: i64,
    expires_at: i64,
    resolved_by: Option<String>,
    reason: Option<String>,
    resolved_at: Option<i64>,
    consumed_at: Option<i64>,
    action: Option<String>,
    preview: Option<String>,
}

const COLUMNS: &str = "id, tenant, invocation_id, run_id, tool, args_digest, call_digest, \
    policy_version, decision_id, requested_by, status, created_at, expires_at, resolved_by, reason, \
    resolved_at, consumed_at, action, preview";

impl ApprovalRow {
    fn into_approval(self, now: i64) -> Result<Approval> {
        let mut status: ApprovalStatus = self
            .status
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("approval status {:?}", self.status)))?;
        if status == ApprovalStatus::Pending && self.expires_at <= now {
            status = ApprovalStatus::Expired;
        }
        Ok(Approval {
            status,
            created_at: ts_from_ms(self.created_at)?,
            expires_at: ts_from_ms(self.expires_at)?,
            resolved_at: opt_ts_from_ms(self.resolved_at)?,
            consumed_at: opt_ts_from_ms(self.consumed_at)?,
            id: self.id,
            tenant: self.tenant,
            invocation_id: self.invocation_id,
            run_id: self.run_id,
            tool: self.tool,
            args_digest: self.args_digest,
            call_digest: self.call_digest,
            policy_version: self.policy_version,
            decision_id: self.decision_id,
            requested_by: self.requested_by,
            resolved_by: self.resolved_by,
            reason: self.reason,
            action: self.action,
            preview: self.preview,
        })
    }
}

#[derive(sqlx::FromRow)]
struct RunEventRow {
    id: i64,
    tenant: String,
    run_id: String,
    kind: String,
    subject_id: String,
    payload: String,
    created_at: i64,
}

const INSERT_EVENT: &str = "INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, \
    created_at) VALUES ($1, $2, $3, $4, $5, $6)";

/// Approval operations. Obtain with [`Store::approvals`].
#[derive(Debug, Clone, Copy)]
pub struct Approvals<'a> {
    pub(crate) store: &'a Store,
}

impl Approvals<'_> {
    /// Records a pending approval and its `approval.requested` run event in
    /// one transaction. Idempotent per `(tenant, invocation_id)`: a repeat
    /// returns the existing approval (in whatever state it is now), or
    /// `conflict` if the repeat names a different tool, digest, policy
    /// version or run.
    pub async fn request(&self, new: NewApproval) -> Result<Approval> {
        require_opt("approval_id", new.approval_id.as_deref())?;
        require("invocation_id", &new.invocation_id)?;
        require("tenant", &new.tenant)?;
        require("run_id", &new.run_id)?;
        require("tool", &new.tool)?;
        require("args_digest", &new.args_digest)?;
        require_opt("call_digest", new.call_digest.as_deref())?;
        require("policy_version", &new.policy_version)?;
        require("decision_id", &new.decision_id)?;
        require("requested_by", &new.requested_by)?;
        require_opt("action", new.action.as_deref())?;
        if let Some(preview) = &new.preview
            && preview.chars().count() > MAX_PREVIEW_CHARS
        {
            return Err(StoreError::InvalidInput(format!(
                "preview is longer than {MAX_PREVIEW_CHARS} characters"
            )));
        }
        self.store.check_file()?;
        if new.ttl.is_zero() || new.ttl > MAX_TTL {
            return Err(StoreError::InvalidInput(
                "ttl must be positive and at most 30 days".into(),
            ));
        }
        let now = now_ms();
        let expires_at = now + duration_ms(new.ttl, "ttl")?;
        let id = new.approval_id.clone().unwrap_or_else(new_id);
        let payload = serde_json::json!({
            "approval_id": id,
            "invocation_id": new.invocation_id,
            "tool": new.tool,
            "args_digest": new.args_digest,
            "call_digest": new.call_digest,
            "policy_version": new.policy_version,
            "decision_id": new.decision_id,
            "requested_by": new.requested_by,
            "expires_at": expires_at,
            "action": new.action,
            "preview": new.preview,
        })
        .to_string();
        // `status` is left to its default, 'pending': on PostgreSQL a tenant
        // role may not write it (nor any resolution column).
        let insert = "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, \
            args_digest, call_digest, policy_version, decision_id, requested_by, \
            created_at, expires_at, action, preview) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
            ON CONFLICT (tenant, invocation_id) DO NOTHING";
        let select =
            format!("SELECT {COLUMNS} FROM approvals WHERE tenant = $1 AND invocation_id = $2");
        let row: ApprovalRow = on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            let inserted = sqlx::query(insert)
                .bind(&id)
                .bind(&new.tenant)
                .bind(&new.invocation_id)
                .bind(&new.run_id)
                .bind(&new.tool)
                .bind(&new.args_digest)
                .bind(&new.call_digest)
                .bind(&new.policy_version)
                .bind(&new.decision_id)
                .bind(&new.requested_by)
                .bind(now)
                .bind(expires_at)
                .bind(&new.action)
                .bind(&new.preview)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if inserted == 1 {
                sqlx::query(INSERT_EVENT)
                    .bind(&new.tenant)
                    .bind(&new.run_id)
                    .bind("approval.requested")
                    .bind(&id)
                    .bind(&payload)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
            let row: ApprovalRow = sqlx::query_as(&select)
                .bind(&new.tenant)
                .bind(&new.invocation_id)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            row
        });
        if row.tool != new.tool
            || row.args_digest != new.args_digest
            || row.call_digest != new.call_digest
            || row.policy_version != new.policy_version
            || row.run_id != new.run_id
        {
            return Err(StoreError::Conflict(format!(
                "invocation {} already has approval {} for a different call",
                new.invocation_id, row.id
            )));
        }
        row.into_approval(now)
    }

    /// Fetches one approval of `tenant`; another tenant's id is `not_found`.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Approval> {
        require("tenant", tenant)?;
        require("id", id)?;
        self.fetch(tenant, id)
            .await?
            .ok_or_else(|| StoreError::not_found("approval", id))?
            .into_approval(now_ms())
    }

    async fn fetch(&self, tenant: &str, id: &str) -> Result<Option<ApprovalRow>> {
        let sql = format!("SELECT {COLUMNS} FROM approvals WHERE tenant = $1 AND id = $2");
        Ok(on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(id).fetch_optional(pool).await?
        }))
    }

    /// Lists `tenant`'s approvals, oldest first, optionally only those whose
    /// effective status is `status`.
    pub async fn list(
        &self,
        tenant: &str,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<Approval>> {
        require("tenant", tenant)?;
        self.list_where(Some(tenant), status).await
    }

    /// Lists every tenant's approvals, for the controller's mirror into
    /// Approval resources. Not for tenant-facing APIs.
    pub async fn list_all(&self, status: Option<ApprovalStatus>) -> Result<Vec<Approval>> {
        self.list_where(None, status).await
    }

    async fn list_where(
        &self,
        tenant: Option<&str>,
        status: Option<ApprovalStatus>,
    ) -> Result<Vec<Approval>> {
        let now = now_ms();
        // The effective status applies lazy expiry, so a filter on `expired`
        // also finds pending rows whose time is up and `pending` excludes them.
        let effective = "(CASE WHEN status = 'pending' AND expires_at <= $3 \
            THEN 'expired' ELSE status END)";
        let sql = match tenant {
            Some(_) => format!(
                "SELECT {COLUMNS} FROM approvals WHERE tenant = $1 \
                 AND ($2 IS NULL OR {effective} = $2) ORDER BY created_at, id"
            ),
            None => format!(
                "SELECT {COLUMNS} FROM approvals WHERE ($1 IS NULL OR tenant = $1) \
                 AND ($2 IS NULL OR {effective} = $2) ORDER BY created_at, id"
            ),
        };
        let status = status.map(ApprovalStatus::as_str);
        let rows: Vec<ApprovalRow> = on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(status).bind(now).fetch_all(pool).await?
        });
        rows.into_iter().map(|r| r.into_approval(now)).collect()
    }

    /// Resolves a pending approval. Resolving again with the same decision
    /// returns the row unchanged; the opposite decision is `conflict`; a
    /// pending approval past its expiry is `approval_expired` (and is marked
    /// expired). The `approval.resolved` event and, on PostgreSQL, the wake-up
    /// notification commit in the same transaction as the state change.
    pub async fn resolve(
        &self,
        tenant: &str,
        id: &str,
        decision: ApprovalDecision,
        by: &str,
        reason: Option<&str>,
    ) -> Result<Approval> {
        require("tenant", tenant)?;
        require("id", id)?;
        require("by", by)?;
        if reason.is_some_and(|r| r.len() > 16 * 1024) {
            return Err(StoreError::InvalidInput("reason exceeds 16 KiB".into()));
        }
        let now = now_ms();
        let is_pg = self.store.is_postgres();
        let update = "UPDATE approvals SET status = $3, resolved_by = $4, reason = $5, \
            resolved_at = $6 WHERE tenant = $1 AND id = $2 AND status = 'pending' \
            AND expires_at > $6 RETURNING run_id";
        let expire = "UPDATE approvals SET status = 'expired', resolved_at = $3 \
            WHERE tenant = $1 AND id = $2 AND status = 'pending' AND expires_at <= $3 \
            RETURNING run_id";
        let payload = serde_json::json!({
            "approval_id": id,
            "decision": decision.as_str(),
            "resolved_by": by,
            "reason": reason,
        })
        .to_string();
        let select = format!("SELECT {COLUMNS} FROM approvals WHERE tenant = $1 AND id = $2");
        let row: Option<ApprovalRow> = on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            let run_id: Option<String> = sqlx::query_scalar(update)
                .bind(tenant)
                .bind(id)
                .bind(decision.as_str())
                .bind(by)
                .bind(reason)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            let (run_id, kind, payload) = match run_id {
                Some(run_id) => (Some(run_id), "approval.resolved", payload),
                None => {
                    let expired: Option<String> = sqlx::query_scalar(expire)
                        .bind(tenant)
                        .bind(id)
                        .bind(now)
                        .fetch_optional(&mut *tx)
                        .await?;
                    (expired, "approval.expired", serde_json::json!({"approval_id": id}).to_string())
                }
            };
            if let Some(run_id) = &run_id {
                sqlx::query(INSERT_EVENT)
                    .bind(tenant)
                    .bind(run_id)
                    .bind(kind)
                    .bind(id)
                    .bind(&payload)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                if is_pg {
                    sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(CHANNEL)
                        .bind(format!("{tenant}/{id}"))
                        .execute(&mut *tx)
                        .await?;
                }
            }
            let row: Option<ApprovalRow> = sqlx::query_as(&select)
                .bind(tenant)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
            tx.commit().await?;
            row
        });
        let approval = row
            .ok_or_else(|| StoreError::not_found("approval", id))?
            .into_approval(now)?;
        match approval.status {
            s if s == ApprovalStatus::from(decision) => Ok(approval),
            ApprovalStatus::Expired => Err(StoreError::ApprovalExpired { id: id.to_owned() }),
            other => Err(StoreError::Conflict(format!(
                "approval {id} is already {other}, cannot record {}",
                decision.as_str()
            ))),
        }
    }

    /// Sweeps every pending approval whose expiry is at or before `now` to
    /// `expired`, writing an `approval.expired` event for each, in one
    /// transaction. Returns how many were expired.
    pub async fn expire(&self, now: Timestamp) -> Result<u64> {
        let now = now.as_millisecond();
        let is_pg = self.store.is_postgres();
        let sweep = "UPDATE approvals SET status = 'expired', resolved_at = $1 \
            WHERE status = 'pending' AND expires_at <= $1 RETURNING tenant, id, run_id";
        let count = on_pool!(self.store, pool => {
            let mut tx = pool.begin_write().await?;
            let swept: Vec<(String, String, String)> =
                sqlx::query_as(sweep).bind(now).fetch_all(&mut *tx).await?;
            for (tenant, id, run_id) in &swept {
                sqlx::query(INSERT_EVENT)
                    .bind(tenant)
                    .bind(run_id)
                    .bind("approval.expired")
                    .bind(id)
                    .bind(serde_json::json!({"approval_id": id}).to_string())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                if is_pg {
                    sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(CHANNEL)
                        .bind(format!("{tenant}/{id}"))
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
            swept.len() as u64
        });
        Ok(count)
    }

    /// Uses an approved approval's single re-authorization. Returns `true` for
    /// exactly one caller; `false` if it is not approved, already used,
    /// expired, or the call differs in tool, argument or call digest, or
    /// policy version. `not_found` if no such approval exists for `tenant`.
    pub async fn consume(&self, tenant: &str, id: &str, call: &ApprovedCall<'_>) -> Result<bool> {
        require("tenant", tenant)?;
        require("id", id)?;
        self.store.check_file()?;
        let now = now_ms();
        let sql = "UPDATE approvals SET consumed_at = $7 WHERE tenant = $1 AND id = $2 \
            AND status = 'approved' AND consumed_at IS NULL AND tool = $3 \
            AND args_digest = $4 AND call_digest = $5 AND policy_version = $6 \
            AND expires_at > $7";
        let changed = on_pool!(self.store, pool => {
            sqlx::query(sql)
                .bind(tenant)
                .bind(id)
                .bind(call.tool)
                .bind(call.args_digest)
                .bind(call.call_digest)
                .bind(call.policy_version)
                .bind(now)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if changed == 1 {
            return Ok(true);
        }
        match self.fetch(tenant, id).await? {
            Some(_) => Ok(false),
            None => Err(StoreError::not_found("approval", id)),
        }
    }

    /// Waits until the approval leaves `pending` (resolved or expired) or
    /// `deadline` elapses, and returns its state at that moment. Uses
    /// LISTEN/NOTIFY on PostgreSQL (re-reading at least every second as a
    /// safety net) and 50 ms polling on SQLite; holds no transaction while
    /// waiting. On PostgreSQL all waiters of one store share a single
    /// listening connection and borrow a pooled one only to re-read the row,
    /// so many waiters never starve other queries of connections.
    pub async fn wait(&self, tenant: &str, id: &str, deadline: Duration) -> Result<Approval> {
        require("tenant", tenant)?;
        require("id", id)?;
        let until = tokio::time::Instant::now() + deadline;
        match &self.store.backend {
            crate::Backend::Postgres(pool) => {
                // Subscribe before the first read so a resolution between the
                // read and the subscription cannot be missed.
                let mut wakeups = self.store.wakeups.subscribe(pool, CHANNEL).await;
                let wanted = format!("{tenant}/{id}");
                loop {
                    let approval = self.get(tenant, id).await?;
                    let now = tokio::time::Instant::now();
                    if approval.status != ApprovalStatus::Pending || now >= until {
                        return Ok(approval);
                    }
                    let step = wake_at(until, &approval, PG_RECHECK);
                    match wakeups.as_mut() {
                        Some(rx) => {
                            let _ = tokio::time::timeout_at(step, async {
                                loop {
                                    match rx.recv().await {
                                        Ok(payload) if *payload == *wanted => break,
                                        Ok(_) => continue,
                                        // Missed some: re-read now.
                                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                                        // Store closing: re-read on the timer.
                                        Err(broadcast::error::RecvError::Closed) => {
                                            tokio::time::sleep_until(step).await;
                                            break;
                                        }
                                    }
                                }
                            })
                            .await;
                        }
                        None => tokio::time::sleep_until(step).await,
                    }
                }
            }
            crate::Backend::Sqlite(_) => loop {
                let approval = self.get(tenant, id).await?;
                let now = tokio::time::Instant::now();
                if approval.status != ApprovalStatus::Pending || now >= until {
                    return Ok(approval);
                }
                tokio::time::sleep_until(wake_at(until, &approval, SQLITE_POLL)).await;
            },
        }
    }

    /// Run events for `tenant`'s run, oldest first.
    pub async fn run_events(&self, tenant: &str, run_id: &str) -> Result<Vec<RunEvent>> {
        require("tenant", tenant)?;
        require("run_id", run_id)?;
        let sql = "SELECT id, tenant, run_id, kind, subject_id, payload, created_at \
            FROM run_events WHERE tenant = $1 AND run_id = $2 ORDER BY id";
        let rows: Vec<RunEventRow> = on_pool!(self.store, pool => {
            sqlx::query_as(sql).bind(tenant).bind(run_id).fetch_all(pool).await?
        });
        rows.into_iter()
            .map(|r| {
                Ok(RunEvent {
                    payload: crate::parse_json(&r.payload, "run event payload")?,
                    created_at: ts_from_ms(r.created_at)?,
                    id: r.id,
                    tenant: r.tenant,
                    run_id: r.run_id,
                    kind: r.kind,
                    subject_id: r.subject_id,
                })
            })
            .collect()
    }
}

/// Next instant to re-read: the earliest of the caller's deadline, the
/// approval's own expiry, and one recheck interval from now.
fn wake_at(
    until: tokio::time::Instant,
    approval: &Approval,
    interval: Duration,
) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let mut at = until.min(now + interval);
    let to_expiry = approval.expires_at.as_millisecond() - now_ms();
    if to_expiry >= 0 {
        // +1ms so the re-read happens strictly after expiry.
        at = at.min(now + Duration::from_millis(to_expiry as u64 + 1));
    }
    at
}
