//! Approval state changes. Each takes the caller's `now`: it is the
//! request time, the resolution time, and the instant lazy expiry is judged
//! at.

use jiff::Timestamp;

use super::{
    Approval, ApprovalDecision, ApprovalRow, ApprovalStatus, Approvals, ApprovedCall, COLUMNS,
    INSERT_EVENT, MAX_PREVIEW_CHARS, MAX_TTL, NewApproval, RunEvent, RunEventRow,
};
use crate::{
    BeginWrite, Result, StoreError, duration_ms, new_id, on_pool, require, require_opt, ts_from_ms,
};

/// Writes one run event about approval `$id` inside `$tx` and, on
/// PostgreSQL, the wake-up notification for its waiters, so both commit
/// with the state change they describe.
macro_rules! event_in {
    ($tx:expr, $is_pg:expr, $tenant:expr, $run_id:expr, $kind:expr, $id:expr, $payload:expr, $now:expr) => {{
        sqlx::query(INSERT_EVENT)
            .bind($tenant)
            .bind($run_id)
            .bind($kind)
            .bind($id)
            .bind($payload)
            .bind($now)
            .execute(&mut *$tx)
            .await?;
        if $is_pg {
            // The tenant's own channel (migration 0012); tenant roles send none.
            sqlx::query("SELECT toolgate_notify_approval($1, $2)")
                .bind($tenant)
                .bind(format!("{}/{}", $tenant, $id))
                .execute(&mut *$tx)
                .await?;
        }
    }};
}

impl Approvals<'_> {
    /// Records a pending approval and its `approval.requested` run event in
    /// one transaction. Idempotent per `(tenant, invocation_id)`: a repeat
    /// returns the existing approval (in whatever state it is now), or
    /// `conflict` if the repeat names a different tool, digest, policy
    /// version or run.
    pub async fn request(&self, new: NewApproval, now: Timestamp) -> Result<Approval> {
        require_opt("approval_id", new.approval_id.as_deref())?;
        require("invocation_id", &new.invocation_id)?;
        require("tenant", &new.tenant)?;
        crate::require_run_id(&new.run_id)?;
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
        let now = now.as_millisecond();
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
                // Nobody waits on a new request: no notification.
                event_in!(tx, false, &new.tenant, &new.run_id, "approval.requested", &id, &payload, now);
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

    /// Fetches one approval of `tenant`, its status as of `now` (lazy
    /// expiry); another tenant's id is `not_found`.
    pub async fn get(&self, tenant: &str, id: &str, now: Timestamp) -> Result<Approval> {
        require("tenant", tenant)?;
        require("id", id)?;
        self.fetch(tenant, id)
            .await?
            .ok_or_else(|| StoreError::not_found("approval", id))?
            .into_approval(now.as_millisecond())
    }

    /// The tenant owning approval `id` (ids are unique across tenants), for
    /// operators answering an approval by id alone. Reads only the tenant
    /// column, so no row whose times do not read back (this one or any
    /// other tenant's) stops the look-up. Not for tenant-facing APIs.
    pub async fn tenant_of(&self, id: &str) -> Result<String> {
        require("id", id)?;
        let sql = "SELECT tenant FROM approvals WHERE id = $1";
        let tenant: Option<String> = on_pool!(self.store, pool => {
            sqlx::query_scalar(sql).bind(id).fetch_optional(pool).await?
        });
        tenant.ok_or_else(|| StoreError::not_found("approval", id))
    }

    async fn fetch(&self, tenant: &str, id: &str) -> Result<Option<ApprovalRow>> {
        let sql = format!("SELECT {COLUMNS} FROM approvals WHERE tenant = $1 AND id = $2");
        Ok(on_pool!(self.store, pool => {
            sqlx::query_as(&sql).bind(tenant).bind(id).fetch_optional(pool).await?
        }))
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
        now: Timestamp,
    ) -> Result<Approval> {
        require("tenant", tenant)?;
        require("id", id)?;
        require("by", by)?;
        if reason.is_some_and(|r| r.len() > 16 * 1024) {
            return Err(StoreError::InvalidInput("reason exceeds 16 KiB".into()));
        }
        let now = now.as_millisecond();
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
                event_in!(tx, is_pg, tenant, run_id, kind, id, &payload, now);
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
                let payload = serde_json::json!({"approval_id": id}).to_string();
                event_in!(tx, is_pg, tenant, run_id, "approval.expired", id, &payload, now);
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
    pub async fn consume(
        &self,
        tenant: &str,
        id: &str,
        call: &ApprovedCall<'_>,
        now: Timestamp,
    ) -> Result<bool> {
        require("tenant", tenant)?;
        require("id", id)?;
        self.store.check_file()?;
        let now = now.as_millisecond();
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
