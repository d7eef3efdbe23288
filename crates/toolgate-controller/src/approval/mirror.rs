//! The database → cluster mirror: pending rows become Approval objects,
//! objects follow rows resolved elsewhere, finished objects are deleted
//! after their retention.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use toolgate_store::ApprovalStatus as DbStatus;

use super::{
    WAIT_FOR_RECORD, escalation_of, object_for, overdue_pending, past_retention, request_status,
    resolve_request, stamp_finished,
};
use crate::context::Context;
use crate::crd::{Approval, Phase, PolicyProfile};
use crate::error::ControllerError;

/// What one mirror pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Rows moved to expired in the database.
    pub expired: u64,
    /// Approval objects created for new pending rows.
    pub created: usize,
    /// Objects whose status followed a row that left `pending`.
    pub updated: usize,
    /// Finished objects deleted after their retention.
    pub deleted: usize,
    /// Undecided requests moved out of the old queue (their copy is home).
    pub moved: usize,
}

/// One pass of the database → cluster mirror. `existing` is the current
/// set of Approval objects (the controller's reflector cache).
pub async fn sync_once(
    ctx: &Context,
    existing: &[Arc<Approval>],
    profiles: &[Arc<PolicyProfile>],
) -> Result<SyncReport, ControllerError> {
    let span = crate::trace::pass("toolgate.approvals.mirror");
    crate::trace::traced(span, mirror(ctx, existing, profiles)).await
}

