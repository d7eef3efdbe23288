//! Who may answer: a profile's `spec.approvals.approvers` against the
//! decider recorded on an Approval.

use kube::api::Api;

use super::profile_of;
use crate::context::Context;
use crate::crd::{Approval, ApprovalSpec, PolicyProfile};
use crate::error::ControllerError;

/// Reason (and message prefix) when a decision is not recorded because of
/// the profile's approvers list.
pub const APPROVER_NOT_ALLOWED: &str = "ApproverNotAllowed";

pub use toolgate_k8s::{Approver, approver_allowed};

/// [`approver_allowed`] for the decider recorded on an Approval.
pub fn decider_allowed(approvers: &[String], spec: &ApprovalSpec) -> bool {
    approver_allowed(
        approvers,
        spec.decided_by.as_deref(),
        spec.decided_by_groups.as_deref().unwrap_or_default(),
    )
}

/// The decider of an Approval in words, for status messages.
pub(super) fn decider_text(spec: &ApprovalSpec) -> String {
    match (&spec.decided_by, &spec.decided_by_groups) {
        (None, _) => "an unset spec.decidedBy".to_owned(),
        (Some(by), Some(groups)) if !groups.is_empty() => {
            format!("`{by}` (groups {})", groups.join(", "))
        }
        (Some(by), _) => format!("`{by}`"),
    }
}

/// What the approvers check says about one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApproverCheck {
    /// The decision may be recorded.
    Allowed,
    /// Not recorded; the status message (starts with [`APPROVER_NOT_ALLOWED`]).
    Refused(String),
}

/// Checks `obj.spec.decidedBy` against the approvers of the profile that
/// escalated `row`: PolicyProfile `{name}` (the prefix of the row's policy
/// version) in the row's own tenant, the namespace of the pod that asked.
/// Nothing else counts: not the namespace the Approval object is mirrored
/// into, and not the `policy_profiles` rows, which any tenant can write for
/// any version (the example profiles carry the same version in every
/// namespace), so one tenant's rows could make its approvers decide another
/// tenant's escalations, or veto them. Fails closed: a row whose policy
/// version names no profile, whose tenant is no namespace name, or whose
/// profile is not found, is refused. `decidedBy` is self-asserted unless an
/// admission webhook pins it.
pub async fn check_approvers(
    ctx: &Context,
    obj: &Approval,
    row: &toolgate_store::Approval,
) -> Result<ApproverCheck, ControllerError> {
    let who = decider_text(&obj.spec);
    let Some(name) = profile_of(&row.policy_version) else {
        return Ok(ApproverCheck::Refused(format!(
            "{APPROVER_NOT_ALLOWED}: policy version `{}` names no profile, so its approvers \
             cannot be checked; the decision was not recorded",
            row.policy_version
        )));
    };
    let ns = row.tenant.as_str();
    if toolgate_store::tenancy::validate_tenant(ns).is_err() {
        return Ok(ApproverCheck::Refused(format!(
            "{APPROVER_NOT_ALLOWED}: tenant `{ns}` is not a namespace, so the approvers of its \
             PolicyProfile {name} cannot be checked; the decision was not recorded"
        )));
    }
    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), ns);
    let Some(profile) = api.get_opt(&name).await? else {
        return Ok(ApproverCheck::Refused(format!(
            "{APPROVER_NOT_ALLOWED}: PolicyProfile {ns}/{name} not found, so its approvers \
             cannot be checked; the decision was not recorded"
        )));
    };
    let approvers = profile
        .spec
        .approvals
        .as_ref()
        .map(|a| a.approvers.as_slice())
        .unwrap_or_default();
    if !decider_allowed(approvers, &obj.spec) {
        return Ok(ApproverCheck::Refused(format!(
            "{APPROVER_NOT_ALLOWED}: {who} is not in spec.approvals.approvers of \
             PolicyProfile {ns}/{name} ({}); the decision was not recorded",
            approvers.join(", ")
        )));
    }
    Ok(ApproverCheck::Allowed)
}
