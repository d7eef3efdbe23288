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
//! The planning steps are plain functions so they are tested without any API.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use toolgate_bundle::{BundleDocument, BundleInput, ProfileRef, TrustSet, VerifyOptions};
use toolgate_policy::{CompiledPolicy, Grant, PolicyError, PolicySpec, PolicyVersion};
use toolgate_store::ProfileLoad;

use crate::context::Context;
use crate::crd::{Approval, Condition, Decision, FleetStatus, PolicyProfile, PolicyProfileStatus};
use crate::error::ControllerError;

/// Finalizer the controller puts on every PolicyProfile.
pub const FINALIZER: &str = "toolgate.dev/cleanup";
/// Key of the DSSE envelope inside the bundle ConfigMap.
pub const BUNDLE_KEY: &str = "bundle.json";
/// Annotation: policy version of the bundle.
pub const ANN_VERSION: &str = "toolgate.dev/policy-version";
/// Annotation: `sha256:` digest of the bundle document.
pub const ANN_DIGEST: &str = "toolgate.dev/bundle-digest";
/// Annotation: bundle sequence.
pub const ANN_SEQUENCE: &str = "toolgate.dev/sequence";
/// Annotation: issue instant.
pub const ANN_ISSUED_AT: &str = "toolgate.dev/issued-at";
/// Annotation: expiry instant.
pub const ANN_EXPIRES_AT: &str = "toolgate.dev/expires-at";
/// Annotation: key id that signed the bundle.
pub const ANN_KEY_ID: &str = "toolgate.dev/key-id";
/// Label: profile name on the bundle ConfigMap.
pub const LABEL_PROFILE: &str = "toolgate.dev/profile";

/// Name of the bundle ConfigMap of profile `name`.
pub fn configmap_name(name: &str) -> String {
    format!("toolgate-bundle-{name}")
}

/// What a bundle ConfigMap says it holds (from its annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedBundle {
    /// Policy version.
    pub version: String,
    /// Document digest.
    pub digest: String,
    /// Sequence.
    pub sequence: u64,
    /// Issue instant.
    pub issued_at: Timestamp,
    /// Expiry instant.
    pub expires_at: Timestamp,
}

impl PublishedBundle {
    /// Reads the annotations of a bundle ConfigMap; `None` when any is
    /// missing or malformed (the ConfigMap is then treated as absent and
    /// overwritten by the next publication).
    pub fn from_configmap(cm: &ConfigMap) -> Option<Self> {
        let a = cm.metadata.annotations.as_ref()?;
        cm.data.as_ref()?.get(BUNDLE_KEY)?;
        Some(Self {
            version: a.get(ANN_VERSION)?.clone(),
            digest: a.get(ANN_DIGEST)?.clone(),
            sequence: a.get(ANN_SEQUENCE)?.parse().ok()?,
            issued_at: a.get(ANN_ISSUED_AT)?.parse().ok()?,
            expires_at: a.get(ANN_EXPIRES_AT)?.parse().ok()?,
        })
    }

    /// The state a freshly built document describes.
    pub fn from_document(doc: &BundleDocument) -> Self {
        Self {
            version: doc.policy_version.version.clone(),
            digest: doc.digest(),
            sequence: doc.sequence,
            issued_at: doc.issued_at,
            expires_at: doc.expires_at,
        }
    }

    /// When the bundle must be re-signed: once less than a third of its
    /// validity remains.
    pub fn resign_at(&self) -> Timestamp {
        let validity = self.expires_at.duration_since(self.issued_at);
        self.expires_at - validity / 3
    }
}

/// Why a new bundle is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishReason {
    /// Nothing (readable) is published yet.
    Initial,
    /// The policy version changed (spec or grants).
    Changed,
    /// Same content, but the published bundle is close to its expiry.
    Refresh,
}

/// What to do with the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundlePlan {
    /// Publish a new bundle.
    Publish {
        /// Sequence of the new bundle.
        sequence: u64,
        /// Issue instant.
        issued_at: Timestamp,
        /// Expiry instant.
        expires_at: Timestamp,
        /// Why.
        reason: PublishReason,
    },
    /// The published bundle is current; look again at `resign_at`.
    Keep {
        /// When the published bundle needs re-signing.
        resign_at: Timestamp,
    },
}

