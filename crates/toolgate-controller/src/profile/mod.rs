//! The PolicyProfile reconciler: spec + standing grants → signed bundle
//! ConfigMap, status, Events and a row in the store.
//!
//! One reconcile, in order:
//! 1. compile the spec (`CompiledPolicy::compile`); an invalid spec sets
//!    `Valid=False` with the policy error code and field and never publishes
//!    its content. The last good bundle keeps being served and kept fresh:
//!    see [Invalid specs](#invalid-specs-keeping-the-last-good-bundle-fresh);
//! 2. collect the profile's active standing grants (Approvals in the same
//!    namespace, `spec.grant.profile == name`, approved, not expired);
//! 3. compare the policy version with what the bundle ConfigMap holds
//!    ([`plan_bundle`]): sign a new bundle (next sequence) only when the
//!    content changed, the ConfigMap is missing, or less than a third of the
//!    validity remains;
//! 4. server-side apply `toolgate-bundle-<name>` (owned by the profile),
//!    record the version in the store, publish an Event;
//! 5. fold heartbeats into `status.fleet` and patch the status when it changed.
//!
//! The module is split by job: planning (pure: what to sign,
//! which grants, whether the last good bundle may be re-signed), status
//! (pure: the conditions written) and the reconcile (the I/O around them,
//! with one `publish` path for every bundle). The pure parts are tested
//! without any API.
//!
//! # Invalid specs: keeping the last good bundle fresh
//!
//! Bundles expire (`--bundle-validity`, 24h by default) and a sidecar whose
//! bundle expired denies every call (`bundle_expired`). So while the spec
//! does not compile, the reconciler still re-signs the *last good* document
//! once less than a third of its validity remains (or after it expired):
//! - it reads the envelope in `toolgate-bundle-<name>` and verifies it with
//!   the controller's own key only (not the namespace's `toolgate-trust`
//!   ConfigMap, which the same writer could have edited), at the sequence and
//!   digest the status recorded ([`last_good`]): a tampered envelope, a
//!   bundle of another profile or a replayed older bundle is never re-signed;
//! - it builds a new document from the verified spec, profile reference and
//!   those of its grants that are still active (an expired or withdrawn grant
//!   is not carried forward), with the next sequence and fresh
//!   `issuedAt`/`expiresAt`, and applies it like any other publication;
//! - the status keeps `Valid=False/InvalidSpec` and says what is served:
//!   `Ready=True/ServingLastGood` (version, sequence and expiry in the
//!   message; `status.version`, `sequence`, `expiresAt`… describe the served
//!   bundle), or `Ready=False` with `NoValidBundle` (nothing published) or
//!   `LastGoodUnusable` (the ConfigMap's bundle failed verification);
//! - the reconcile is requeued for the re-sign instant, so this happens with
//!   no spec change at all.
//!
//! A bundle signed by a previous signing key (after the Secret was rotated)
//! does not verify with the current key and is therefore not re-signed:
//! fixing the spec publishes a fresh bundle.

mod analysis;
pub mod candidate;
mod plan;
mod reconcile;
mod status;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_candidate;

pub use candidate::{Candidate, Resolved};
pub(crate) use plan::approvers_of;
pub use plan::{
    BundlePlan, LastGoodRejection, PublishReason, PublishedBundle, active_grants, bundle_configmap,
    last_good, plan_bundle, usable_grants,
};
pub use reconcile::{error_policy, reconcile};
pub use status::{
    Published, Serving, Shadowing, condition, invalid_status, ready_status, rejection_message,
};
pub use toolgate_k8s::names::{
    ANN_CANDIDATE_VERSION, ANN_DIGEST, ANN_EXPIRES_AT, ANN_ISSUED_AT, ANN_KEY_ID, ANN_SEQUENCE,
    ANN_VERSION, BUNDLE_KEY, FINALIZER, LABEL_PROFILE, bundle_configmap as configmap_name,
};
