//! Bundle planning, pure: what the bundle ConfigMap holds, whether to sign,
//! which grants go in, and whether the last good bundle may be re-signed.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use toolgate_bundle::{BundleDocument, TrustSet, VerifyOptions};
use toolgate_k8s::names;
use toolgate_policy::{CompiledPolicy, Grant, PolicyError, PolicySpec};

use super::{
    ANN_CANDIDATE_VERSION, ANN_DIGEST, ANN_EXPIRES_AT, ANN_ISSUED_AT, ANN_KEY_ID, ANN_SEQUENCE,
    ANN_VERSION, BUNDLE_KEY, LABEL_PROFILE, configmap_name,
};
use crate::crd::{Approval, Decision, PolicyProfile, PolicyProfileStatus};
use crate::error::ControllerError;

/// What a bundle ConfigMap says it holds (from its annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedBundle {
    /// Policy version.
    pub version: String,
    /// Policy version of the candidate it shadows, if any.
    pub candidate: Option<String>,
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
            candidate: a.get(ANN_CANDIDATE_VERSION).cloned(),
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
            candidate: doc
                .candidate
                .as_ref()
                .map(|c| c.policy_version.version.clone()),
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
    /// The policy version changed (spec or grants), or the candidate's.
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
    /// The published bundle is current; look again at its
    /// [`resign_at`](PublishedBundle::resign_at).
    Keep(PublishedBundle),
}

/// Decides whether to sign: only when the content (`version`, and the
/// `candidate` version shadowed beside it) differs from the published
/// bundle, nothing is published, or re-signing is due. The
/// next sequence is one more than anything seen (ConfigMap or status), so
/// it grows even if one of the two was lost.
pub fn plan_bundle(
    published: Option<&PublishedBundle>,
    status_sequence: Option<u64>,
    version: &str,
    candidate: Option<&str>,
    now: Timestamp,
    validity: SignedDuration,
) -> BundlePlan {
    let reason = match published {
        None => Some(PublishReason::Initial),
        Some(p) if p.version != version || p.candidate.as_deref() != candidate => {
            Some(PublishReason::Changed)
        }
        Some(p) if now >= p.resign_at() => Some(PublishReason::Refresh),
        Some(_) => None,
    };
    match (reason, published) {
        (None, Some(p)) => BundlePlan::Keep(p.clone()),
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
pub(crate) fn approvers_of(profile: &PolicyProfile) -> &[String] {
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
    let mut annotations = BTreeMap::from([
        (ANN_VERSION.to_owned(), doc.policy_version.version.clone()),
        (ANN_DIGEST.to_owned(), doc.digest()),
        (ANN_SEQUENCE.to_owned(), doc.sequence.to_string()),
        (ANN_ISSUED_AT.to_owned(), doc.issued_at.to_string()),
        (ANN_EXPIRES_AT.to_owned(), doc.expires_at.to_string()),
        (ANN_KEY_ID.to_owned(), key_id.to_owned()),
    ]);
    if let Some(candidate) = &doc.candidate {
        annotations.insert(
            ANN_CANDIDATE_VERSION.to_owned(),
            candidate.policy_version.version.clone(),
        );
    }
    let labels = BTreeMap::from([
        (LABEL_PROFILE.to_owned(), name.clone()),
        (
            names::LABEL_MANAGED_BY.to_owned(),
            crate::MANAGER.to_owned(),
        ),
        (names::LABEL_PART_OF.to_owned(), names::PART_OF.to_owned()),
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
