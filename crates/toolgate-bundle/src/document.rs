//! The bundle document: what is signed, in canonical bytes.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::digest::{canonical_json, sha256_hex};
use toolgate_policy::{CompiledPolicy, Grant, PolicySpec, PolicyVersion};

use crate::error::BundleError;

/// Version of the document layout. Bumped only for incompatible changes;
/// a verifier refuses formats it does not know rather than guessing.
pub const FORMAT_VERSION: u32 = 1;

/// Which profile a bundle is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileRef {
    /// Profile name; the prefix of the policy version.
    pub name: String,
    /// Namespace of the PolicyProfile resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The content address of the policy, signed so that a verifier can check
/// the claim against the content (a mismatch is `bundle_version_mismatch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyHashes {
    /// `{profile}@{sha12}+h{sha8}`.
    pub version: String,
    /// Full SHA-256 of the spec without hardline, plus grants.
    pub spec_sha256: String,
    /// Full SHA-256 of the hardline section.
    pub hardline_sha256: String,
}

impl From<&PolicyVersion> for PolicyHashes {
    fn from(v: &PolicyVersion) -> Self {
        Self {
            version: v.version.clone(),
            spec_sha256: v.spec_sha256.clone(),
            hardline_sha256: v.hardline_sha256.clone(),
        }
    }
}

/// Everything a sidecar enforces for one profile, and the freshness data
/// that stops an old bundle from being replayed.
///
/// Rejects unknown fields: a field this build does not understand might
/// be a restriction it would silently fail to enforce.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BundleDocument {
    /// Always [`FORMAT_VERSION`] for documents this build writes.
    pub format_version: u32,
    /// The profile the bundle is for.
    pub profile: ProfileRef,
    /// Content address of `spec` + `grants`, as the signer computed it.
    pub policy_version: PolicyHashes,
    /// Grows with every bundle published for the profile; verifiers refuse
    /// a lower sequence than the one they hold.
    pub sequence: u64,
    /// When the signer made the bundle.
    pub issued_at: Timestamp,
    /// After this instant the bundle no longer authorizes anything.
    pub expires_at: Timestamp,
    /// The profile spec, hardline included.
    pub spec: PolicySpec,
    /// Standing grants compiled into this bundle (always present, maybe empty).
    pub grants: Vec<Grant>,
    /// A candidate policy sidecars evaluate beside `spec` on every call and
    /// never enforce (shadow mode): what it would have decided is recorded
    /// with each decision. Absent in bundles without one, so their bytes
    /// and digests are what they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CandidateSection>,
}

/// The candidate a bundle carries: its own name and spec, evaluated with
/// the bundle's grants, and its content address as the signer computed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CandidateSection {
    /// The candidate's profile name; the prefix of its policy version.
    pub name: String,
    /// Content address of the candidate's spec and the bundle's grants.
    pub policy_version: PolicyHashes,
    /// The candidate spec.
    pub spec: PolicySpec,
}

/// What the builder needs; every value is passed in (no clock, no
/// randomness) so the same inputs give the same bytes.
#[derive(Debug, Clone)]
pub struct BundleInput {
    /// The profile the bundle is for.
    pub profile: ProfileRef,
    /// The spec to enforce.
    pub spec: PolicySpec,
    /// Standing grants to compile in.
    pub grants: Vec<Grant>,
    /// Publication sequence number for this profile.
    pub sequence: u64,
    /// Issue instant.
    pub issued_at: Timestamp,
    /// Expiry instant; must be after `issued_at`.
    pub expires_at: Timestamp,
}

impl BundleDocument {
    /// Builds a document, refusing any policy that does not compile (a signer
    /// must never publish what a verifier would reject) and computing the
    /// policy version from the content.
    pub fn new(input: BundleInput) -> Result<Self, BundleError> {
        if input.expires_at <= input.issued_at {
            return Err(BundleError::InvalidInput {
                field: "expiresAt",
                message: format!(
                    "must be after issuedAt ({} is not after {})",
                    input.expires_at, input.issued_at
                ),
            });
        }
        let doc = Self {
            format_version: FORMAT_VERSION,
            policy_version: PolicyHashes::from(&PolicyVersion::compute(
                &input.profile.name,
                &input.spec,
                &input.grants,
            )),
            profile: input.profile,
            sequence: input.sequence,
            issued_at: input.issued_at,
            expires_at: input.expires_at,
            spec: without_candidate_ref(input.spec),
            grants: input.grants,
            candidate: None,
        };
        doc.compile()?;
        Ok(doc)
    }

    /// Adds a candidate to shadow (`name`, `spec`), refusing one that does
    /// not compile: a sidecar would refuse the whole bundle.
    pub fn with_candidate(mut self, name: &str, spec: PolicySpec) -> Result<Self, BundleError> {
        let spec = without_candidate_ref(spec);
        let version = PolicyVersion::compute(name, &spec, &self.grants);
        self.candidate = Some(CandidateSection {
            name: name.to_owned(),
            policy_version: PolicyHashes::from(&version),
            spec,
        });
        self.compile_candidate()?;
        Ok(self)
    }

    /// Compiles the candidate, if the bundle carries one, and checks its
    /// signed version against its content (`bundle_version_mismatch`).
    pub fn compile_candidate(&self) -> Result<Option<CompiledPolicy>, BundleError> {
        let Some(candidate) = &self.candidate else {
            return Ok(None);
        };
        let policy = CompiledPolicy::compile(&candidate.name, &candidate.spec, &self.grants)
            .map_err(BundleError::InvalidPolicy)?;
        let actual = PolicyHashes::from(policy.version());
        if candidate.policy_version != actual {
            return Err(BundleError::VersionMismatch {
                claimed: candidate.policy_version.version.clone(),
                actual: actual.version,
            });
        }
        Ok(Some(policy))
    }

    /// Validates the profile reference and compiles the spec with its grants.
    pub fn compile(&self) -> Result<CompiledPolicy, BundleError> {
        if let Some(ns) = &self.profile.namespace {
            toolgate_policy::load::validate_object_name("profile.namespace", ns)
                .map_err(BundleError::InvalidPolicy)?;
        }
        CompiledPolicy::compile(&self.profile.name, &self.spec, &self.grants)
            .map_err(BundleError::InvalidPolicy)
    }

    /// RFC 8785 canonical JSON: the exact bytes that are signed and hashed.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        canonical_json(self)
    }

    /// `sha256:<hex>` of [`canonical_bytes`](Self::canonical_bytes): the bundle's name.
    pub fn digest(&self) -> String {
        digest_of(&self.canonical_bytes())
    }
}

/// `spec` without `candidate`: a reference to another PolicyProfile only
/// the controller resolves (into a candidate section). Signed as it is, it
/// would shadow nothing and older verifiers would refuse the field.
fn without_candidate_ref(mut spec: PolicySpec) -> PolicySpec {
    spec.candidate = None;
    spec
}

/// `sha256:<hex>` of some bytes.
pub(crate) fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}
