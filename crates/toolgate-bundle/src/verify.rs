//! Verification: from untrusted envelope bytes to a policy ready to evaluate.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jiff::Timestamp;
use toolgate_policy::CompiledPolicy;
use toolgate_policy::digest::canonical_json;

use crate::document::{BundleDocument, FORMAT_VERSION, PolicyHashes, digest_of};
use crate::envelope::{Envelope, PAYLOAD_TYPE, pae};
use crate::error::BundleError;
use crate::trust::TrustSet;

/// What verification needs from outside: the clock and what the caller
/// already enforces. Passed in so verification is a pure function.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The current time; `now >= expiresAt` is `bundle_expired`.
    pub now: Timestamp,
    /// Sequence of the bundle currently enforced, if any; a lower sequence
    /// is `bundle_rollback`.
    pub held_sequence: Option<u64>,
    /// Digest of the bundle currently enforced, if known. With it, a bundle
    /// at the held sequence must have the held digest (a reload of the same
    /// bundle); a different one is equivocation, reported as
    /// `bundle_rollback`. Without it, an equal sequence is accepted.
    pub held_digest: Option<String>,
}

impl VerifyOptions {
    /// Options for a verifier that holds nothing yet.
    pub fn at(now: Timestamp) -> Self {
        Self {
            now,
            held_sequence: None,
            held_digest: None,
        }
    }

    /// Options for a verifier that enforces a bundle already.
    pub fn holding(now: Timestamp, sequence: u64, digest: impl Into<String>) -> Self {
        Self {
            now,
            held_sequence: Some(sequence),
            held_digest: Some(digest.into()),
        }
    }
}

/// A bundle that passed every check. Only [`verify`] makes one, so holding
/// a `VerifiedBundle` is proof the checks ran.
#[derive(Debug, Clone)]
pub struct VerifiedBundle {
    document: BundleDocument,
    policy: CompiledPolicy,
    candidate: Option<CompiledPolicy>,
    digest: String,
    keyid: String,
}

impl VerifiedBundle {
    /// The signed document.
    pub fn document(&self) -> &BundleDocument {
        &self.document
    }
    /// The compiled policy, ready to evaluate (no second compile needed).
    pub fn policy(&self) -> &CompiledPolicy {
        &self.policy
    }
    /// Takes the compiled policy, e.g. to put it behind an `Arc`.
    pub fn into_policy(self) -> CompiledPolicy {
        self.policy
    }
    /// The compiled policy and the candidate it shadows, if any.
    pub fn into_policies(self) -> (CompiledPolicy, Option<CompiledPolicy>) {
        (self.policy, self.candidate)
    }
    /// `sha256:<hex>` of the signed payload bytes: the bundle's name.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// Key id of the trusted key whose signature verified.
    pub fn keyid(&self) -> &str {
        &self.keyid
    }
    /// `{profile}@{sha12}+h{sha8}`, recomputed from the content.
    pub fn policy_version(&self) -> &str {
        &self.policy.version().version
    }
    /// The signed sequence number.
    pub fn sequence(&self) -> u64 {
        self.document.sequence
    }
    /// The signed expiry.
    pub fn expires_at(&self) -> Timestamp {
        self.document.expires_at
    }
}

/// Verifies envelope bytes against a trust set. Checks, in this order, each
/// with its own code: envelope syntax and size (`bundle_malformed`), payload
/// type (`bundle_payload_type`), a signature naming a trusted key
/// (`bundle_unknown_key`), that signature over the DSSE PAE with
/// `verify_strict` (`bundle_bad_signature`), canonical form and format
/// (`bundle_not_canonical`, `bundle_unsupported_format`), document shape
/// and policy compilation (`bundle_invalid_policy`), the signed policy
/// version against the content (`bundle_version_mismatch`), expiry
/// (`bundle_expired`) and sequence (`bundle_rollback`).
///
/// Nothing is parsed as a document before its signature verifies, so a
/// parser bug is only reachable by a trusted signer.
pub fn verify(
    envelope_bytes: &[u8],
    trust: &TrustSet,
    options: &VerifyOptions,
) -> Result<VerifiedBundle, BundleError> {
    let envelope = Envelope::from_bytes(envelope_bytes)?;
    let payload = envelope.payload_bytes()?;

    if envelope.payload_type != PAYLOAD_TYPE {
        return Err(BundleError::PayloadType {
            found: envelope.payload_type,
            expected: PAYLOAD_TYPE,
        });
    }

    let keyid = check_signatures(&envelope, &payload, trust)?;
    let document = decode_document(&payload)?;
    let policy = document.compile()?;
    let candidate = document.compile_candidate()?;

    let actual = PolicyHashes::from(policy.version());
    if document.policy_version != actual {
        return Err(BundleError::VersionMismatch {
            claimed: document.policy_version.version.clone(),
            actual: actual.version,
        });
    }

    if options.now >= document.expires_at {
        return Err(BundleError::Expired {
            expires_at: document.expires_at,
            now: options.now,
        });
    }

    let digest = digest_of(&payload);
    if let Some(held) = options.held_sequence {
        if document.sequence < held {
            return Err(BundleError::Rollback {
                sequence: document.sequence,
                held,
            });
        }
        if document.sequence == held
            && let Some(held_digest) = &options.held_digest
            && *held_digest != digest
        {
            return Err(BundleError::Equivocation {
                sequence: held,
                digest,
                held_digest: held_digest.clone(),
            });
        }
    }

    Ok(VerifiedBundle {
        document,
        policy,
        candidate,
        digest,
        keyid,
    })
}

