//! Approvals: the database ⇄ `Approval` object mirror, and the reconciler
//! that turns a human's `spec.decision` into a resolved database row.
//!
//! Where mirrored requests live: every pending approval in the database
//! becomes `Approval/apr-<id>` in one namespace, `--approvals-namespace`
//! (default: the controller's own namespace, e.g. `toolgate-system`). One
//! namespace keeps RBAC simple (approvers get rights on Approvals there)
//! and does not depend on tenants being namespace names. Standing grants
//! are written by humans in the namespace of the profile they extend.
//!
//! Directions:
//! - database → cluster: [`sync_once`] (every few seconds) expires stale
//!   rows, creates objects for new pending rows and moves objects whose row
//!   left `pending` (resolved elsewhere, expired) to the matching phase;
//! - cluster → database: [`reconcile`] resolves the row when `spec.decision`
//!   is set, idempotently (resolving twice the same way is a no-op), once
//!   `spec.decidedBy` passed the profile's approvers check (below).
//!
//! # Who may answer
//!
//! A profile's `spec.approvals.approvers` lists the subjects who may answer
//! its escalations. Before a pending row is resolved, the controller finds
//! the profile the row's escalation came from ([`check_approvers`]): its name
//! is the prefix of the row's policy version (the database row, not the
//! object's `spec.request`, which whoever creates the object writes), and
//! its namespace is the one the controller recorded in the store when it
//! published that exact version, else the Approval's own namespace. When the
//! list is non-empty and `spec.decidedBy` is not in it, or the profile
//! cannot be found, the row is left pending, the object stays
//! `phase: Pending` with a message starting with `ApproverNotAllowed`, and a
//! Warning Event of that reason is published. `decidedBy` can be corrected
//! (only `spec.decision` is immutable); the next reconcile checks again.
//!
//! **Who `spec.decidedBy` is.** This reconciler only reads the field. The
//! validating webhook (`toolgate-webhook`) pins it: a write that sets
//! `spec.decision` is refused unless `decidedBy` equals the requesting
//! user's `userInfo.username`, and `kubectl toolgate approve` fills it in
//! from a SelfSubjectReview. Where the webhook is not installed the field
//! is whatever the writer typed, so restrict who may update Approvals with
//! RBAC there.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use toolgate_store::{ApprovalDecision, ApprovalStatus as DbStatus, StoreError};

use crate::context::Context;
use crate::crd::{
    Approval, ApprovalRequest, ApprovalSpec, ApprovalStatus, Decision, Phase, PolicyProfile,
    StandingGrant,
};
use crate::error::ControllerError;

/// Label on mirrored request objects.
pub const LABEL_KIND: &str = "toolgate.dev/approval-kind";

/// Object name for database approval `id`: `apr-` + the id lowercased,
/// every character outside `[a-z0-9-]` replaced by `-`; when that loses
/// information, a short hash of the original id keeps names distinct.
pub fn approval_name(id: &str) -> String {
    let lower = id.to_ascii_lowercase();
    let mut clean: String = lower
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let lossy = clean != id;
    clean = clean.trim_matches('-').to_owned();
    clean.truncate(200);
    let clean = clean.trim_end_matches('-');
    if lossy {
        let hash = toolgate_policy::digest::sha256_hex(id.as_bytes());
        format!("apr-{clean}-{}", &hash[..8]).replace("--", "-")
    } else {
        format!("apr-{clean}")
    }
}

/// Phase of a request from its database status.
pub fn phase_of(status: DbStatus) -> Phase {
    match status {
        DbStatus::Pending => Phase::Pending,
        DbStatus::Approved => Phase::Approved,
        DbStatus::Denied => Phase::Denied,
        DbStatus::Expired => Phase::Expired,
        DbStatus::Cancelled => Phase::Cancelled,
    }
}

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
                "app.kubernetes.io/managed-by".to_owned(),
                crate::MANAGER.to_owned(),
            ),
        ])),
        ..Default::default()
    };
    obj
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

