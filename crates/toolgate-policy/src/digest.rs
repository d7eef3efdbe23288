//! Content addresses: canonical JSON (RFC 8785) and SHA-256 digests.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::model::{Grant, PolicySpec};

/// RFC 8785 canonical JSON bytes of a value: sorted keys, no whitespace, so
/// key order and YAML-vs-JSON never change a digest.
pub fn canonical_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialization of the model types and of `serde_json::Value` cannot
    // fail: they hold only strings, integers, booleans, arrays and maps.
    serde_json_canonicalizer::to_vec(value).unwrap_or_default()
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256:<hex>` of the canonical JSON of a call's arguments object.
pub fn args_digest(arguments: &serde_json::Map<String, serde_json::Value>) -> String {
    format!("sha256:{}", sha256_hex(&canonical_json(arguments)))
}

/// The content address of a profile and the full hashes it is built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyVersion {
    /// `{name}@{sha12}+h{sha8}`.
    pub version: String,
    /// Full hex SHA-256 over the spec without `hardline` (plus active grants).
    pub spec_sha256: String,
    /// Full hex SHA-256 over `spec.hardline` (`{}` when absent).
    pub hardline_sha256: String,
}

impl PolicyVersion {
    /// Computes the version of `spec` named `name`. Grants, when present, are
    /// part of the rule hash so that granting something yields a new version.
    pub fn compute(name: &str, spec: &PolicySpec, grants: &[Grant]) -> Self {
        let mut rules = spec.clone();
        let hardline = rules.hardline.take().unwrap_or_default();
        let mut body = serde_json::to_value(&rules).unwrap_or_default();
        if !grants.is_empty()
            && let serde_json::Value::Object(map) = &mut body
        {
            map.insert(
                "grants".into(),
                serde_json::to_value(grants).unwrap_or_default(),
            );
        }
        let spec_sha256 = sha256_hex(&canonical_json(&body));
        let hardline_sha256 = sha256_hex(&canonical_json(&hardline));
        let version = format!("{name}@{}+h{}", &spec_sha256[..12], &hardline_sha256[..8]);
        Self {
            version,
            spec_sha256,
            hardline_sha256,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_hardline_hashes_as_empty_object() {
        let spec: PolicySpec = serde_json::from_str(r#"{"mode":"rules"}"#).unwrap();
        let v = PolicyVersion::compute("p", &spec, &[]);
        assert_eq!(v.hardline_sha256, sha256_hex(b"{}"));
        assert_eq!(
            v.spec_sha256,
            sha256_hex(br#"{"effects":{},"mode":"rules"}"#)
        );
        assert_eq!(
            v.version,
            format!("p@{}+h{}", &v.spec_sha256[..12], &v.hardline_sha256[..8])
        );
    }

    #[test]
    fn args_digest_ignores_key_order() {
        let a: serde_json::Map<_, _> = serde_json::from_str(r#"{"b":1,"a":"x"}"#).unwrap();
        let b: serde_json::Map<_, _> = serde_json::from_str(r#"{"a":"x","b":1}"#).unwrap();
        assert_eq!(args_digest(&a), args_digest(&b));
        assert_eq!(
            args_digest(&a),
            format!("sha256:{}", sha256_hex(br#"{"a":"x","b":1}"#))
        );
    }
}
