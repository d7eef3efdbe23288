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
    prefixed_sha256(&canonical_arguments(arguments))
}

/// `sha256:<hex>` of the canonical JSON of the whole call,
/// `{"action", "arguments", "tool"}` (`action` is `null` when absent), with
/// `tool` the canonical name after alias resolution. Approvals, intents and
/// decision records bind to it, so an approved `deploy status` can never be
/// replayed as `deploy destroy` with the same arguments.
pub fn call_digest(
    tool: &str,
    action: Option<&str>,
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> String {
    call_digest_from(tool, action, &canonical_arguments(arguments))
}

/// The persisted id of "this call, in this step, under this policy": 32
/// hex digits of the SHA-256 of `tenant`, `run_id`, `step_id`, the call
/// digest and the policy version, each length-prefixed (so no two parts can
/// be shifted into one another). The same call asks the same approval
/// until it is used or expires; another action is another call digest,
/// hence another invocation. An MCP tool's `definition_digest` (the
/// definition the call was escalated under) is a sixth part when given, so
/// an approval granted for one definition of a tool never lets a call to a
/// re-announced, changed definition through.
pub fn invocation_digest(
    tenant: &str,
    run_id: &str,
    step_id: &str,
    call_digest: &str,
    policy_version: &str,
    definition_digest: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    let parts = [tenant, run_id, step_id, call_digest, policy_version];
    for part in parts.into_iter().chain(definition_digest) {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// Both digests of one call, sharing the canonical arguments bytes.
pub(crate) fn call_digests(
    tool: &str,
    action: Option<&str>,
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> (String, String) {
    let args = canonical_arguments(arguments);
    (
        prefixed_sha256(&args),
        call_digest_from(tool, action, &args),
    )
}

fn canonical_arguments(arguments: &serde_json::Map<String, serde_json::Value>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(128);
    if !write_canonical_object(arguments, &mut bytes) {
        bytes = canonical_json(arguments);
    }
    bytes
}

fn call_digest_from(tool: &str, action: Option<&str>, canonical_args: &[u8]) -> String {
    let action = match action {
        Some(a) => canonical_string(a),
        None => b"null".to_vec(),
    };
    prefixed_sha256(&canonical_object(&mut [
        ("action", &action),
        ("arguments", canonical_args),
        ("tool", &canonical_string(tool)),
    ]))
}

/// RFC 8785 canonical JSON of one string.
pub fn canonical_string(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_canonical_string(s, &mut out);
    out
}

/// Canonical JSON of an object assembled from parts: each member's value
/// must already be canonical JSON (from [`canonical_json`],
/// [`canonical_string`], a decimal integer, `null`, or this function).
/// RFC 8785 sorts keys by UTF-16 code units and adds no whitespace, so an
/// object can be built from canonical pieces without re-parsing them; the
/// keys are sorted here by their UTF-8 bytes, which is the same order for
/// every key below U+E000 (all of toolgate's keys are ASCII names). The
/// decision chain uses it so that its PostgreSQL trigger can assemble the
/// same text member by member.
pub fn canonical_object(members: &mut [(&str, &[u8])]) -> Vec<u8> {
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let len: usize = members.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(len + 2);
    out.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_canonical_string(key, &mut out);
        out.push(b':');
        out.extend_from_slice(value);
    }
    out.push(b'}');
    out
}

fn prefixed_sha256(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    out.push_str(&sha256_hex(bytes));
    out
}

/// Largest integer a JSON number can hold exactly (2^53): below it RFC 8785
/// prints integers as plain decimals.
const MAX_EXACT_INT: u64 = 1 << 53;

/// Canonical JSON of the common case — strings, booleans, null, exact
/// integers, arrays and objects whose keys sort the same in UTF-8 and
/// UTF-16 — written straight into `out`. Returns false (with `out` in an
/// unspecified state) for anything else, which the caller then hands to the
/// general serializer; a property test keeps the two byte-identical.
fn write_canonical_value(value: &serde_json::Value, out: &mut Vec<u8>) -> bool {
    use serde_json::Value;
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            let text = if let Some(u) = n.as_u64().filter(|u| *u <= MAX_EXACT_INT) {
                u.to_string()
            } else if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= MAX_EXACT_INT) {
                i.to_string()
            } else {
                return false;
            };
            out.extend_from_slice(text.as_bytes());
        }
        Value::String(s) => write_canonical_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write_canonical_value(item, out) {
                    return false;
                }
            }
            out.push(b']');
        }
        Value::Object(map) => return write_canonical_object(map, out),
    }
    true
}

