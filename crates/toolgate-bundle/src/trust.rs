//! Trust sets: the public keys a sidecar accepts bundles from.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::BundleError;
use crate::keys::{PublicKey, read};

const BEGIN: &str = "-----BEGIN ";
const PUBLIC_LABEL: &str = "PUBLIC KEY";

/// The set of keys whose signatures a verifier accepts, indexed by key id.
///
/// A trust file is one or more concatenated SPKI PEM blocks, so rotation is
/// `cat old.pub new.pub > trust.pem` (both verify) followed by dropping the
/// old block (its bundles stop verifying). Text outside the blocks (e.g.
/// comments saying which key is which) is ignored, but any other PEM label —
/// a private key pasted by mistake, a certificate — rejects the whole file,
/// as does a file with no keys: an empty trust set would make every bundle
/// fail in a way that looks like tampering rather than misconfiguration.
#[derive(Debug, Clone)]
pub struct TrustSet {
    keys: BTreeMap<String, PublicKey>,
}

impl TrustSet {
    /// Parses concatenated `-----BEGIN PUBLIC KEY-----` blocks. Zero keys or
    /// a non-public-key block is `trust_invalid`; a block that is not an
    /// Ed25519 key is `key_invalid` (its position is in the message).
    pub fn from_pem(text: &str) -> Result<Self, BundleError> {
        let mut keys = BTreeMap::new();
        let mut rest = text;
        let mut index = 0usize;
        while let Some(start) = rest.find(BEGIN) {
            let block = &rest[start..];
            let label_end = block[BEGIN.len()..].find("-----").ok_or_else(|| {
                BundleError::TrustInvalid(format!(
                    "PEM block {} has an unterminated BEGIN line",
                    index + 1
                ))
            })?;
            let label = &block[BEGIN.len()..BEGIN.len() + label_end];
            if label != PUBLIC_LABEL {
                return Err(BundleError::TrustInvalid(format!(
                    "PEM block {} is `{label}`, only `{PUBLIC_LABEL}` blocks may appear in a trust file",
                    index + 1
                )));
            }
            let end_marker = format!("-----END {label}-----");
            let end = block.find(&end_marker).ok_or_else(|| {
                BundleError::TrustInvalid(format!(
                    "PEM block {} has no `{end_marker}` line",
                    index + 1
                ))
            })? + end_marker.len();
            let key = PublicKey::from_spki_pem(&block[..end]).map_err(|e| {
                BundleError::KeyInvalid(format!("trust file key {}: {}", index + 1, strip(&e)))
            })?;
            keys.insert(key.key_id(), key);
            index += 1;
            rest = &block[end..];
        }
        if keys.is_empty() {
            return Err(BundleError::TrustInvalid(
                "no `-----BEGIN PUBLIC KEY-----` blocks found".into(),
            ));
        }
        Ok(Self { keys })
    }

    /// Reads and parses a trust file.
    pub fn from_file(path: &Path) -> Result<Self, BundleError> {
        Self::from_pem(&read(path)?)
    }

    /// A trust set of the given keys; `trust_invalid` when empty.
    pub fn from_keys(keys: impl IntoIterator<Item = PublicKey>) -> Result<Self, BundleError> {
        let keys: BTreeMap<_, _> = keys.into_iter().map(|k| (k.key_id(), k)).collect();
        if keys.is_empty() {
            return Err(BundleError::TrustInvalid("no keys".into()));
        }
        Ok(Self { keys })
    }

    /// The key with this id, if trusted.
    pub fn get(&self, keyid: &str) -> Option<&PublicKey> {
        self.keys.get(keyid)
    }

    /// Trusted key ids, sorted.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Number of distinct keys (duplicated blocks count once).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always false: a trust set is never empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn strip(e: &BundleError) -> String {
    match e {
        BundleError::KeyInvalid(m) => m.clone(),
        other => other.to_string(),
    }
}