/// Decides whether to sign: only when the content (`version`) differs from
/// the published bundle, nothing is published, or re-signing is due. The
/// next sequence is one more than anything seen (ConfigMap or status), so
/// it grows even if one of the two was lost.
pub fn plan_bundle(
    published: Option<&PublishedBundle>,
    status_sequence: Option<u64>,
    version: &str,
    now: Timestamp,
    validity: SignedDuration,
) -> BundlePlan {
    let reason = match published {
        None => Some(PublishReason::Initial),
        Some(p) if p.version != version => Some(PublishReason::Changed),
        Some(p) if now >= p.resign_at() => Some(PublishReason::Refresh),
        Some(_) => None,
    };
    match (reason, published) {
        (None, Some(p)) => BundlePlan::Keep {
            resign_at: p.resign_at(),
        },
        (reason, _) => {
            let last = published
                .map(|p| p.sequence)
                .max(status_sequence)
                .unwrap_or(0);
            BundlePlan::Publish {
                sequence: last + 1,
                issued_at: now,
                expires_at: now + validity,
                reason: reason.unwrap_or(PublishReason::Initial),
            }
        }
    }
}

/// The active standing grants of profile `profile` among `approvals`
/// (already restricted to the profile's namespace): approved by a decider
/// the profile's `approvers` allow (see
/// [`decider_allowed`](crate::approval::decider_allowed)) and not expired
/// at `now`. Sorted and deduplicated so the policy version does not depend
/// on list order. Also returns the earliest expiry among them, when the
/// bundle must drop a grant.
pub fn active_grants(
    approvals: &[Approval],
    profile: &str,
    approvers: &[String],
    now: Timestamp,
) -> (Vec<Grant>, Option<Timestamp>) {
    let mut grants = Vec::new();
    let mut next_expiry: Option<Timestamp> = None;
    for a in approvals {
        let Some(g) = &a.spec.grant else { continue };
        if g.profile != profile
            || a.spec.decision != Some(Decision::Approved)
            || a.metadata.deletion_timestamp.is_some()
            || !crate::approval::decider_allowed(approvers, &a.spec)
        {
            continue;
        }
        let Ok(expires) = g.expires_at.parse::<Timestamp>() else {
            continue;
        };
        if expires <= now {
            continue;
        }
        next_expiry = Some(next_expiry.map_or(expires, |n| n.min(expires)));
        grants.push(g.to_policy_grant());
    }
    grants.sort_by(|a, b| {
        (&a.tool, &a.glob, &a.expires_at, &a.subjects).cmp(&(
            &b.tool,
            &b.glob,
            &b.expires_at,
            &b.subjects,
        ))
    });
    grants.dedup();
    (grants, next_expiry)
}

/// `spec.approvals.approvers` of a profile (empty: anyone RBAC allows).
fn approvers_of(profile: &PolicyProfile) -> &[String] {
    profile
        .spec
        .approvals
        .as_ref()
        .map(|a| a.approvers.as_slice())
        .unwrap_or_default()
}

/// Keeps the grants that compile with the spec; returns the others with
/// their error (a bad grant must not take the whole profile down).
pub fn usable_grants(
    name: &str,
    spec: &PolicySpec,
    grants: Vec<Grant>,
) -> (Vec<Grant>, Vec<(Grant, PolicyError)>) {
    if grants.is_empty() || CompiledPolicy::compile(name, spec, &grants).is_ok() {
        return (grants, Vec::new());
    }
    let mut kept = Vec::new();
    let mut rejected = Vec::new();
    for g in grants {
        match CompiledPolicy::compile(name, spec, std::slice::from_ref(&g)) {
            Ok(_) => kept.push(g),
            Err(e) => rejected.push((g, e)),
        }
    }
    (kept, rejected)
}

