//! The DSSE envelope that carries a signed bundle.
//!
//! DSSE (Dead Simple Signing Envelope, as used by in-toto and Sigstore)
//! signs the pre-authentication encoding of the payload type and bytes, so
//! a signature can never be replayed under a different type, and the
//! payload travels as opaque base64: verifiers check the signature over the
//! exact bytes before any parser sees them.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::document::{BundleDocument, digest_of};
use crate::error::BundleError;
use crate::keys::SigningKey;

/// DSSE payload type of a toolgate bundle.
pub const PAYLOAD_TYPE: &str = "application/vnd.toolgate.bundle.v1+json";

/// Largest envelope accepted, in bytes. Far above any real profile (a
/// 1,000-rule bundle is ~40 KiB) and low enough that a hostile ConfigMap
/// cannot exhaust a sidecar's memory.
pub const MAX_ENVELOPE_BYTES: usize = 4 * 1024 * 1024;

/// Most signatures one envelope may carry; bounds verification work.
pub const MAX_SIGNATURES: usize = 16;

/// `{payloadType, payload, signatures}` as DSSE defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    /// Must be [`PAYLOAD_TYPE`].
    pub payload_type: String,
    /// Standard base64 (with padding) of the canonical document bytes.
    pub payload: String,
    /// One or more signatures over [`pae`]`(payload_type, payload bytes)`.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One DSSE signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// Key id of the signer (see [`crate::key_id`]); a hint that selects the
    /// trusted key to check against, never trusted on its own.
    pub keyid: String,
    /// Standard base64 of the 64-byte Ed25519 signature.
    pub sig: String,
}

/// DSSE pre-authentication encoding:
/// `"DSSEv1" SP len(type) SP type SP len(body) SP body`, lengths in ASCII decimal.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + payload_type.len() + body.len());
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(body);
    out
}

impl Envelope {
    /// Signs the document's canonical bytes. Ed25519 is deterministic, so
    /// the same document and key always give the same envelope.
    pub fn sign(document: &BundleDocument, key: &SigningKey) -> Self {
        Self::sign_bytes(&document.canonical_bytes(), key)
    }

    /// Signs arbitrary payload bytes under [`PAYLOAD_TYPE`]. Exposed so tests
    /// and tools can produce envelopes around edited payloads; verification
    /// still judges the content.
    pub fn sign_bytes(payload: &[u8], key: &SigningKey) -> Self {
        Self::sign_typed(PAYLOAD_TYPE, payload, key)
    }

    /// Signs payload bytes under another payload type, for other documents
    /// the same keys sign (decision log checkpoints). The type is part of
    /// the signed PAE, so such an envelope can never pass as a bundle, nor
    /// a bundle as one of them.
    pub fn sign_typed(payload_type: &str, payload: &[u8], key: &SigningKey) -> Self {
        let sig = key.sign(&pae(payload_type, payload));
        Self {
            payload_type: payload_type.to_owned(),
            payload: STANDARD.encode(payload),
            signatures: vec![EnvelopeSignature {
                keyid: key.key_id(),
                sig: STANDARD.encode(sig),
            }],
        }
    }

    /// Adds another signer's signature (e.g. during key rotation, sign with
    /// both keys so old and new trust sets accept the bundle).
    pub fn add_signature(&mut self, key: &SigningKey) -> Result<(), BundleError> {
        let payload = self.payload_bytes()?;
        let sig = key.sign(&pae(&self.payload_type, &payload));
        self.signatures.push(EnvelopeSignature {
            keyid: key.key_id(),
            sig: STANDARD.encode(sig),
        });
        Ok(())
    }

    /// Parses envelope JSON, enforcing [`MAX_ENVELOPE_BYTES`] and
    /// [`MAX_SIGNATURES`] before anything else. Every failure is
    /// `bundle_malformed`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BundleError> {
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(BundleError::Malformed(format!(
                "envelope is {} bytes, the limit is {MAX_ENVELOPE_BYTES}",
                bytes.len()
            )));
        }
        let envelope: Self = serde_json::from_slice(bytes)
            .map_err(|e| BundleError::Malformed(format!("not a DSSE envelope: {e}")))?;
        if envelope.signatures.is_empty() {
            return Err(BundleError::Malformed("envelope has no signatures".into()));
        }
        if envelope.signatures.len() > MAX_SIGNATURES {
            return Err(BundleError::Malformed(format!(
                "envelope has {} signatures, the limit is {MAX_SIGNATURES}",
                envelope.signatures.len()
            )));
        }
        Ok(envelope)
    }

    /// Deterministic compact JSON (fields in declaration order), newline-terminated.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings always serializes.
        let mut out = serde_json::to_vec(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Decodes the payload; `bundle_malformed` when it is not standard base64.
    pub fn payload_bytes(&self) -> Result<Vec<u8>, BundleError> {
        STANDARD
            .decode(&self.payload)
            .map_err(|e| BundleError::Malformed(format!("payload is not standard base64: {e}")))
    }

    /// Key ids the signatures claim, in envelope order.
    pub fn key_ids(&self) -> Vec<String> {
        self.signatures.iter().map(|s| s.keyid.clone()).collect()
    }
}

/// An envelope opened WITHOUT checking anything but its syntax, for
/// humans debugging a bundle (`toolgate bundle inspect`). Nothing here may
/// be used to make a decision.
#[derive(Debug, Clone, Serialize)]
pub struct Unverified {
    /// Always true; present so the JSON cannot be mistaken for a verified result.
    pub unverified: bool,
    /// The envelope's payload type.
    pub payload_type: String,
    /// Key ids the signatures claim.
    pub keyids: Vec<String>,
    /// `sha256:` of the decoded payload bytes.
    pub digest: String,
    /// The decoded payload as JSON (or a string when it is not JSON).
    pub document: serde_json::Value,
}

/// Opens an envelope without verifying it. See [`Unverified`].
pub fn inspect(bytes: &[u8]) -> Result<Unverified, BundleError> {
    let envelope = Envelope::from_bytes(bytes)?;
    let payload = envelope.payload_bytes()?;
    let document = serde_json::from_slice(&payload).unwrap_or_else(|_| {
        serde_json::Value::String(String::from_utf8_lossy(&payload).into_owned())
    });
    Ok(Unverified {
        unverified: true,
        payload_type: envelope.payload_type.clone(),
        keyids: envelope.key_ids(),
        digest: digest_of(&payload),
        document,
    })
}
