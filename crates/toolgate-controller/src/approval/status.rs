//! Approval status and lifecycle, pure: the object mirroring a database
//! row, the status of requests and grants, and when a finished object may
//! go.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::approvers::decider_text;
use super::{APPROVER_NOT_ALLOWED, LABEL_KIND, approval_name, decider_allowed};
use crate::crd::{
    Approval, ApprovalRequest, ApprovalSpec, ApprovalStatus, Decision, Phase, PolicyProfile,
    StandingGrant,
};

/// The profile a policy version belongs to (`{profile}@…`).
pub fn profile_of(policy_version: &str) -> Option<String> {
    policy_version
        .split_once('@')
        .map(|(p, _)| p.to_owned())
        .filter(|p| !p.is_empty())
}

/// The `Approval` object mirroring a database row.
pub fn object_for(row: &toolgate_store::Approval, namespace: &str) -> Approval {
    let profile = profile_of(&row.policy_version);
    let mut obj = Approval::new(
        &approval_name(&row.id),
        ApprovalSpec {
            request: Some(ApprovalRequest {
                approval_id: row.id.clone(),
                tenant: row.tenant.clone(),
                invocation_id: row.invocation_id.clone(),
                tool: row.tool.clone(),
                args_digest: row.args_digest.clone(),
                call_digest: row.call_digest.clone(),
                action: row.action.clone(),
                preview: row.preview.clone(),
                run_id: row.run_id.clone(),
                policy_version: row.policy_version.clone(),
                profile: profile.clone(),
                requested_by: Some(row.requested_by.clone()),
                escalation: None,
            }),
            grant: None,
            decision: None,
            reason: None,
            decided_by: None,
            decided_by_groups: None,
        },
    );
    obj.metadata = ObjectMeta {
        name: Some(approval_name(&row.id)),
        namespace: Some(namespace.to_owned()),
        labels: Some(BTreeMap::from([
            (LABEL_KIND.to_owned(), "request".to_owned()),
            (
                toolgate_k8s::names::LABEL_MANAGED_BY.to_owned(),
                crate::MANAGER.to_owned(),
            ),
        ])),
        ..Default::default()
    };
    obj
}

/// The first field of `req` (camelCase, as in the object) that does not
/// show `row` as [`object_for`] would; `None` when the request mirrors the
/// row. The escalation is not compared: it comes from the decision log.
pub fn request_mismatch(
    req: &ApprovalRequest,
    row: &toolgate_store::Approval,
) -> Option<&'static str> {
    let checks: [(&'static str, bool); 12] = [
        ("approvalId", req.approval_id == row.id),
        ("tenant", req.tenant == row.tenant),
        ("invocationId", req.invocation_id == row.invocation_id),
        ("tool", req.tool == row.tool),
        ("argsDigest", req.args_digest == row.args_digest),
        ("callDigest", req.call_digest == row.call_digest),
        ("action", req.action == row.action),
        ("preview", req.preview == row.preview),
        ("runId", req.run_id == row.run_id),
        ("policyVersion", req.policy_version == row.policy_version),
        (
            "profile",
            req.profile.is_none() || req.profile == profile_of(&row.policy_version),
        ),
        (
            "requestedBy",
            req.requested_by
                .as_deref()
                .is_none_or(|by| by == row.requested_by),
        ),
    ];
    checks
        .iter()
        .find(|(_, same)| !same)
        .map(|(field, _)| *field)
}

/// Status of a request object given its database row.
pub fn request_status(
    req: &ApprovalRequest,
    row: Option<&toolgate_store::Approval>,
    phase: Phase,
    message: Option<String>,
    generation: Option<i64>,
) -> ApprovalStatus {
    ApprovalStatus {
        phase: Some(phase),
        tool: Some(req.tool.clone()),
        requested_by: row
            .map(|r| r.requested_by.clone())
            .or_else(|| req.requested_by.clone())
            .or_else(|| Some(req.tenant.clone())),
        profile: req
            .profile
            .clone()
            .or_else(|| profile_of(&req.policy_version)),
        expires_at: row.map(|r| r.expires_at.to_string()),
        finished_at: None,
        message,
        observed_generation: generation,
    }
}