async fn mirror(
    ctx: &Context,
    existing: &[Arc<Approval>],
    profiles: &[Arc<PolicyProfile>],
) -> Result<SyncReport, ControllerError> {
    let now = ctx.now();
    let placement = &ctx.settings.approvals;
    let approvals = ctx.store.approvals();
    let mut report = SyncReport {
        expired: approvals.expire(now).await?,
        ..Default::default()
    };
    // Tenants write their own rows: one that does not read back holds back
    // only itself, not every tenant's mirror.
    let listing = approvals
        .list_all_readable(Some(DbStatus::Pending), now)
        .await?;
    let pending = listing.approvals;
    let mut unmirrored = HashSet::new();
    let mut unreadable: HashSet<(String, String)> = HashSet::new();
    for bad in &listing.unreadable {
        let tenant = bad.tenant.as_deref().unwrap_or("?");
        let id = bad.id.as_deref().unwrap_or("?");
        let key = format!("unreadable {tenant}/{id}");
        if ctx.first_unmirrored(&key) {
            tracing::warn!(approval = %id, tenant = %tenant, error = %bad.error, "a pending approval row does not read back from the database: not mirrored");
        }
        unmirrored.insert(key);
        if let (Some(tenant), Some(id)) = (&bad.tenant, &bad.id) {
            unreadable.insert((tenant.clone(), id.clone()));
        }
    }
    let pending_ids: HashSet<(&str, &str)> = pending
        .iter()
        .map(|r| (r.tenant.as_str(), r.id.as_str()))
        .collect();
    // What each cached (namespace, name) holds: the request of which row,
    // or `None` for anything else (a standing grant, say).
    let cached: HashMap<(String, String), Option<(&str, &str)>> = existing
        .iter()
        .filter_map(|a| {
            let held = a
                .spec
                .request
                .as_ref()
                .map(|r| (r.tenant.as_str(), r.approval_id.as_str()));
            Some(((a.namespace()?, a.name_any()), held))
        })
        .collect();
    // The genuine copies at home, including the ones created by this pass
    // (the cache does not have them yet).
    let mut present: HashSet<(String, String)> = HashSet::new();

    for row in &pending {
        let home = placement.home(&row.tenant);
        let mut obj = object_for(row, home);
        let key = (home.to_owned(), obj.name_any());
        match cached.get(&key) {
            Some(Some((tenant, id))) if *tenant == row.tenant && *id == row.id => {
                present.insert(key);
                continue;
            }
            // The name is taken by something that is not this row's
            // request (anyone who may write grants in a tenant namespace
            // could squat `apr-<id>` before the mirror): never answered
            // through it, never counted as mirrored.
            Some(_) => {
                if ctx.first_unmirrored(&row.id) {
                    tracing::warn!(approval = %row.id, tenant = %row.tenant, namespace = %home, name = %key.1, "the Approval name is taken by an object that is not this approval's request");
                }
                unmirrored.insert(row.id.clone());
                continue;
            }
            None => {}
        }
        // The why is part of the immutable request: wait a little for the
        // escalating decision's record rather than create the object without.
        let why = match escalation_of(&ctx.store, row).await {
            Ok(why) => why,
            // The records read for the why (decisions, flow labels) are the
            // tenant's too: one that does not read back holds back this
            // approval only. Any other failure stops the pass, as before.
            Err(ControllerError::Store(e)) if e.is_unreadable_row() => {
                if ctx.first_unmirrored(&row.id) {
                    tracing::warn!(approval = %row.id, tenant = %row.tenant, error = %e, "could not read why the approval was asked: not mirrored");
                }
                unmirrored.insert(row.id.clone());
                continue;
            }
            Err(e) => return Err(e),
        };
        let young = row
            .created_at
            .checked_add(WAIT_FOR_RECORD)
            .is_ok_and(|until| until > now);
        if why.is_none() && young {
            continue;
        }
        if let Some(req) = obj.spec.request.as_mut() {
            req.escalation = why;
        }
        let api: Api<Approval> = Api::namespaced(ctx.client.clone(), home);
        match api.create(&PostParams::default(), &obj).await {
            Ok(created) => {
                report.created += 1;
                present.insert(key);
                let req = obj
                    .spec
                    .request
                    .as_ref()
                    .expect("mirrored objects carry a request");
                let status = request_status(
                    req,
                    Some(row),
                    Phase::Pending,
                    None,
                    created.metadata.generation,
                );
                ctx.apply_status(&created, &status).await?;
                tracing::info!(approval = %row.id, tenant = %row.tenant, namespace = %home, tool = %row.tool, "mirrored pending approval");
            }
            // Made meanwhile (by a pass the cache has not caught up with,
            // or by someone else): the next pass sees what it is.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            // One tenant's missing namespace or RBAC must not hold back the
            // others: the row stays pending (answerable with the CLI) and is
            // tried again next pass.
            Err(e) => {
                if ctx.first_unmirrored(&row.id) {
                    tracing::warn!(approval = %row.id, tenant = %row.tenant, namespace = %home, error = %e, "could not mirror pending approval");
                }
                unmirrored.insert(row.id.clone());
            }
        }
    }

    // Undecided requests in the old queue move home, once their copy is
    // there. The delete is conditional on the object as read: a decision
    // written meanwhile fails it, and is then recorded (the old queue is
    // still honoured) instead of lost.
    for obj in existing {
        let (Some(req), Some(obj_ns)) = (&obj.spec.request, obj.namespace()) else {
            continue;
        };
        let undecided = obj.spec.decision.is_none()
            && matches!(
                obj.status.as_ref().and_then(|s| s.phase),
                None | Some(Phase::Pending)
            );
        let home = placement.home(&req.tenant).to_owned();
        if !placement.moves(&obj_ns, &req.tenant)
            || !undecided
            || !pending_ids.contains(&(req.tenant.as_str(), req.approval_id.as_str()))
            || !present.contains(&(home.clone(), obj.name_any()))
        {
            continue;
        }
        let api: Api<Approval> = Api::namespaced(ctx.client.clone(), &obj_ns);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: obj.metadata.uid.clone(),
                resource_version: obj.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(&obj.name_any(), &params).await {
            Ok(_) => {
                report.moved += 1;
                tracing::info!(approval = %req.approval_id, from = %obj_ns, to = %home, "moved pending approval to its tenant's namespace");
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    // Rows that left `pending` without the object knowing (resolved through
    // the CLI or API, or expired).
    for obj in existing {
        let (Some(req), Some(obj_ns)) = (&obj.spec.request, obj.namespace()) else {
            continue;
        };
        // Only objects that speak for their row follow it.
        if !placement.honours(&obj_ns, &req.tenant) {
            continue;
        }
        let phase = obj.status.as_ref().and_then(|s| s.phase);
        if !matches!(phase, None | Some(Phase::Pending)) {
            continue;
        }
        // A row that does not read back is still there: its object waits.
        if pending_ids.contains(&(req.tenant.as_str(), req.approval_id.as_str()))
            || unreadable.contains(&(req.tenant.clone(), req.approval_id.clone()))
        {
            continue;
        }
        let mut status = match resolve_request(ctx, obj, req).await {
            Ok(status) => status,
            // The row left `pending` with a value that does not read back
            // (a tenant's own role could write one before migration 0021),
            // or a tenant's object names such a row: that object stays as
            // it is, the rest of the pass goes on. A database that cannot
            // be reached still fails the pass, to be retried.
            Err(ControllerError::Store(e)) if e.is_unreadable_row() => {
                let key = format!("unreadable {}/{}", req.tenant, req.approval_id);
                if ctx.first_unmirrored(&key) {
                    tracing::warn!(approval = %req.approval_id, tenant = %req.tenant, namespace = %obj_ns, name = %obj.name_any(), error = %e, "the approval row of an object does not read back from the database: the object is left as it is");
                }
                unmirrored.insert(key);
                continue;
            }
            Err(e) => return Err(e),
        };
        let previous = obj.status.as_ref().and_then(|s| s.finished_at.as_deref());
        stamp_finished(&mut status, previous, now);
        if obj.status.as_ref() != Some(&status) {
            ctx.apply_status(obj.as_ref(), &status).await?;
            report.updated += 1;
        }
    }

    ctx.keep_unmirrored(&unmirrored);
    ctx.metrics
        .approvals_unmirrored
        .set(i64::try_from(unmirrored.len()).unwrap_or(i64::MAX));

    // Finished objects past their retention; the database rows stay.
    for obj in existing {
        if !past_retention(obj, profiles, now) || obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(obj_ns) = obj.namespace() else {
            continue;
        };
        let api: Api<Approval> = Api::namespaced(ctx.client.clone(), &obj_ns);
        match api
            .delete(&obj.name_any(), &kube::api::DeleteParams::default())
            .await
        {
            Ok(_) => {
                report.deleted += 1;
                tracing::info!(approval = %obj.name_any(), namespace = %obj_ns, "deleted after retention");
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }

    let mut counts: BTreeMap<&'static str, i64> = BTreeMap::new();
    for phase in Phase::ALL {
        counts.insert(phase.as_str(), 0);
    }
    for obj in existing {
        if let Some(phase) = obj.status.as_ref().and_then(|s| s.phase) {
            *counts.entry(phase.as_str()).or_default() += 1;
        }
    }
    for (phase, n) in counts {
        ctx.metrics.approvals.with_label_values(&[phase]).set(n);
    }
    ctx.metrics
        .approvals_overdue
        .set(overdue_pending(existing.iter().map(AsRef::as_ref), now));
    Ok(report)
}