fn write_canonical_object(
    map: &serde_json::Map<String, serde_json::Value>,
    out: &mut Vec<u8>,
) -> bool {
    // UTF-8 byte order equals UTF-16 code-unit order unless a key holds a
    // character at or above U+E000 (lead byte 0xEE and up).
    if map.keys().any(|k| k.bytes().any(|b| b >= 0xEE)) {
        return false;
    }
    let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
    if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
        entries.sort_by(|a, b| a.0.cmp(b.0));
    }
    out.push(b'{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_canonical_string(key, out);
        out.push(b':');
        if !write_canonical_value(value, out) {
            return false;
        }
    }
    out.push(b'}');
    true
}

fn write_canonical_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&s.as_bytes()[start..i]);
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(b >> 4) as usize],
                    HEX[(b & 0xf) as usize],
                ]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&s.as_bytes()[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&s.as_bytes()[start..]);
    out.push(b'"');
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
        // What is shadowed is not what is enforced.
        rules.candidate = None;
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
    fn invocation_digest_is_pinned_and_length_prefixed() {
        // Persisted in approvals: computed here independently (Python's
        // hashlib over the same length-prefixed parts), so a change to the
        // rule cannot slip by.
        let v = "p@0123456789ab+h01234567";
        assert_eq!(
            invocation_digest("acme", "run-1", "s1", "sha256:c", v, None),
            "1a9b8f28f0eefc433ef98951863f0c8d"
        );
        assert_eq!(
            invocation_digest("acm", "erun-1", "s1", "sha256:c", v, None),
            "33217d1bef86a530f7e06290ddb3b84d"
        );
        let defined = invocation_digest("acme", "run-1", "s1", "sha256:c", v, Some("sha256:d"));
        assert_eq!(defined, "aa59f1318e0a359065dbdc5317ab2903");
        assert_ne!(
            defined,
            invocation_digest("acme", "run-1", "s1", "sha256:c", v, Some("sha256:e"))
        );
    }
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            any::<u64>().prop_map(|u| serde_json::json!(u)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::json!(f)),
            any::<String>().prop_map(serde_json::Value::String),
            "[\\x00-\\x7f]{0,8}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(any::<String>(), inner.clone(), 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                prop::collection::btree_map("[a-z\\\\\"\\n]{0,4}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn fast_digest_path_matches_the_general_serializer(args in prop::collection::btree_map(any::<String>(), json_value(), 0..6)) {
            let map: serde_json::Map<String, serde_json::Value> = args.into_iter().collect();
            let expected = format!("sha256:{}", sha256_hex(&canonical_json(&map)));
            prop_assert_eq!(args_digest(&map), expected);
        }
    }

    #[test]
    fn fast_path_writes_rfc8785_escapes() {
        let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"b":"tab\there \"q\" \\ \u0001 \u001f é 😀","a":[1,-2,true,null,{"z":0,"y":"/"}]}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        assert!(write_canonical_object(&map, &mut out));
        assert_eq!(out, canonical_json(&map));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":[1,-2,true,null,{"y":"/","z":0}],"b":"tab\there \"q\" \\ \u0001 \u001f é 😀"}"#
        );
    }

    #[test]
    fn assembled_objects_are_canonical() {
        let inner = canonical_json(&serde_json::json!({"z": [1, "\u{e9}"], "a": null}));
        let built = canonical_object(&mut [
            ("tenant", &canonical_string("t\"\u{1F600}")),
            ("seq", b"42"),
            ("record", &inner),
            ("v", b"2"),
        ]);
        let whole = serde_json::json!({
            "v": 2, "tenant": "t\"\u{1F600}", "seq": 42,
            "record": {"z": [1, "\u{e9}"], "a": null},
        });
        assert_eq!(built, canonical_json(&whole));
        assert_eq!(canonical_object(&mut []), b"{}");
    }

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
    fn call_digest_is_the_canonical_whole_call() {
        let args = serde_json::json!({"b": 1, "a": "x\u{e9}\n"});
        let args = args.as_object().unwrap();
        for action in [None, Some("status"), Some("d\"q\u{1}")] {
            let expected = format!(
                "sha256:{}",
                sha256_hex(&canonical_json(&serde_json::json!({
                    "tool": "deploy", "action": action, "arguments": args,
                })))
            );
            assert_eq!(call_digest("deploy", action, args), expected);
        }
        assert_ne!(
            call_digest("deploy", Some("status"), args),
            call_digest("deploy", Some("destroy"), args)
        );
        assert_ne!(
            call_digest("deploy", None, args),
            call_digest("deploy", Some(""), args)
        );
        let (a, c) = call_digests("deploy", Some("status"), args);
        assert_eq!(a, args_digest(args));
        assert_eq!(c, call_digest("deploy", Some("status"), args));
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
