//! Durable approvals for escalated calls.
//!
//! An approval answers exactly one call: its tool, its argument digest and
//! its policy version, once, before its expiry. Requests are idempotent per
//! `(tenant, invocation_id)`; every state change commits together with its
//! run event, and resolution is idempotent for the same answer.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{Result, Store, StoreError, opt_ts_from_ms, ts_from_ms};

mod list;
mod ops;
mod wait;

pub use list::{ApprovalListing, UnreadableApproval};

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

/// The approval status and a human's answer: the contract's one set,
/// shared with the CRD, the sidecar, the gateway and the hook.
pub use toolgate_contract::{ApprovalDecision, ApprovalStatus};

/// One approval row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub created_at: Timestamp,
    /// When it stops being answerable.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub expires_at: Timestamp,
    /// Who resolved it.
    pub resolved_by: Option<String>,
    /// Why, in the resolver's words.
    pub reason: Option<String>,
    /// When it was resolved or swept to expired.
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub resolved_at: Option<Timestamp>,
    /// When the single re-authorization it grants was used.
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
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