/// The bundle ConfigMap applied for `profile` (server-side apply body).
pub fn bundle_configmap(
    profile: &PolicyProfile,
    doc: &BundleDocument,
    envelope: &[u8],
    key_id: &str,
) -> Result<ConfigMap, ControllerError> {
    let name = profile.name_any();
    let text = String::from_utf8(envelope.to_vec())
        .map_err(|_| ControllerError::Serialization("envelope is not UTF-8".into()))?;
    let annotations = BTreeMap::from([
        (ANN_VERSION.to_owned(), doc.policy_version.version.clone()),
        (ANN_DIGEST.to_owned(), doc.digest()),
        (ANN_SEQUENCE.to_owned(), doc.sequence.to_string()),
        (ANN_ISSUED_AT.to_owned(), doc.issued_at.to_string()),
        (ANN_EXPIRES_AT.to_owned(), doc.expires_at.to_string()),
        (ANN_KEY_ID.to_owned(), key_id.to_owned()),
    ]);
    let labels = BTreeMap::from([
        (LABEL_PROFILE.to_owned(), name.clone()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            crate::MANAGER.to_owned(),
        ),
        (
            "app.kubernetes.io/part-of".to_owned(),
            "toolgate".to_owned(),
        ),
    ]);
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(&name)),
            namespace: profile.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: profile.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(BUNDLE_KEY.to_owned(), text)])),
        ..Default::default()
    })
}

/// A condition, keeping `lastTransitionTime` from `previous` when the
/// status did not change.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.to_string());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// Everything the status of a successfully reconciled profile is made of.
#[derive(Debug, Clone)]
pub struct Published<'a> {
    /// The bundle now in the ConfigMap.
    pub bundle: &'a PublishedBundle,
    /// Number of grants compiled in.
    pub grants: usize,
    /// Fleet counts.
    pub fleet: FleetStatus,
    /// Stale pods, for the `Stale` message.
    pub stale_pods: Vec<String>,
}

/// Status after a successful reconcile: `Valid=True/Compiled`,
/// `Ready=True/Published`, `Stale` per the fleet.
pub fn ready_status(
    previous: &PolicyProfileStatus,
    name: &str,
    published: &Published<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> PolicyProfileStatus {
    let b = published.bundle;
    let prev = &previous.conditions;
    let stale = published.fleet.stale > 0;
    let stale_message = if stale {
        let mut pods = published.stale_pods.clone();
        let more = pods.len().saturating_sub(5);
        pods.truncate(5);
        let suffix = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!(
            "{} of {} pods are not on {}: {}{suffix}",
            published.fleet.stale,
            published.fleet.total,
            b.version,
            pods.join(", ")
        )
    } else {
        format!(
            "{} of {} pods run {}",
            published.fleet.current, published.fleet.total, b.version
        )
    };
    PolicyProfileStatus {
        version: Some(b.version.clone()),
        bundle_digest: Some(b.digest.clone()),
        bundle_ref: Some(configmap_name(name)),
        sequence: Some(b.sequence),
        issued_at: Some(b.issued_at.to_string()),
        expires_at: Some(b.expires_at.to_string()),
        grants: Some(published.grants as u32),
        observed_generation: generation,
        fleet: Some(published.fleet),
        conditions: vec![
            condition(
                prev,
                "Valid",
                true,
                "Compiled",
                format!("spec compiles as {}", b.version),
                generation,
                now,
            ),
            condition(
                prev,
                "Ready",
                true,
                "Published",
                format!(
                    "bundle sequence {} published in ConfigMap {}",
                    b.sequence,
                    configmap_name(name)
                ),
                generation,
                now,
            ),
            condition(
                prev,
                "Stale",
                stale,
                if stale { "PodsBehind" } else { "AllCurrent" },
                stale_message,
                generation,
                now,
            ),
        ],
    }
}

/// The message of `Valid=False`: error code, field and text.
pub fn rejection_message(err: &PolicyError) -> String {
    match err.field() {
        Some(field) => format!("{} at {field}: {err}", err.code()),
        None => format!("{}: {err}", err.code()),
    }
}

/// What an invalid profile still serves, for its status.
#[derive(Debug, Clone)]
pub enum Serving<'a> {
    /// The verified last good bundle (maybe just re-signed) is in the ConfigMap.
    LastGood {
        /// The bundle now in the ConfigMap.
        bundle: &'a PublishedBundle,
        /// Number of grants compiled into it.
        grants: usize,
    },
    /// Nothing a sidecar would accept: `reason` is `NoValidBundle` (nothing
    /// published) or `LastGoodUnusable` (the ConfigMap's bundle failed
    /// verification).
    Nothing {
        /// `Ready` reason.
        reason: &'static str,
        /// `Ready` message.
        message: String,
    },
}