/// Verifies a DSSE envelope of `payload_type` (not a bundle: see
/// [`Envelope::sign_typed`]) against a trust set and returns the signed
/// payload bytes and the key id that verified. The same checks and codes as
/// [`verify`] up to the signature; the payload is for the caller to parse.
pub fn verify_typed(
    envelope_bytes: &[u8],
    payload_type: &'static str,
    trust: &TrustSet,
) -> Result<(Vec<u8>, String), BundleError> {
    let envelope = Envelope::from_bytes(envelope_bytes)?;
    let payload = envelope.payload_bytes()?;
    if envelope.payload_type != payload_type {
        return Err(BundleError::PayloadType {
            found: envelope.payload_type,
            expected: payload_type,
        });
    }
    let keyid = check_signatures(&envelope, &payload, trust)?;
    Ok((payload, keyid))
}

/// The key id of the first trusted signature that verifies.
fn check_signatures(
    envelope: &Envelope,
    payload: &[u8],
    trust: &TrustSet,
) -> Result<String, BundleError> {
    let mut first_failure = None;
    let mut message = None;
    for signature in &envelope.signatures {
        let Some(key) = trust.get(&signature.keyid) else {
            continue;
        };
        let message = message.get_or_insert_with(|| pae(&envelope.payload_type, payload));
        let valid = match STANDARD.decode(&signature.sig) {
            Ok(bytes) => match <[u8; 64]>::try_from(bytes.as_slice()) {
                Ok(sig) => key.verify_strict(message, &sig),
                Err(_) => false,
            },
            Err(_) => false,
        };
        if valid {
            return Ok(signature.keyid.clone());
        }
        first_failure.get_or_insert_with(|| signature.keyid.clone());
    }
    match first_failure {
        Some(keyid) => Err(BundleError::BadSignature { keyid }),
        None => Err(BundleError::UnknownKey {
            found: envelope.key_ids(),
            trusted: trust.key_ids().map(str::to_owned).collect(),
        }),
    }
}

/// Parses signed payload bytes into a document, strictly.
fn decode_document(payload: &[u8]) -> Result<BundleDocument, BundleError> {
    // Fast path: straight from bytes. Only a failure pays for the slower
    // path-tracking decode that names the offending field.
    let document = match serde_json::from_slice::<BundleDocument>(payload) {
        Ok(document) => document,
        Err(_) => decode_with_paths(payload)?,
    };
    if document.format_version != FORMAT_VERSION {
        return Err(BundleError::UnsupportedFormat {
            found: document.format_version,
            expected: FORMAT_VERSION,
        });
    }
    // The digest names the payload bytes, so they must be the one canonical
    // encoding of their content: no duplicate keys, reordering, padding or
    // unusual spellings of typed values (timestamps with offsets). Checked on
    // the typed document, which is what the policy is compiled from.
    if canonical_json(&document) != payload {
        return Err(BundleError::NotCanonical);
    }
    Ok(document)
}

/// The error-reporting decode: JSON syntax, then the format version (so a
/// future layout is reported as such, not as a pile of unknown fields), then
/// the document with the dotted path of the first bad field.
fn decode_with_paths(payload: &[u8]) -> Result<BundleDocument, BundleError> {
    let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| {
        BundleError::InvalidPolicy(toolgate_policy::PolicyError::Parse {
            field: "<payload>".into(),
            message: e.to_string(),
        })
    })?;
    if let Some(found) = value
        .get("formatVersion")
        .and_then(serde_json::Value::as_u64)
        && found != u64::from(FORMAT_VERSION)
    {
        return Err(BundleError::UnsupportedFormat {
            found: u32::try_from(found).unwrap_or(u32::MAX),
            expected: FORMAT_VERSION,
        });
    }
    // A duplicate key decodes here (last one wins) and is then refused as
    // not canonical.
    toolgate_policy::load::from_value(value, "payload").map_err(BundleError::InvalidPolicy)
}
