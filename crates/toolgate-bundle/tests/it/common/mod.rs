//! Shared fixtures: the example profile, fixed keys and a fixed clock.

use jiff::{SignedDuration, Timestamp};
use toolgate_bundle::{BundleDocument, BundleInput, Envelope, ProfileRef, SigningKey, TrustSet};
use toolgate_policy::{Grant, load};

pub fn t0() -> Timestamp {
    "2030-01-01T00:00:00Z".parse().unwrap()
}

pub fn old_key() -> SigningKey {
    SigningKey::from_seed(&[1; 32])
}

pub fn new_key() -> SigningKey {
    SigningKey::from_seed(&[2; 32])
}

pub fn example_profile_text() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/profiles/safe-coding.yaml"
    );
    std::fs::read_to_string(path).unwrap()
}

pub fn grant() -> Grant {
    Grant {
        tool: "bash".into(),
        glob: "cargo test*".into(),
        subjects: vec!["team-a".into()],
        expires_at: "2030-01-02T00:00:00Z".into(),
    }
}

pub fn input(sequence: u64, grants: Vec<Grant>) -> BundleInput {
    let manifest = load::parse_manifest(&example_profile_text()).unwrap();
    BundleInput {
        profile: ProfileRef {
            name: manifest.metadata.name,
            namespace: manifest.metadata.namespace,
        },
        spec: manifest.spec,
        grants,
        sequence,
        issued_at: t0(),
        expires_at: t0() + SignedDuration::from_hours(24),
    }
}

pub fn document(sequence: u64) -> BundleDocument {
    BundleDocument::new(input(sequence, vec![grant()])).unwrap()
}

pub fn signed(sequence: u64, key: &SigningKey) -> Vec<u8> {
    Envelope::sign(&document(sequence), key).to_bytes()
}

pub fn trust(keys: &[&SigningKey]) -> TrustSet {
    TrustSet::from_keys(keys.iter().map(|k| k.public_key())).unwrap()
}

/// The decoded payload of envelope bytes, as JSON.
pub fn payload_json(bytes: &[u8]) -> serde_json::Value {
    let env = Envelope::from_bytes(bytes).unwrap();
    serde_json::from_slice(&env.payload_bytes().unwrap()).unwrap()
}

/// Re-signs an edited payload (canonicalized) with `key`: what a trusted
/// but buggy or compromised signer could publish.
pub fn resign(value: &serde_json::Value, key: &SigningKey) -> Vec<u8> {
    Envelope::sign_bytes(&toolgate_policy::digest::canonical_json(value), key).to_bytes()
}

/// True when a required external tool may be skipped (not on CI).
pub fn may_skip(what: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{what} is required when CI=true");
    }
    eprintln!("skipping: {what} not available");
    true
}