/// Status after a rejected spec: `Valid=False/InvalidSpec`, and `Ready`
/// says what is still served ([`Serving`]): `Ready=True/ServingLastGood`
/// with the served bundle's version, sequence and expiry in both the
/// message and the status fields, or `Ready=False`. The fleet and the
/// `Stale` condition stay as they were.
pub fn invalid_status(
    previous: &PolicyProfileStatus,
    err: &PolicyError,
    serving: &Serving<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> PolicyProfileStatus {
    let prev = &previous.conditions;
    let mut status = previous.clone();
    status.observed_generation = generation;
    let gen_text = generation.map_or_else(String::new, |g| format!(" (generation {g})"));
    let ready = match serving {
        Serving::LastGood { bundle, grants } => {
            status.version = Some(bundle.version.clone());
            status.bundle_digest = Some(bundle.digest.clone());
            status.sequence = Some(bundle.sequence);
            status.issued_at = Some(bundle.issued_at.to_string());
            status.expires_at = Some(bundle.expires_at.to_string());
            status.grants = Some(u32::try_from(*grants).unwrap_or(u32::MAX));
            condition(
                prev,
                "Ready",
                true,
                "ServingLastGood",
                format!(
                    "spec{gen_text} is invalid; serving last good {} as sequence {} until {} \
                     (re-signed before expiry while the spec stays invalid)",
                    bundle.version, bundle.sequence, bundle.expires_at
                ),
                generation,
                now,
            )
        }
        Serving::Nothing { reason, message } => condition(
            prev,
            "Ready",
            false,
            reason,
            format!("spec{gen_text} is invalid; {message}"),
            generation,
            now,
        ),
    };
    let mut conditions = vec![
        condition(
            prev,
            "Valid",
            false,
            "InvalidSpec",
            rejection_message(err),
            generation,
            now,
        ),
        ready,
    ];
    conditions.extend(
        previous
            .conditions
            .iter()
            .filter(|c| c.type_ == "Stale")
            .cloned(),
    );
    status.conditions = conditions;
    status
}

/// Why the bundle in the ConfigMap cannot be served as the last good one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastGoodRejection {
    /// No ConfigMap, or no `bundle.json` in it.
    Missing,
    /// The status records no published bundle (sequence and digest), so
    /// nothing says which signed bundle is the latest one.
    NotRecorded,
    /// The envelope does not verify with the controller's key, or it is
    /// older than, or differs from, the bundle the status recorded (a
    /// replay); the error code and message.
    Untrusted(String),
    /// Signed by the controller, but for another profile.
    WrongProfile(String),
}

impl std::fmt::Display for LastGoodRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(f, "the bundle ConfigMap holds no bundle"),
            Self::NotRecorded => write!(
                f,
                "the status records no published bundle to check the ConfigMap against"
            ),
            Self::Untrusted(e) => write!(f, "the ConfigMap's bundle is not trusted: {e}"),
            Self::WrongProfile(p) => {
                write!(f, "the ConfigMap's bundle was signed for profile {p}")
            }
        }
    }
}

/// The last good document of profile `namespace/name`, from its bundle
/// ConfigMap, only if it is trustworthy enough to re-sign:
/// - the envelope verifies against `trust` (the controller's own key);
/// - its sequence is at least the one `status` recorded, and at that same
///   sequence its digest is the recorded one (no replay of an older bundle,
///   no equivocation);
/// - it names this profile and namespace.
///
/// Expiry is deliberately not checked: a bundle that expired (the controller
/// was down) is still the last good one and is re-signed.
pub fn last_good(
    cm: Option<&ConfigMap>,
    trust: &TrustSet,
    namespace: &str,
    name: &str,
    status: &PolicyProfileStatus,
) -> Result<BundleDocument, LastGoodRejection> {
    let envelope = cm
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(BUNDLE_KEY))
        .ok_or(LastGoodRejection::Missing)?;
    let Some(held) = status.sequence else {
        return Err(LastGoodRejection::NotRecorded);
    };
    let options = VerifyOptions {
        // Expiry is judged by the caller (an expired last good bundle is re-signed).
        now: Timestamp::MIN,
        held_sequence: Some(held),
        held_digest: status.bundle_digest.clone(),
    };
    let verified = toolgate_bundle::verify(envelope.as_bytes(), trust, &options)
        .map_err(|e| LastGoodRejection::Untrusted(format!("{}: {e}", e.code())))?;
    let doc = verified.document();
    if doc.profile.name != name || doc.profile.namespace.as_deref() != Some(namespace) {
        return Err(LastGoodRejection::WrongProfile(format!(
            "{}/{}",
            doc.profile.namespace.as_deref().unwrap_or("-"),
            doc.profile.name
        )));
    }
    Ok(doc.clone())
}

fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d)
        .unwrap_or(Duration::ZERO)
        .max(Duration::from_secs(1))
}

fn ns_and_name(p: &PolicyProfile) -> Result<(String, String), ControllerError> {
    let ns = p
        .namespace()
        .ok_or_else(|| ControllerError::InvalidObject("PolicyProfile without namespace".into()))?;
    Ok((ns, p.name_any()))
}

/// Reconciles one PolicyProfile (the `Controller`'s reconcile fn): adds the
/// finalizer, then applies or cleans up.
pub async fn reconcile(
    profile: Arc<PolicyProfile>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let timer = ctx.metrics.start("policyprofile");
    let (ns, name) = ns_and_name(&profile)?;
    let span = tracing::info_span!("reconcile", controller = "policyprofile", namespace = %ns, profile = %name);
    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), &ns);
    let result = tracing::Instrument::instrument(
        async {
            finalizer(&api, FINALIZER, profile, |event| async {
                match event {
                    Finalizer::Apply(p) => apply(&p, &ctx).await,
                    Finalizer::Cleanup(p) => cleanup(&p, &ctx).await,
                }
            })
            .await
            .map_err(ControllerError::from)
        },
        span,
    )
    .await;
    timer.finish(&result);
    result
}

/// What the Controller does after a failed reconcile: log and retry soon.
pub fn error_policy(
    profile: Arc<PolicyProfile>,
    error: &ControllerError,
    _ctx: Arc<Context>,
) -> Action {
    tracing::warn!(profile = %profile.name_any(), code = error.code(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

async fn patch_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    status: &PolicyProfileStatus,
) -> Result<(), ControllerError> {
    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"status": status});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn reject(
    profile: &PolicyProfile,
    ctx: &Context,
    err: PolicyError,
) -> Result<Action, ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let now = ctx.now();
    let generation = profile.metadata.generation;
    let previous = profile.status.clone().unwrap_or_default();
    tracing::warn!(code = err.code(), field = ?err.field(), "spec rejected");

    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let cm = cms.get_opt(&configmap_name(&name)).await?;
    let trust = TrustSet::from_keys([ctx.key.public_key()])?;
    let (served, rejection) = match last_good(cm.as_ref(), &trust, &ns, &name, &previous) {
        Ok(doc) => {
            let current = PublishedBundle::from_document(&doc);
            let plan = plan_bundle(
                Some(&current),
                previous.sequence,
                &current.version,
                now,
                ctx.settings.bundle_validity,
            );
            let served = match plan {
                BundlePlan::Publish {
                    sequence,
                    issued_at,
                    expires_at,
                    ..
                } => resign_last_good(profile, ctx, doc, sequence, issued_at, expires_at).await?,
                BundlePlan::Keep { .. } => (current, doc.grants.len()),
            };
            (Some(served), None)
        }
        Err(rejection) => (None, Some(rejection)),
    };
    let serving = match (&served, &rejection) {
        (Some((bundle, grants)), _) => Serving::LastGood {
            bundle,
            grants: *grants,
        },
        (None, Some(LastGoodRejection::Missing)) => Serving::Nothing {
            reason: "NoValidBundle",
            message: format!("ConfigMap {} holds no bundle", configmap_name(&name)),
        },
        (None, r) => Serving::Nothing {
            reason: "LastGoodUnusable",
            message: format!(
                "not re-signing ConfigMap {}: {}",
                configmap_name(&name),
                r.as_ref().map(ToString::to_string).unwrap_or_default()
            ),
        },
    };
    let status = invalid_status(&previous, &err, &serving, generation, now);

    // One InvalidSpec event per rejected generation/message, not one per re-sign.
    let valid_before = previous.conditions.iter().find(|c| c.type_ == "Valid");
    let newly_rejected = previous.observed_generation != generation
        || valid_before.is_none_or(|c| {
            c.status != "False" || c.reason != "InvalidSpec" || c.message != rejection_message(&err)
        });
    if newly_rejected {
        ctx.event(
            &profile.object_ref(&()),
            Event {
                type_: EventType::Warning,
                reason: "InvalidSpec".into(),
                note: Some(rejection_message(&err)),
                action: "Validate".into(),
                secondary: None,
            },
        )
        .await;
    }
    if let Some(r) = rejection
        .as_ref()
        .filter(|r| **r != LastGoodRejection::Missing)
        && status != previous
    {
        tracing::warn!(reason = %r, "last good bundle not re-signed");
        ctx.event(
            &profile.object_ref(&()),
            Event {
                type_: EventType::Warning,
                reason: "LastGoodRejected".into(),
                note: Some(format!("not re-signing {}: {r}", configmap_name(&name))),
                action: "Resign".into(),
                secondary: None,
            },
        )
        .await;
    }
    ctx.metrics.observe_profile(&ns, &name, &status);
    if status != previous {
        patch_status(ctx, &ns, &name, &status).await?;
    }
    match &served {
        // Come back when the served bundle needs re-signing, spec change or not.
        Some((bundle, _)) => Ok(Action::requeue(to_std(
            bundle.resign_at().duration_since(now),
        ))),
        // Nothing to keep fresh: wait for the spec (or the ConfigMap) to change.
        None => Ok(Action::await_change()),
    }
}

