//! The one error type of this crate, with stable machine-readable codes.

use toolgate_policy::PolicyError;

/// Why a bundle, key or trust file was rejected.
///
/// Verification checks run in a fixed order and stop at the first failure,
/// so the code tells an operator exactly which gate a bundle failed:
/// `bundle_malformed` → `bundle_payload_type` → `bundle_unknown_key` →
/// `bundle_bad_signature` → `bundle_not_canonical` / `bundle_unsupported_format`
/// / `bundle_invalid_policy` → `bundle_version_mismatch` → `bundle_expired` →
/// `bundle_rollback`.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The envelope is not DSSE JSON, is too large, or its base64 is broken.
    #[error("bundle envelope is malformed: {0}")]
    Malformed(String),
    /// The envelope carries something other than a toolgate bundle.
    #[error("bundle payload type is `{found}`, expected `{expected}`")]
    PayloadType {
        /// What the envelope says.
        found: String,
        /// [`crate::PAYLOAD_TYPE`].
        expected: &'static str,
    },
    /// No signature names a key in the trust set.
    #[error("no signature is by a trusted key (signed by: {}; trusted: {})", list(.found), list(.trusted))]
    UnknownKey {
        /// Key ids named by the envelope's signatures.
        found: Vec<String>,
        /// Key ids in the trust set.
        trusted: Vec<String>,
    },
    /// A trusted key is named but no signature by it verifies over the PAE.
    #[error(
        "signature by {keyid} does not verify: the bundle was altered or signed by another key"
    )]
    BadSignature {
        /// The trusted key id whose signature failed (the first one tried).
        keyid: String,
    },
    /// The signed payload is not the RFC 8785 canonical form of the document
    /// it decodes to, so its digest would not be its content address.
    #[error("bundle payload is not in canonical (RFC 8785) form")]
    NotCanonical,
    /// The payload's `formatVersion` is not one this build understands.
    #[error("bundle format version {found} is not supported (expected {expected})")]
    UnsupportedFormat {
        /// What the payload says.
        found: u32,
        /// [`crate::FORMAT_VERSION`].
        expected: u32,
    },
    /// The payload does not decode into a bundle document (unknown field,
    /// bad type) or its policy does not compile.
    #[error("bundle payload is not a valid policy: {0}")]
    InvalidPolicy(#[source] PolicyError),
    /// The signed `policyVersion` is not the one recomputed from the signed spec and grants.
    #[error("bundle says policy version {claimed}, but its content is {actual}")]
    VersionMismatch {
        /// What the payload claims.
        claimed: String,
        /// What the content hashes to.
        actual: String,
    },
    /// The bundle's `expiresAt` has passed.
    #[error("bundle expired at {expires_at} (now {now})")]
    Expired {
        /// The signed expiry.
        expires_at: jiff::Timestamp,
        /// The clock value verification used.
        now: jiff::Timestamp,
    },
    /// The bundle is older than the one already held.
    #[error(
        "bundle sequence {sequence} is older than the held sequence {held}: refusing a rollback"
    )]
    Rollback {
        /// The candidate's sequence.
        sequence: u64,
        /// The sequence already enforced.
        held: u64,
    },
    /// The bundle reuses the held sequence number with different content.
    /// Reported with the `bundle_rollback` code: a signer that publishes two
    /// different bundles under one sequence is equivocating, and accepting
    /// the second would let a replayed bundle displace the current one.
    #[error(
        "bundle sequence {sequence} equals the held one but its digest {digest} differs from the held {held_digest}: refusing equivocation"
    )]
    Equivocation {
        /// The shared sequence.
        sequence: u64,
        /// The candidate's digest.
        digest: String,
        /// The held bundle's digest.
        held_digest: String,
    },
    /// A key is not a usable Ed25519 key (wrong algorithm, bad PEM or DER).
    #[error("invalid key: {0}")]
    KeyInvalid(String),
    /// A trust file holds no keys or something other than public keys.
    #[error("invalid trust set: {0}")]
    TrustInvalid(String),
    /// Builder inputs are unusable (e.g. `expiresAt` not after `issuedAt`).
    #[error("{field}: {message}")]
    InvalidInput {
        /// The offending input.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A key or trust file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.join(", ")
    }
}

impl BundleError {
    /// Stable snake_case code for `{error: {code, message}}` bodies and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "bundle_malformed",
            Self::PayloadType { .. } => "bundle_payload_type",
            Self::UnknownKey { .. } => "bundle_unknown_key",
            Self::BadSignature { .. } => "bundle_bad_signature",
            Self::NotCanonical => "bundle_not_canonical",
            Self::UnsupportedFormat { .. } => "bundle_unsupported_format",
            Self::InvalidPolicy(_) => "bundle_invalid_policy",
            Self::VersionMismatch { .. } => "bundle_version_mismatch",
            Self::Expired { .. } => "bundle_expired",
            Self::Rollback { .. } | Self::Equivocation { .. } => "bundle_rollback",
            Self::KeyInvalid(_) => "key_invalid",
            Self::TrustInvalid(_) => "trust_invalid",
            Self::InvalidInput { .. } => "bundle_invalid_input",
            Self::Io { .. } => "io",
        }
    }

    /// Every code [`BundleError::code`] can return, so that metrics can
    /// show each failure kind at zero before it first happens.
    pub const CODES: &'static [&'static str] = &[
        "bundle_malformed",
        "bundle_payload_type",
        "bundle_unknown_key",
        "bundle_bad_signature",
        "bundle_not_canonical",
        "bundle_unsupported_format",
        "bundle_invalid_policy",
        "bundle_version_mismatch",
        "bundle_expired",
        "bundle_rollback",
        "key_invalid",
        "trust_invalid",
        "bundle_invalid_input",
        "io",
    ];

    /// The policy error behind `bundle_invalid_policy`, for its field path.
    pub fn policy_error(&self) -> Option<&PolicyError> {
        match self {
            Self::InvalidPolicy(e) => Some(e),
            _ => None,
        }
    }

    /// The error as the JSON body every toolgate API returns.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}
