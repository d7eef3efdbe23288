//! Escalations: a call is asked about only when it could pass (its run is
//! not stopped and its budget could pay for it: the run book's answer),
//! and an approved, unused approval for exactly this call lets it through
//! once.

use std::time::Duration;

use jiff::Timestamp;
use toolgate_policy::{Id, Reason, Verdict};
use toolgate_store::{ApprovalStatus, ApprovedCall, NewApproval};

use crate::shared::Shared;
use crate::{AuthorizeRequest, Enforced, GateError, MAX_APPROVAL_ROUNDS};

/// Finds or creates the approval for an escalated call. An approved,
/// unused approval for exactly this call turns the verdict into `approved`.
pub(crate) async fn escalate(
    app: &Shared,
    enforced: &Enforced,
    req: &AuthorizeRequest,
    step_id: &str,
    decision_id: &str,
    verdict: &mut Verdict,
    now: Timestamp,
) -> Result<Option<String>, GateError> {
    let tool = enforced.policy.canonical_tool(&req.tool).to_owned();
    let base = toolgate_policy::invocation_digest(
        &app.tenant,
        req.run_id.as_str(),
        step_id,
        &verdict.call_digest,
        &verdict.policy_version,
        req.definition_digest.as_deref(),
    );
    // What the approver is shown: the text the rules matched, masked.
    let preview = enforced.policy.preview(&req.call());
    for round in 0..MAX_APPROVAL_ROUNDS {
        let approval = app
            .store
            .approvals()
            .request(
                NewApproval {
                    approval_id: None,
                    invocation_id: format!("{base}:{round}"),
                    tenant: app.tenant.clone(),
                    run_id: req.run_id.as_str().to_owned(),
                    tool: tool.clone(),
                    args_digest: verdict.args_digest.clone(),
                    call_digest: Some(verdict.call_digest.clone()),
                    policy_version: verdict.policy_version.clone(),
                    decision_id: decision_id.to_owned(),
                    requested_by: app.identity.clone(),
                    ttl: Duration::from_secs(u64::from(enforced.approval_ttl_seconds)),
                    action: req.action.as_ref().map(Id::to_string),
                    preview: preview.clone(),
                },
                now,
            )
            .await?;
        if approval.consumed_at.is_some() || approval.status == ApprovalStatus::Expired {
            continue; // used or lapsed: this call needs a fresh approval
        }
        match approval.status {
            ApprovalStatus::Pending => return Ok(Some(approval.id)),
            ApprovalStatus::Denied => {
                verdict.set_reason(Reason::ApprovalDenied);
                verdict.matched_rule = Some(format!("approval:{}", approval.id));
                return Ok(Some(approval.id));
            }
            ApprovalStatus::Approved => {
                let consumed = app
                    .store
                    .approvals()
                    .consume(
                        &app.tenant,
                        &approval.id,
                        &ApprovedCall {
                            tool: &tool,
                            args_digest: &verdict.args_digest,
                            call_digest: &verdict.call_digest,
                            policy_version: &verdict.policy_version,
                        },
                        now,
                    )
                    .await?;
                if consumed {
                    verdict.set_reason(Reason::Approved);
                    verdict.matched_rule = Some(format!("approval:{}", approval.id));
                    return Ok(Some(approval.id));
                }
                // Someone else used it first: ask again.
            }
            ApprovalStatus::Expired => {}
            ApprovalStatus::Cancelled => {
                verdict.set_reason(Reason::RunCancelled);
                verdict.matched_rule = Some(format!("approval:{}", approval.id));
                return Ok(Some(approval.id));
            }
        }
    }
    verdict.set_reason(Reason::ApprovalDenied);
    Ok(None)
}