/// Re-signs the verified last good document `doc` as `sequence`, keeping
/// only its grants that are still active, and applies it. Returns the new
/// bundle and its number of grants.
async fn resign_last_good(
    profile: &PolicyProfile,
    ctx: &Context,
    doc: BundleDocument,
    sequence: u64,
    issued_at: Timestamp,
    expires_at: Timestamp,
) -> Result<(PublishedBundle, usize), ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let approvals: Api<Approval> = Api::namespaced(ctx.client.clone(), &ns);
    let list = approvals.list(&ListParams::default()).await?;
    let (active, _) = active_grants(&list.items, &name, approvers_of(profile), issued_at);
    let carried = doc.grants.len();
    let grants: Vec<Grant> = doc
        .grants
        .into_iter()
        .filter(|g| active.contains(g))
        .collect();
    let dropped = carried - grants.len();

    if !ctx.is_trusted(&ns) {
        crate::keys::ensure_trust(&ctx.client, &ns, &ctx.key).await?;
        ctx.mark_trusted(&ns);
    }
    let version = PolicyVersion::compute(&name, &doc.spec, &grants);
    let input = BundleInput {
        profile: doc.profile,
        spec: doc.spec,
        grants,
        sequence,
        issued_at,
        expires_at,
    };
    let (new_doc, bytes) = toolgate_bundle::build(input, &ctx.key)?;
    let cm = bundle_configmap(profile, &new_doc, &bytes, &ctx.key.key_id())?;
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    cms.patch(
        &configmap_name(&name),
        &PatchParams::apply(crate::MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    let current = PublishedBundle::from_document(&new_doc);
    record_load(ctx, &ns, &name, &version, &current).await?;
    tracing::info!(version = %current.version, sequence, dropped, "re-signed last good bundle");
    let dropped_text = if dropped > 0 {
        format!("; {dropped} expired or withdrawn grant(s) dropped")
    } else {
        String::new()
    };
    ctx.event(
        &profile.object_ref(&()),
        Event {
            type_: EventType::Normal,
            reason: "Resigned".into(),
            note: Some(format!(
                "spec is invalid: re-signed last good {} as sequence {} (expires {}){dropped_text}",
                current.version, sequence, current.expires_at
            )),
            action: "Publish".into(),
            secondary: None,
        },
    )
    .await;
    Ok((current, new_doc.grants.len()))
}

async fn apply(profile: &PolicyProfile, ctx: &Context) -> Result<Action, ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let now = ctx.now();
    let spec: PolicySpec = profile.spec.clone().into();
    if let Err(err) = CompiledPolicy::compile(&name, &spec, &[]) {
        return reject(profile, ctx, err).await;
    }

    let approvals: Api<Approval> = Api::namespaced(ctx.client.clone(), &ns);
    let list = approvals.list(&ListParams::default()).await?;
    let (grants, next_grant_expiry) = active_grants(&list.items, &name, approvers_of(profile), now);
    let (grants, rejected) = usable_grants(&name, &spec, grants);
    for (grant, err) in &rejected {
        ctx.event(
            &profile.object_ref(&()),
            Event {
                type_: EventType::Warning,
                reason: "GrantRejected".into(),
                note: Some(format!(
                    "grant for {} `{}` ignored: {}",
                    grant.tool,
                    grant.glob,
                    rejection_message(err)
                )),
                action: "Compile".into(),
                secondary: None,
            },
        )
        .await;
    }
    let version = PolicyVersion::compute(&name, &spec, &grants);

    if !ctx.is_trusted(&ns) {
        crate::keys::ensure_trust(&ctx.client, &ns, &ctx.key).await?;
        ctx.mark_trusted(&ns);
    }
    crate::tenancy::ensure_database_secret(ctx, &ns, &profile.object_ref(&())).await?;

    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let cm_name = configmap_name(&name);
    let published = cms
        .get_opt(&cm_name)
        .await?
        .as_ref()
        .and_then(PublishedBundle::from_configmap);
    let previous = profile.status.clone().unwrap_or_default();
    let plan = plan_bundle(
        published.as_ref(),
        previous.sequence,
        &version.version,
        now,
        ctx.settings.bundle_validity,
    );
    let current = match plan {
        BundlePlan::Publish {
            sequence,
            issued_at,
            expires_at,
            reason,
        } => {
            let input = BundleInput {
                profile: ProfileRef {
                    name: name.clone(),
                    namespace: Some(ns.clone()),
                },
                spec,
                grants: grants.clone(),
                sequence,
                issued_at,
                expires_at,
            };
            let (doc, bytes) = toolgate_bundle::build(input, &ctx.key)?;
            let cm = bundle_configmap(profile, &doc, &bytes, &ctx.key.key_id())?;
            cms.patch(
                &cm_name,
                &PatchParams::apply(crate::MANAGER).force(),
                &Patch::Apply(&cm),
            )
            .await?;
            let current = PublishedBundle::from_document(&doc);
            record_load(ctx, &ns, &name, &version, &current).await?;
            let (reason, note) = match reason {
                PublishReason::Refresh => (
                    "Resigned",
                    format!(
                        "re-signed {} as sequence {} (expires {})",
                        current.version, sequence, current.expires_at
                    ),
                ),
                _ => (
                    "Published",
                    format!(
                        "published {} as sequence {} with {} grant(s)",
                        current.version,
                        sequence,
                        grants.len()
                    ),
                ),
            };
            tracing::info!(version = %current.version, sequence, "bundle published");
            ctx.event(
                &profile.object_ref(&()),
                Event {
                    type_: EventType::Normal,
                    reason: reason.into(),
                    note: Some(note),
                    action: "Publish".into(),
                    secondary: None,
                },
            )
            .await;
            current
        }
        BundlePlan::Keep { .. } => {
            let current = published.expect("keep implies a published bundle");
            if previous.version.as_deref() != Some(current.version.as_str()) {
                // A previous attempt published but did not finish; recording is idempotent.
                record_load(ctx, &ns, &name, &version, &current).await?;
            }
            current
        }
    };

    let heartbeats = crate::fleet::of_profile(
        ctx.store.heartbeats().list_heartbeats(Some(&name)).await?,
        &ns,
        &name,
    );
    let window = ctx.settings.fleet_window;
    let fleet = crate::fleet::count(&heartbeats, Some(&current.version), now, window);
    let stale_pods = crate::fleet::stale_pods(&heartbeats, Some(&current.version), now, window);
    let status = ready_status(
        &previous,
        &name,
        &Published {
            bundle: &current,
            grants: grants.len(),
            fleet,
            stale_pods,
        },
        profile.metadata.generation,
        now,
    );
    ctx.metrics.observe_profile(&ns, &name, &status);
    if status != previous {
        patch_status(ctx, &ns, &name, &status).await?;
    }

    let mut wake = current
        .resign_at()
        .duration_since(now)
        .min(ctx.settings.fleet_refresh);
    if let Some(expiry) = next_grant_expiry {
        wake = wake.min(expiry.duration_since(now));
    }
    Ok(Action::requeue(to_std(wake)))
}

