//! Signed, content-addressed toolgate policy bundles.
//!
//! A bundle is what the controller publishes and every sidecar trusts: one
//! profile's spec (hardline included), its standing grants, its policy
//! version and signed freshness data (`sequence`, `issuedAt`, `expiresAt`),
//! encoded as RFC 8785 canonical JSON, named by the SHA-256 of those bytes
//! and signed with Ed25519 inside a DSSE envelope.
//!
//! Two properties drive the design:
//! - a sidecar can only enforce what a trusted key signed: [`verify`] checks
//!   the signature over the exact bytes before any parser sees them, and the
//!   only way to get a [`VerifiedBundle`] is through it;
//! - a bundle's name is its content: the payload must be canonical, so one
//!   content has one digest and one policy version.
//!
//! ```
//! use toolgate_bundle::*;
//! let spec = toolgate_policy::load::from_str("{mode: denyAll}").unwrap();
//! let t0: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
//! let doc = BundleDocument::new(BundleInput {
//!     profile: ProfileRef { name: "demo".into(), namespace: None },
//!     spec, grants: vec![], sequence: 1,
//!     issued_at: t0, expires_at: t0 + jiff::SignedDuration::from_hours(24),
//! }).unwrap();
//! let key = SigningKey::from_seed(&[7; 32]);
//! let bytes = Envelope::sign(&doc, &key).to_bytes();
//! let trust = TrustSet::from_keys([key.public_key()]).unwrap();
//! let verified = verify(&bytes, &trust, &VerifyOptions::at(t0)).unwrap();
//! assert_eq!(verified.digest(), doc.digest());
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod candidate;
mod checkpoint;
mod document;
mod envelope;
mod error;
mod keys;
mod trust;
mod verify;

pub use candidate::{Candidate, CandidateError, CandidateSource};
pub use checkpoint::{CHECKPOINT_PAYLOAD_TYPE, CheckpointPayload};
pub use document::{
    BundleDocument, BundleInput, CandidateSection, FORMAT_VERSION, PolicyHashes, ProfileRef,
};
pub use envelope::{
    Envelope, EnvelopeSignature, MAX_ENVELOPE_BYTES, MAX_SIGNATURES, PAYLOAD_TYPE, Unverified,
    inspect, pae,
};
pub use error::BundleError;
pub use keys::{PublicKey, SigningKey, key_id};
pub use toolgate_contract::parse_duration;
pub use trust::TrustSet;
pub use verify::{VerifiedBundle, VerifyOptions, verify, verify_typed};

/// Builds, signs and encodes a bundle in one step: the bytes a controller
/// writes into a ConfigMap.
pub fn build(
    input: BundleInput,
    key: &SigningKey,
) -> Result<(BundleDocument, Vec<u8>), BundleError> {
    sign(BundleDocument::new(input)?, key)
}

/// Signs a document made with [`BundleDocument::new`] (and, to shadow a
/// candidate, [`BundleDocument::with_candidate`]): the document and the
/// envelope's bytes.
pub fn sign(
    document: BundleDocument,
    key: &SigningKey,
) -> Result<(BundleDocument, Vec<u8>), BundleError> {
    let bytes = Envelope::sign(&document, key).to_bytes();
    Ok((document, bytes))
}
