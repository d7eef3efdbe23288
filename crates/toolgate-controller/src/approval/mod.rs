//! Approvals: the database ⇄ `Approval` object mirror, and the reconciler
//! that turns a human's `spec.decision` into a resolved database row.
//!
//! Where mirrored requests live: every pending approval in the database
//! becomes `Approval/apr-<id>` in its tenant's namespace, or in one central
//! queue when `--approvals-namespace` names one ([`Placement`]). Only that
//! namespace speaks for the row; the validating webhook lets only the
//! controller create request objects. Standing grants are written by humans
//! in the namespace of the profile they extend.
//!
//! Directions:
//! - database → cluster: [`sync_once`] (every few seconds) expires stale
//!   rows, creates objects for new pending rows, moves objects whose row
//!   left `pending` (resolved elsewhere, expired) to the matching phase, and
//!   empties the old queue of undecided requests once their copy is home;
//! - cluster → database: [`reconcile`] resolves the row when `spec.decision`
//!   is set, idempotently (resolving twice the same way is a no-op), once
//!   `spec.decidedBy` passed the profile's approvers check (below) and the
//!   object's request shows its row field for field ([`request_mismatch`]).
//!
//! # Who may answer
//!
//! A profile's `spec.approvals.approvers` lists the subjects who may answer
//! its escalations. Before a pending row is resolved, the controller finds
//! the profile the row's escalation came from ([`check_approvers`]): its name
//! is the prefix of the row's policy version and its namespace is the row's
//! tenant (both from the database row, not the object's `spec.request`,
//! which whoever creates the object writes). Only that tenant's own
//! PolicyProfile decides who answers for it: rows another tenant wrote
//! into the store never widen or narrow the list. When the
//! list is non-empty and `spec.decidedBy` is not in it, or the profile
//! cannot be found, the row is left pending, the object stays
//! `phase: Pending` with a message starting with `ApproverNotAllowed`, and a
//! Warning Event of that reason is published. Nothing can be corrected
//! then: the decision and its decider are immutable, so the approval stays
//! pending until it expires. That is why the validating webhook refuses such
//! a decision before it is stored, by the same rule
//! ([`approver_allowed`], shared through `toolgate-k8s`) against the same
//! profile (from the object's immutable `spec.request`, which the
//! controller wrote from the row); this check remains for clusters without
//! the webhook and for a profile edited in between.
//!
//! **Who `spec.decidedBy` is.** This reconciler only reads the field. The
//! validating webhook (`toolgate-webhook`) pins it: a write that sets
//! `spec.decision` is refused unless `decidedBy` equals the requesting
//! user's `userInfo.username`, and `kubectl toolgate approve` fills it in
//! from a SelfSubjectReview. Where the webhook is not installed the field
//! is whatever the writer typed, so restrict who may update Approvals with
//! RBAC there.

mod approvers;
mod mirror;
mod placement;
mod reconcile;
mod status;
#[cfg(test)]
mod tests;
mod why;

pub use approvers::{
    APPROVER_NOT_ALLOWED, Approver, ApproverCheck, approver_allowed, check_approvers,
    decider_allowed,
};
pub use mirror::{SyncReport, sync_once};
pub use placement::Placement;
pub use reconcile::{reconcile, resolve_request};
pub use status::{
    grant_profile_ref, grant_status, object_for, past_retention, profile_of, request_mismatch,
    request_status, retention_of,
};
pub(crate) use status::{overdue_pending, stamp_finished};
pub use toolgate_k8s::names::{LABEL_APPROVAL_KIND as LABEL_KIND, approval_name};
pub use why::{HISTORY, WAIT_FOR_RECORD, escalation_of, flow_rule_labels};
