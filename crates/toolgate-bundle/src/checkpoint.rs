//! Signed checkpoints of decision-log stream heads.
//!
//! The same keys and DSSE envelopes as bundles, under their own payload
//! type, so a checkpoint can never be taken for a bundle nor a bundle for a
//! checkpoint. Here so that every signer (the `toolgate audit checkpoint`
//! command, a controller) and every verifier encodes them one way.

use serde::{Deserialize, Serialize};
use toolgate_policy::digest::canonical_json;

use crate::envelope::Envelope;
use crate::error::BundleError;
use crate::keys::SigningKey;
use crate::trust::TrustSet;

/// DSSE payload type of a checkpoint.
pub const CHECKPOINT_PAYLOAD_TYPE: &str = "application/vnd.toolgate.checkpoint.v1+json";

/// The signed content of a checkpoint: one stream head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPayload {
    /// Tenant.
    pub tenant: String,
    /// Stream of the tenant.
    pub stream: String,
    /// Head seq (0: an opened, empty stream).
    pub seq: i64,
    /// Hash at `seq`.
    pub hash: String,
    /// When it was signed.
    pub at: jiff::Timestamp,
}

impl CheckpointPayload {
    /// Signs the RFC 8785 canonical payload; returns the envelope bytes.
    pub fn sign(&self, key: &SigningKey) -> Vec<u8> {
        Envelope::sign_typed(CHECKPOINT_PAYLOAD_TYPE, &canonical_json(self), key).to_bytes()
    }

    /// Verifies envelope bytes against `trust` and returns the signed
    /// payload and the key id that verified. Signature failures carry the
    /// bundle codes (`bundle_unknown_key`, `bundle_bad_signature`, ...); a
    /// signed payload that is not a checkpoint is `bundle_malformed`.
    pub fn verify(envelope: &[u8], trust: &TrustSet) -> Result<(Self, String), BundleError> {
        let (payload, keyid) =
            crate::verify::verify_typed(envelope, CHECKPOINT_PAYLOAD_TYPE, trust)?;
        let payload = serde_json::from_slice(&payload)
            .map_err(|e| BundleError::Malformed(format!("not a checkpoint payload: {e}")))?;
        Ok((payload, keyid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> CheckpointPayload {
        CheckpointPayload {
            tenant: "acme".into(),
            stream: "pod/1".into(),
            seq: 7,
            hash: "ab".repeat(32),
            at: jiff::Timestamp::from_second(1_800_000_000).unwrap(),
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let key = SigningKey::from_seed(&[7; 32]);
        let trust = TrustSet::from_keys([key.public_key()]).unwrap();
        let bytes = payload().sign(&key);
        let (back, keyid) = CheckpointPayload::verify(&bytes, &trust).unwrap();
        assert_eq!((back, keyid), (payload(), key.key_id()));

        // Another key, a bundle-typed envelope, an edited payload.
        let other = TrustSet::from_keys([SigningKey::from_seed(&[8; 32]).public_key()]).unwrap();
        assert_eq!(
            CheckpointPayload::verify(&bytes, &other)
                .unwrap_err()
                .code(),
            "bundle_unknown_key"
        );
        let as_bundle = Envelope::sign_bytes(&canonical_json(&payload()), &key).to_bytes();
        assert_eq!(
            CheckpointPayload::verify(&as_bundle, &trust)
                .unwrap_err()
                .code(),
            "bundle_payload_type"
        );
        let mut edited = Envelope::from_bytes(&bytes).unwrap();
        let mut p = payload();
        p.seq = 8;
        edited.payload =
            Envelope::sign_typed(CHECKPOINT_PAYLOAD_TYPE, &canonical_json(&p), &key).payload;
        assert_eq!(
            CheckpointPayload::verify(&edited.to_bytes(), &trust)
                .unwrap_err()
                .code(),
            "bundle_bad_signature"
        );
        // A checkpoint envelope is not a bundle either.
        assert_eq!(
            crate::verify(
                &bytes,
                &trust,
                &crate::VerifyOptions::at(jiff::Timestamp::now())
            )
            .unwrap_err()
            .code(),
            "bundle_payload_type"
        );
    }
}