/// Phase and status of a standing grant at `now`. `approvers` is the
/// `spec.approvals.approvers` list of the grant's profile (`None` when the
/// profile does not exist): an approved grant whose decider is not allowed
/// stays `Pending` and is never compiled in (see [`decider_allowed`]).
pub fn grant_status(
    spec: &ApprovalSpec,
    grant: &StandingGrant,
    approvers: Option<&[String]>,
    now: Timestamp,
    generation: Option<i64>,
) -> ApprovalStatus {
    let refused = match (spec.decision, approvers) {
        (Some(Decision::Approved), None) => Some(format!(
            "{APPROVER_NOT_ALLOWED}: PolicyProfile {} not found, so its approvers cannot be \
             checked; the grant is not compiled in",
            grant.profile
        )),
        (Some(Decision::Approved), Some(list)) if !decider_allowed(list, spec) => Some(format!(
            "{APPROVER_NOT_ALLOWED}: {} is not in spec.approvals.approvers of PolicyProfile {} \
             ({}); the grant is not compiled in",
            decider_text(spec),
            grant.profile,
            list.join(", ")
        )),
        _ => None,
    };
    let (phase, message) = match (spec.decision, grant.expires_at.parse::<Timestamp>()) {
        (_, Err(e)) => (
            Phase::Pending,
            Some(format!(
                "spec.grant.expiresAt is not an RFC 3339 instant: {e}"
            )),
        ),
        (_, Ok(expiry)) if expiry <= now => {
            (Phase::Expired, Some(format!("grant expired at {expiry}")))
        }
        (None, Ok(_)) => (Phase::Pending, Some("waiting for spec.decision".into())),
        (Some(Decision::Approved), Ok(_)) if refused.is_some() => (Phase::Pending, refused),
        (Some(Decision::Denied), Ok(_)) => (Phase::Denied, None),
        (Some(Decision::Approved), Ok(_)) => (
            Phase::Approved,
            Some(format!(
                "compiled into the next bundle of profile {}",
                grant.profile
            )),
        ),
    };
    ApprovalStatus {
        phase: Some(phase),
        tool: Some(grant.tool.clone()),
        requested_by: spec.decided_by.clone(),
        profile: Some(grant.profile.clone()),
        expires_at: Some(grant.expires_at.clone()),
        finished_at: None,
        message,
        observed_generation: generation,
    }
}

/// Sets `finished_at` once a status leaves `Pending` (keeping the first
/// instant), and clears it while pending.
pub(crate) fn stamp_finished(status: &mut ApprovalStatus, previous: Option<&str>, now: Timestamp) {
    status.finished_at = match status.phase {
        Some(Phase::Approved | Phase::Denied | Phase::Expired | Phase::Cancelled) => {
            Some(previous.map_or_else(|| now.to_string(), str::to_owned))
        }
        _ => None,
    };
}

/// How long an Approval object is kept once finished: the
/// `spec.approvals.retentionSeconds` of its profile among `profiles` (the
/// grant's own namespace for grants; for requests, the longest among
/// profiles of that name), else the default.
pub fn retention_of(obj: &Approval, profiles: &[Arc<PolicyProfile>]) -> Duration {
    let default = u64::from(toolgate_policy::model::ApprovalSettings::DEFAULT_RETENTION_SECONDS);
    let name = obj.status.as_ref().and_then(|s| s.profile.as_deref());
    let grant_ns = obj.spec.grant.as_ref().and(obj.namespace());
    let seconds = profiles
        .iter()
        .filter(|p| Some(p.name_any().as_str()) == name)
        .filter(|p| grant_ns.is_none() || p.namespace() == grant_ns)
        .map(|p| {
            p.spec
                .approvals
                .as_ref()
                .and_then(|a| a.retention_seconds)
                .map_or(default, u64::from)
        })
        .max()
        .unwrap_or(default);
    Duration::from_secs(seconds)
}

/// Whether a finished Approval object is past its retention at `now`.
pub fn past_retention(obj: &Approval, profiles: &[Arc<PolicyProfile>], now: Timestamp) -> bool {
    let Some(finished) = obj
        .status
        .as_ref()
        .filter(|s| {
            matches!(
                s.phase,
                Some(Phase::Approved | Phase::Denied | Phase::Expired | Phase::Cancelled)
            )
        })
        .and_then(|s| s.finished_at.as_deref())
        .and_then(|f| f.parse::<Timestamp>().ok())
    else {
        return false;
    };
    let retention = jiff::SignedDuration::try_from(retention_of(obj, profiles))
        .unwrap_or(jiff::SignedDuration::MAX);
    finished
        .checked_add(retention)
        .is_ok_and(|until| until <= now)
}

/// Approvals still `Pending` after their `expiresAt`: nobody answered within
/// the TTL and the controller has not expired them yet (it should within
/// one sync), so a lasting non-zero count means expiry is stuck.
pub(crate) fn overdue_pending<'a>(
    objects: impl IntoIterator<Item = &'a Approval>,
    now: Timestamp,
) -> i64 {
    let overdue = objects
        .into_iter()
        .filter_map(|o| o.status.as_ref())
        .filter(|s| s.phase == Some(Phase::Pending))
        .filter_map(|s| s.expires_at.as_deref()?.parse::<Timestamp>().ok())
        .filter(|expires| *expires < now)
        .count();
    i64::try_from(overdue).unwrap_or(i64::MAX)
}

/// Which profile an Approval change should re-reconcile (the mapper of the
/// PolicyProfile controller's Approval watch): the grant's profile.
pub fn grant_profile_ref(
    a: &Approval,
) -> Option<kube::runtime::reflector::ObjectRef<crate::crd::PolicyProfile>> {
    let grant = a.spec.grant.as_ref()?;
    let ns = a.namespace()?;
    Some(kube::runtime::reflector::ObjectRef::new(&grant.profile).within(&ns))
}