async fn record_load(
    ctx: &Context,
    ns: &str,
    name: &str,
    version: &PolicyVersion,
    current: &PublishedBundle,
) -> Result<(), ControllerError> {
    ctx.store
        .profiles()
        .record_profile_load(
            ProfileLoad {
                profile: name.to_owned(),
                namespace: ns.to_owned(),
                policy_version: version.version.clone(),
                spec_sha256: version.spec_sha256.clone(),
                hardline_sha256: version.hardline_sha256.clone(),
                bundle_digest: Some(current.digest.clone()),
                loaded_by: crate::MANAGER.to_owned(),
            },
            ctx.now(),
        )
        .await?;
    Ok(())
}

async fn cleanup(profile: &PolicyProfile, ctx: &Context) -> Result<Action, ControllerError> {
    let (ns, name) = ns_and_name(profile)?;
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    match cms
        .delete(&configmap_name(&name), &Default::default())
        .await
    {
        Ok(_) => tracing::info!("deleted bundle ConfigMap"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.forget_profile(&ns, &name);
    ctx.event(
        &profile.object_ref(&()),
        Event {
            type_: EventType::Normal,
            reason: "Deleted".into(),
            note: Some(format!("removed ConfigMap {}", configmap_name(&name))),
            action: "Cleanup".into(),
            secondary: None,
        },
    )
    .await;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn published(version: &str, seq: u64, issued: &str) -> PublishedBundle {
        let issued = t(issued);
        PublishedBundle {
            version: version.into(),
            digest: "sha256:00".into(),
            sequence: seq,
            issued_at: issued,
            expires_at: issued + SignedDuration::from_hours(24),
        }
    }

    #[test]
    fn plan_signs_only_on_change_or_near_expiry() {
        let day = SignedDuration::from_hours(24);
        let now = t("2030-01-01T01:00:00Z");
        assert!(matches!(
            plan_bundle(None, None, "p@a", now, day),
            BundlePlan::Publish {
                sequence: 1,
                reason: PublishReason::Initial,
                ..
            }
        ));
        let p = published("p@a", 4, "2030-01-01T00:00:00Z");
        assert_eq!(
            plan_bundle(Some(&p), Some(4), "p@a", now, day),
            BundlePlan::Keep {
                resign_at: t("2030-01-01T16:00:00Z")
            }
        );
        assert!(matches!(
            plan_bundle(Some(&p), Some(7), "p@b", now, day),
            BundlePlan::Publish {
                sequence: 8,
                reason: PublishReason::Changed,
                ..
            }
        ));
        let late = t("2030-01-01T16:00:00Z");
        match plan_bundle(Some(&p), Some(4), "p@a", late, day) {
            BundlePlan::Publish {
                sequence,
                issued_at,
                expires_at,
                reason,
            } => {
                assert_eq!((sequence, reason), (5, PublishReason::Refresh));
                assert_eq!((issued_at, expires_at), (late, late + day));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn conditions_keep_transition_time() {
        let now = t("2030-01-01T00:00:00Z");
        let later = t("2030-01-02T00:00:00Z");
        let c1 = condition(&[], "Ready", true, "Published", "a".into(), Some(1), now);
        let c2 = condition(
            std::slice::from_ref(&c1),
            "Ready",
            true,
            "Published",
            "b".into(),
            Some(2),
            later,
        );
        assert_eq!(c2.last_transition_time, now.to_string());
        let c3 = condition(
            &[c2],
            "Ready",
            false,
            "NoValidBundle",
            "c".into(),
            Some(3),
            later,
        );
        assert_eq!(c3.last_transition_time, later.to_string());
    }
}
