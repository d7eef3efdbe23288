//! The Approval reconcile: a human's `spec.decision` becomes a resolved
//! database row, and the object's status follows the row.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use toolgate_k8s::{ApprovalFields, validate_approval};
use toolgate_store::{ApprovalStatus as DbStatus, StoreError};

use super::{
    APPROVER_NOT_ALLOWED, ApproverCheck, check_approvers, grant_status, request_mismatch,
    request_status, stamp_finished,
};
use crate::context::Context;
use crate::crd::{Approval, ApprovalRequest, ApprovalStatus, Decision, Phase, PolicyProfile};
use crate::error::ControllerError;

/// Resolves (decision set) or reads (no decision) the database row of a
/// request and returns the status the object should show. A decision on a
/// pending row is only recorded when [`check_approvers`] allows it;
/// otherwise the row stays pending, the status says `ApproverNotAllowed` and
/// a Warning Event is published (once per distinct message).
pub async fn resolve_request(
    ctx: &Context,
    obj: &Approval,
    req: &ApprovalRequest,
) -> Result<ApprovalStatus, ControllerError> {
    let approvals = ctx.store.approvals();
    let generation = obj.metadata.generation;
    // The object must show the row it answers: a request whose tool,
    // arguments or preview differ from the row would have an approver
    // approve one call and release another.
    let read = approvals
        .get(&req.tenant, &req.approval_id, ctx.now())
        .await;
    if let Some(field) = read
        .as_ref()
        .ok()
        .and_then(|row| request_mismatch(req, row))
    {
        return Ok(request_status(
            req,
            None,
            Phase::Pending,
            Some(format!(
                "ignored: spec.request.{field} differs from approval {} in the database",
                req.approval_id
            )),
            generation,
        ));
    }
    let result = match (obj.spec.decision, read) {
        (Some(d), read) => {
            match read {
                Ok(row) if row.status == DbStatus::Pending => {
                    if let ApproverCheck::Refused(message) = check_approvers(ctx, obj, &row).await?
                    {
                        let shown = obj.status.as_ref().and_then(|s| s.message.as_deref());
                        if shown != Some(message.as_str()) {
                            tracing::warn!(approval = %req.approval_id, %message, "decision refused");
                            ctx.event(
                                &obj.object_ref(&()),
                                EventType::Warning,
                                APPROVER_NOT_ALLOWED,
                                "Resolve",
                                message.clone(),
                            )
                            .await;
                        }
                        return Ok(request_status(
                            req,
                            Some(&row),
                            Phase::Pending,
                            Some(message),
                            generation,
                        ));
                    }
                }
                // Already resolved or expired: `resolve` reports it (idempotently).
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let by = obj.spec.decided_by.as_deref().unwrap_or("kubectl");
            approvals
                .resolve(
                    &req.tenant,
                    &req.approval_id,
                    d,
                    by,
                    obj.spec.reason.as_deref(),
                    ctx.now(),
                )
                .await
        }
        (None, read) => read,
    };
    let status = match result {
        Ok(row) => {
            let message = match (row.status, &row.resolved_by) {
                (DbStatus::Approved | DbStatus::Denied, Some(by)) => {
                    Some(format!("{} by {by}", row.status))
                }
                _ => None,
            };
            request_status(
                req,
                Some(&row),
                Phase::from(row.status),
                message,
                generation,
            )
        }
        Err(StoreError::ApprovalExpired { .. }) => {
            let row = approvals
                .get(&req.tenant, &req.approval_id, ctx.now())
                .await
                .ok();
            request_status(
                req,
                row.as_ref(),
                Phase::Expired,
                Some("expired before the decision was recorded".into()),
                generation,
            )
        }
        Err(StoreError::Conflict(message)) => {
            let row = approvals
                .get(&req.tenant, &req.approval_id, ctx.now())
                .await?;
            request_status(
                req,
                Some(&row),
                Phase::from(row.status),
                Some(message),
                generation,
            )
        }
        Err(StoreError::NotFound { .. }) => {
            let phase = obj
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .unwrap_or(Phase::Pending);
            request_status(
                req,
                None,
                phase,
                Some(format!(
                    "approval {} of tenant {} is not in the database",
                    req.approval_id, req.tenant
                )),
                generation,
            )
        }
        Err(e) => return Err(e.into()),
    };
    Ok(status)
}

/// Reconciles one Approval (the `Controller`'s reconcile fn).
pub async fn reconcile(obj: Arc<Approval>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let timer = ctx.metrics.start("approval");
    let span = tracing::info_span!(
        "reconcile",
        controller = "approval",
        namespace = %obj.namespace().unwrap_or_default(),
        approval = %obj.name_any()
    );
    let namespace = obj.namespace().unwrap_or_default();
    let traced_span = crate::trace::reconcile("Approval", &namespace, &obj.name_any());
    let work = tracing::Instrument::instrument(reconcile_inner(&obj, &ctx), span);
    let result = crate::trace::traced(traced_span, work).await;
    timer.finish(&result);
    result
}

async fn reconcile_inner(obj: &Approval, ctx: &Context) -> Result<Action, ControllerError> {
    let now = ctx.now();
    let previous = obj.status.clone().unwrap_or_default();
    // The rules the webhook applies at admission, for an object that got in
    // without it (no writer to attribute: that was admission's job).
    let checked = validate_approval(None, &ApprovalFields::from(&obj.spec), None);
    let (status, action) = match (&obj.spec.request, &obj.spec.grant, checked) {
        (Some(req), None, Ok(())) => {
            let settled = matches!(
                previous.phase,
                Some(Phase::Approved | Phase::Denied | Phase::Expired | Phase::Cancelled)
            ) && previous.observed_generation == obj.metadata.generation;
            if settled {
                return Ok(Action::await_change());
            }
            // Only the tenant's home (and the old queue while it empties)
            // speaks for database rows: anyone able to create an Approval
            // elsewhere must not be able to answer a call by naming its id.
            let ns = obj.namespace().unwrap_or_default();
            let placement = &ctx.settings.approvals;
            if !placement.honours(&ns, &req.tenant) {
                let home = placement.home(&req.tenant);
                let status = ApprovalStatus {
                    phase: Some(Phase::Pending),
                    message: Some(format!(
                        "ignored: requests of tenant {} are honoured only in namespace {home}",
                        req.tenant
                    )),
                    observed_generation: obj.metadata.generation,
                    ..previous.clone()
                };
                if status != previous {
                    ctx.apply_status(obj, &status).await?;
                }
                return Ok(Action::await_change());
            }
            let status = resolve_request(ctx, obj, req).await?;
            let action = match (
                status.phase,
                status
                    .expires_at
                    .as_deref()
                    .and_then(|e| e.parse::<Timestamp>().ok()),
            ) {
                (Some(Phase::Pending), Some(expiry)) => {
                    let wait =
                        Duration::try_from(expiry.duration_since(now)).unwrap_or(Duration::ZERO);
                    Action::requeue((wait + Duration::from_secs(1)).min(Duration::from_secs(300)))
                }
                (Some(Phase::Pending), None) => Action::requeue(Duration::from_secs(300)),
                _ => Action::await_change(),
            };
            (status, action)
        }
        (None, Some(grant), Ok(())) => {
            // The approvers check needs the profile only for an approval.
            let approvers = match (obj.spec.decision, obj.namespace()) {
                (Some(Decision::Approved), Some(ns)) => {
                    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), &ns);
                    api.get_opt(&grant.profile)
                        .await?
                        .map(|p| p.spec.0.approvals.map(|a| a.approvers).unwrap_or_default())
                }
                _ => Some(Vec::new()),
            };
            let mut status = grant_status(
                &obj.spec,
                grant,
                approvers.as_deref(),
                now,
                obj.metadata.generation,
            );
            status.finished_at = previous.finished_at.clone();
            let action = match (status.phase, grant.expires_at.parse::<Timestamp>()) {
                (Some(Phase::Approved | Phase::Pending | Phase::Denied), Ok(expiry)) => {
                    let wait =
                        Duration::try_from(expiry.duration_since(now)).unwrap_or(Duration::ZERO);
                    Action::requeue(wait + Duration::from_secs(1))
                }
                _ => Action::await_change(),
            };
            (status, action)
        }
        (_, _, checked) => (
            ApprovalStatus {
                message: checked.err().map(|e| e.to_string()),
                observed_generation: obj.metadata.generation,
                ..previous.clone()
            },
            Action::await_change(),
        ),
    };
    let mut status = status;
    stamp_finished(&mut status, previous.finished_at.as_deref(), now);
    if status != previous {
        ctx.apply_status(obj, &status).await?;
    }
    Ok(action)
}
