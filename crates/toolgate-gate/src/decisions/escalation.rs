//! Escalations: a call is asked about only when it could pass (its run is
//! not stopped and its budget could pay for it), and an approved, unused
//! approval for exactly this call lets it through once.

use std::time::Duration;

use jiff::Timestamp;
use toolgate_policy::{Enforcement, Id, Reason, Risk, RunId, Verdict};
use toolgate_store::{ApprovalStatus, ApprovedCall, Caller, NewApproval, RunLimits};

use crate::Enforced;
use crate::authorize::{apply_run_answer, deny_audit};
use crate::{AuthorizeRequest, Gate, GateError, MAX_APPROVAL_ROUNDS};

/// Reads the run's cancellation from the database (a cancellation made
/// anywhere) and refuses `verdict` when there is one; an unreadable run
/// state denies `audit_unavailable`.
pub(crate) async fn refuse_if_cancelled(
    app: &Gate,
    caller: Caller<'_>,
    run_id: &RunId,
    verdict: &mut Verdict,
) {
    match app.store.runs().cancelled_at(caller, run_id).await {
        Ok(None) => {}
        // The run itself is remembered as cancelled; a stopped scope is
        // learned by the poll (the run id alone says nothing about it).
        Ok(Some(stopped)) => {
            if !stopped.scoped {
                app.cancelled.insert(run_id.as_str());
            }
            crate::runs::refuse(verdict, Reason::RunCancelled, None);
        }
        Err(err) => {
            tracing::error!(error = %err, "run state unreadable; denying");
            deny_audit(verdict);
        }
    }
}

/// Refuses an escalation its run could not pay for: cancelled, or (under
/// budgets) a budget the call would need is used up, read without
/// charging. Without budgets only the cancellation is read.
// Each argument is a plain value the caller has at hand.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn refuse_if_unpayable(
    app: &Gate,
    caller: Caller<'_>,
    run_id: &RunId,
    limits: &RunLimits,
    mode: Enforcement,
    verdict: &mut Verdict,
    now: Timestamp,
) {
    if *limits == RunLimits::default() {
        return refuse_if_cancelled(app, caller, run_id, verdict).await;
    }
    let high_risk = verdict.risk == Risk::High;
    match app
        .store
        .runs()
        .would_refuse(caller, run_id, high_risk, limits, now)
        .await
    {
        Ok(None) => {}
        Ok(Some(refusal)) => apply_run_answer(app, run_id, &refusal, verdict, mode),
        Err(err) => {
            tracing::error!(error = %err, "run state unreadable; denying");
            deny_audit(verdict);
        }
    }
}

/// Finds or creates the approval for an escalated call. An approved,
/// unused approval for exactly this call turns the verdict into `approved`.
pub(crate) async fn escalate(
    app: &Gate,
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