fn to_db(d: Decision) -> ApprovalDecision {
    match d {
        Decision::Approved => ApprovalDecision::Approved,
        Decision::Denied => ApprovalDecision::Denied,
    }
}

async fn patch_status(
    ctx: &Context,
    obj: &Approval,
    status: &ApprovalStatus,
) -> Result<(), ControllerError> {
    let ns = obj
        .namespace()
        .ok_or_else(|| ControllerError::InvalidObject("Approval without namespace".into()))?;
    let api: Api<Approval> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({"status": status});
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Reason (and message prefix) when a decision is not recorded because of
/// the profile's approvers list.
pub const APPROVER_NOT_ALLOWED: &str = "ApproverNotAllowed";

/// One entry of `spec.approvals.approvers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver<'a> {
    /// `user:NAME`, or a bare `NAME`: an authenticated username.
    User(&'a str),
    /// `group:NAME`: a group the API server authenticated the decider in.
    Group(&'a str),
}

impl<'a> Approver<'a> {
    /// Reads one entry. A bare name is a user, so Kubernetes usernames that
    /// contain colons (`system:serviceaccount:ns:sa`) keep working.
    pub fn parse(entry: &'a str) -> Self {
        if let Some(group) = entry.strip_prefix("group:") {
            Approver::Group(group)
        } else {
            Approver::User(entry.strip_prefix("user:").unwrap_or(entry))
        }
    }
}

/// Whether a decider (authenticated `user`, in `groups`) may answer for a
/// profile whose `spec.approvals.approvers` is `approvers`: anyone when the
/// list is empty, otherwise a listed user or a member of a listed group
/// (exact, case-sensitive; an unset user is nobody). `user` and `groups`
/// come from `spec.decidedBy` / `spec.decidedByGroups`, which the validating
/// webhook pins to what the API server authenticated.
pub fn approver_allowed(approvers: &[String], user: Option<&str>, groups: &[String]) -> bool {
    if approvers.is_empty() {
        return true;
    }
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return false;
    };
    approvers.iter().any(|entry| match Approver::parse(entry) {
        Approver::User(name) => name == user,
        Approver::Group(name) => groups.iter().any(|g| g == name),
    })
}

/// [`approver_allowed`] for the decider recorded on an Approval.
pub fn decider_allowed(approvers: &[String], spec: &ApprovalSpec) -> bool {
    approver_allowed(
        approvers,
        spec.decided_by.as_deref(),
        spec.decided_by_groups.as_deref().unwrap_or_default(),
    )
}

/// The decider of an Approval in words, for status messages.
fn decider_text(spec: &ApprovalSpec) -> String {
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
/// escalated `row` (see the module docs for how the profile is found).
/// Fails closed: a row whose policy version names no profile, or whose
/// profile is found nowhere, is refused. With the same profile name found in
/// several recorded namespaces, every one of them must allow the approver.
/// `decidedBy` is self-asserted unless an admission webhook pins it.
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
    let mut namespaces: Vec<String> = ctx
        .store
        .profiles()
        .list_profile_versions(Some(&name))
        .await?
        .into_iter()
        .filter(|v| v.load.policy_version == row.policy_version)
        .map(|v| v.load.namespace)
        .collect();
    if namespaces.is_empty() {
        namespaces.extend(obj.namespace());
    }
    namespaces.sort();
    namespaces.dedup();
    let mut found = 0;
    for ns in &namespaces {
        let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), ns);
        let Some(profile) = api.get_opt(&name).await? else {
            continue;
        };
        found += 1;
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
    }
    if found == 0 {
        return Ok(ApproverCheck::Refused(format!(
            "{APPROVER_NOT_ALLOWED}: PolicyProfile {name} not found in namespace(s) {}, so its \
             approvers cannot be checked; the decision was not recorded",
            namespaces.join(", ")
        )));
    }
    Ok(ApproverCheck::Allowed)
}

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
    let result = match obj.spec.decision {
        Some(d) => {
            match approvals
                .get(&req.tenant, &req.approval_id, ctx.now())
                .await
            {
                Ok(row) if row.status == DbStatus::Pending => {
                    if let ApproverCheck::Refused(message) = check_approvers(ctx, obj, &row).await?
                    {
                        let shown = obj.status.as_ref().and_then(|s| s.message.as_deref());
                        if shown != Some(message.as_str()) {
                            tracing::warn!(approval = %req.approval_id, %message, "decision refused");
                            ctx.event(
                                &obj.object_ref(&()),
                                Event {
                                    type_: EventType::Warning,
                                    reason: APPROVER_NOT_ALLOWED.into(),
                                    note: Some(message.clone()),
                                    action: "Resolve".into(),
                                    secondary: None,
                                },
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
                    to_db(d),
                    by,
                    obj.spec.reason.as_deref(),
                    ctx.now(),
                )
                .await
        }
        None => {
            approvals
                .get(&req.tenant, &req.approval_id, ctx.now())
                .await
        }
    };
    let status = match result {
        Ok(row) => {
            let message = match (row.status, &row.resolved_by) {
                (DbStatus::Approved | DbStatus::Denied, Some(by)) => {
                    Some(format!("{} by {by}", row.status))
                }
                _ => None,
            };
            request_status(req, Some(&row), phase_of(row.status), message, generation)
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
                phase_of(row.status),
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
    let result = tracing::Instrument::instrument(reconcile_inner(&obj, &ctx), span).await;
    timer.finish(&result);
    result
}

async fn reconcile_inner(obj: &Approval, ctx: &Context) -> Result<Action, ControllerError> {
    let now = ctx.now();
    let previous = obj.status.clone().unwrap_or_default();
    let (status, action) = match (&obj.spec.request, &obj.spec.grant) {
        (Some(req), None) => {
            let settled = matches!(
                previous.phase,
                Some(Phase::Approved | Phase::Denied | Phase::Expired | Phase::Cancelled)
            ) && previous.observed_generation == obj.metadata.generation;
            if settled {
                return Ok(Action::await_change());
            }
            // Only the mirror's own namespace speaks for database rows:
            // anyone able to create an Approval elsewhere must not be able
            // to answer a call by naming its id.
            let home = &ctx.settings.approvals_namespace;
            if obj.namespace().as_deref() != Some(home.as_str()) {
                let status = ApprovalStatus {
                    phase: Some(Phase::Pending),
                    message: Some(format!(
                        "ignored: request Approvals are honoured only in namespace {home}"
                    )),
                    observed_generation: obj.metadata.generation,
                    ..previous.clone()
                };
                if status != previous {
                    patch_status(ctx, obj, &status).await?;
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
        (None, Some(grant)) => {
            // The approvers check needs the profile only for an approval.
            let approvers = match (obj.spec.decision, obj.namespace()) {
                (Some(Decision::Approved), Some(ns)) => {
                    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), &ns);
                    api.get_opt(&grant.profile)
                        .await?
                        .map(|p| p.spec.approvals.map(|a| a.approvers).unwrap_or_default())
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
        _ => (
            ApprovalStatus {
                message: Some("exactly one of spec.request and spec.grant must be set".into()),
                observed_generation: obj.metadata.generation,
                ..previous.clone()
            },
            Action::await_change(),
        ),
    };
    let mut status = status;
    stamp_finished(&mut status, previous.finished_at.as_deref(), now);
    if status != previous {
        patch_status(ctx, obj, &status).await?;
    }
    Ok(action)
}

/// Sets `finished_at` once a status leaves `Pending` (keeping the first
/// instant), and clears it while pending.
fn stamp_finished(status: &mut ApprovalStatus, previous: Option<&str>, now: Timestamp) {
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
}

/// One pass of the database → cluster mirror. `existing` is the current
/// set of Approval objects (the controller's reflector cache).
pub async fn sync_once(
    ctx: &Context,
    existing: &[Arc<Approval>],
    profiles: &[Arc<PolicyProfile>],
) -> Result<SyncReport, ControllerError> {
    let now = ctx.now();
    let ns = ctx.settings.approvals_namespace.clone();
    let approvals = ctx.store.approvals();
    let mut report = SyncReport {
        expired: approvals.expire(now).await?,
        ..Default::default()
    };
    let pending = approvals.list_all(Some(DbStatus::Pending), now).await?;
    let pending_ids: HashSet<(&str, &str)> = pending
        .iter()
        .map(|r| (r.tenant.as_str(), r.id.as_str()))
        .collect();
    let present: HashSet<String> = existing
        .iter()
        .filter(|a| a.namespace().as_deref() == Some(ns.as_str()))
        .map(|a| a.name_any())
        .collect();

    let api: Api<Approval> = Api::namespaced(ctx.client.clone(), &ns);
    for row in &pending {
        let obj = object_for(row, &ns);
        if present.contains(&obj.name_any()) {
            continue;
        }
        match api.create(&PostParams::default(), &obj).await {
            Ok(created) => {
                report.created += 1;
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
                patch_status(ctx, &created, &status).await?;
                tracing::info!(approval = %row.id, tenant = %row.tenant, tool = %row.tool, "mirrored pending approval");
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    // Rows that left `pending` without the object knowing (resolved through
    // the CLI or API, or expired).
    for obj in existing {
        let Some(req) = &obj.spec.request else {
            continue;
        };
        let phase = obj.status.as_ref().and_then(|s| s.phase);
        if !matches!(phase, None | Some(Phase::Pending)) {
            continue;
        }
        if pending_ids.contains(&(req.tenant.as_str(), req.approval_id.as_str())) {
            continue;
        }
        let mut status = resolve_request(ctx, obj, req).await?;
        let previous = obj.status.as_ref().and_then(|s| s.finished_at.as_deref());
        stamp_finished(&mut status, previous, now);
        if obj.status.as_ref() != Some(&status) {
            patch_status(ctx, obj, &status).await?;
            report.updated += 1;
        }
    }

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
    for phase in [
        Phase::Pending,
        Phase::Approved,
        Phase::Denied,
        Phase::Expired,
        Phase::Cancelled,
    ] {
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

/// Approvals still `Pending` after their `expiresAt`: nobody answered within
/// the TTL and the controller has not expired them yet (it should within
/// one sync), so a lasting non-zero count means expiry is stuck.
fn overdue_pending<'a>(objects: impl IntoIterator<Item = &'a Approval>, now: Timestamp) -> i64 {
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

/// The object reference used for Events about an Approval.
pub fn reference(a: &Approval) -> k8s_openapi::api::core::v1::ObjectReference {
    a.object_ref(&())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_and_distinct() {
        assert_eq!(approval_name("abc-123"), "apr-abc-123");
        let a = approval_name("ABC_123");
        let b = approval_name("abc_123");
        assert_ne!(a, b);
        for n in [a, b, approval_name("01J_X/Y:Z")] {
            assert!(n.len() <= 253);
            assert!(
                n.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
                "{n}"
            );
            assert!(!n.ends_with('-') && !n.contains("--"), "{n}");
        }
        assert_eq!(
            profile_of("safe-coding@abc+hdef").as_deref(),
            Some("safe-coding")
        );
        assert_eq!(profile_of("nope"), None);
    }

    #[test]
    fn grant_phases() {
        let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let grant = StandingGrant {
            profile: "p".into(),
            tool: "bash".into(),
            glob: "make *".into(),
            subjects: vec!["*".into()],
            expires_at: "2030-01-02T00:00:00Z".into(),
        };
        let mut spec = ApprovalSpec {
            request: None,
            grant: Some(grant.clone()),
            decision: None,
            reason: None,
            decided_by: Some("alice".into()),
            decided_by_groups: Some(vec!["platform".into()]),
        };
        let anyone: &[String] = &[];
        assert_eq!(
            grant_status(&spec, &grant, Some(anyone), now, None).phase,
            Some(Phase::Pending)
        );
        spec.decision = Some(Decision::Approved);
        assert_eq!(
            grant_status(&spec, &grant, Some(anyone), now, None).phase,
            Some(Phase::Approved)
        );
        let later: Timestamp = "2030-01-03T00:00:00Z".parse().unwrap();
        assert_eq!(
            grant_status(&spec, &grant, Some(anyone), later, None).phase,
            Some(Phase::Expired)
        );
        // A decider outside the approvers keeps the grant pending, and so
        // does a profile that cannot be found.
        let oncall = ["group:oncall".to_owned()];
        let refused = grant_status(&spec, &grant, Some(&oncall), now, None);
        assert_eq!(refused.phase, Some(Phase::Pending));
        assert!(refused.message.unwrap().starts_with(APPROVER_NOT_ALLOWED));
        assert_eq!(
            grant_status(&spec, &grant, None, now, None).phase,
            Some(Phase::Pending)
        );
        let platform = ["group:platform".to_owned()];
        assert_eq!(
            grant_status(&spec, &grant, Some(&platform), now, None).phase,
            Some(Phase::Approved)
        );
        spec.decision = Some(Decision::Denied);
        assert_eq!(
            grant_status(&spec, &grant, Some(&oncall), now, None).phase,
            Some(Phase::Denied)
        );
    }

    #[test]
    fn approvers_are_users_or_groups() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let groups = list(&["system:authenticated", "oncall"]);
        assert!(approver_allowed(&[], None, &[]));
        assert!(!approver_allowed(&list(&["alice"]), None, &groups));
        assert!(approver_allowed(&list(&["alice"]), Some("alice"), &[]));
        assert!(approver_allowed(&list(&["user:alice"]), Some("alice"), &[]));
        assert!(!approver_allowed(
            &list(&["user:alice"]),
            Some("Alice"),
            &[]
        ));
        assert!(approver_allowed(
            &list(&["group:oncall"]),
            Some("bob"),
            &groups
        ));
        assert!(!approver_allowed(
            &list(&["group:oncall"]),
            Some("bob"),
            &[]
        ));
        // A group name is not a username, and a username is not a group.
        assert!(!approver_allowed(
            &list(&["group:oncall"]),
            Some("oncall"),
            &[]
        ));
        assert!(!approver_allowed(
            &list(&["user:oncall"]),
            Some("bob"),
            &groups
        ));
        assert!(approver_allowed(
            &list(&["system:serviceaccount:ops:bot"]),
            Some("system:serviceaccount:ops:bot"),
            &[]
        ));
    }

    #[test]
    fn finished_objects_are_kept_for_their_profiles_retention() {
        let now: Timestamp = "2030-01-02T00:00:00Z".parse().unwrap();
        let mut obj: Approval = serde_json::from_value(serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
            "metadata": {"name": "apr-1", "namespace": "toolgate-system"},
            "spec": {"request": {"approvalId": "1", "tenant": "t", "invocationId": "i",
                "tool": "bash", "argsDigest": "d", "runId": "r", "policyVersion": "p@x"}},
            "status": {"phase": "Approved", "profile": "p", "finishedAt": "2030-01-01T00:00:00Z"}
        }))
        .unwrap();
        // Default: one day.
        assert!(past_retention(&obj, &[], now));
        assert!(!past_retention(
            &obj,
            &[],
            "2030-01-01T23:59:59Z".parse().unwrap()
        ));
        let profile: PolicyProfile = serde_json::from_value(serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "PolicyProfile",
            "metadata": {"name": "p", "namespace": "agents"},
            "spec": {"mode": "denyAll", "approvals": {"ttlSeconds": 60, "retentionSeconds": 172800}}
        }))
        .unwrap();
        let profiles = [Arc::new(profile)];
        assert!(!past_retention(&obj, &profiles, now));
        assert!(past_retention(
            &obj,
            &profiles,
            "2030-01-03T00:00:00Z".parse().unwrap()
        ));
        // Pending objects are never deleted.
        obj.status.as_mut().unwrap().phase = Some(Phase::Pending);
        assert!(!past_retention(
            &obj,
            &[],
            "2031-01-01T00:00:00Z".parse().unwrap()
        ));
    }
}
