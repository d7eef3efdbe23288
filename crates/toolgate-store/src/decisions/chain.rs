//! The hashed documents of the decision chain: a row's document and a
//! stream's start (genesis) document, built from canonical parts with
//! [`toolgate_policy::digest`] so that the PostgreSQL trigger (migration
//! 0006), which assembles the same text member by member, yields the same
//! hashes.

use toolgate_policy::digest::{canonical_json, canonical_object, canonical_string, sha256_hex};

use super::{DecisionRecord, GENESIS_HASH, LEGACY_STREAM, StreamLink};
use crate::Result;

/// Version tag of the legacy document (no stream key).
const HASH_FORMAT_LEGACY: u32 = 1;
/// Version tag of the per-stream document.
const HASH_FORMAT: u32 = 2;

/// Canonical JSON (RFC 8785) of the record alone, with `created_at` as the
/// stored millisecond value. `call_digest` is hashed when present; rows from
/// before it existed keep the document (and so the hash) they were written
/// with.
fn record_canonical(r: &DecisionRecord, created_at_ms: i64) -> Vec<u8> {
    let mut value = serde_json::json!({
        "decision_id": r.decision_id,
        "run_id": r.run_id,
        "step_id": r.step_id,
        "tool": r.tool,
        "verdict": r.verdict,
        "reason": r.reason,
        "message": r.message,
        "matched_rule": r.matched_rule,
        "policy_version": r.policy_version,
        "risk": r.risk,
        "args_digest": r.args_digest,
        "created_at_ms": created_at_ms,
    });
    if let (Some(digest), Some(obj)) = (&r.call_digest, value.as_object_mut()) {
        obj.insert("call_digest".into(), digest.clone().into());
    }
    if let (Some(digest), Some(obj)) = (&r.definition_digest, value.as_object_mut()) {
        obj.insert("definition_digest".into(), digest.clone().into());
    }
    canonical_json(&value)
}

/// The hashed document of one row: the RFC 8785 canonical JSON of
/// `{"prev_hash", "record", "seq", "stream", "tenant", "v": 2}`, or for the
/// [`LEGACY_STREAM`] the v1 document without `"stream"` (so rows written
/// before streams keep their hashes, and a row cannot be moved between the
/// legacy chain and another stream). RFC 8785 sorts keys and adds no
/// whitespace, so the document can be assembled from canonical parts; on
/// PostgreSQL the `decisions_chain` trigger (migration 0006) assembles the
/// same text so that the database, not the caller, chains each row.
/// `prev_hash` is lowercase hex and `seq` an integer, so neither needs
/// escaping.
fn hashed_document(
    tenant_json: &[u8],
    stream_json: Option<&[u8]>,
    seq: i64,
    prev_hash: &str,
    record_json: &[u8],
) -> Vec<u8> {
    let seq = seq.to_string();
    let prev_hash = canonical_string(prev_hash);
    let (version, stream) = match stream_json {
        None => (HASH_FORMAT_LEGACY, None),
        Some(stream) => (HASH_FORMAT, Some(("stream", stream))),
    };
    let version = version.to_string();
    let mut members: Vec<(&str, &[u8])> = vec![
        ("prev_hash", &prev_hash),
        ("record", record_json),
        ("seq", seq.as_bytes()),
        ("tenant", tenant_json),
        ("v", version.as_bytes()),
    ];
    members.extend(stream);
    canonical_object(&mut members)
}

/// The hash of one row: hex SHA-256 of [`hashed_document`].
pub(super) fn row_hash(
    tenant: &str,
    stream: &str,
    seq: i64,
    prev_hash: &str,
    r: &DecisionRecord,
    created_at_ms: i64,
) -> String {
    let stream_json = (stream != LEGACY_STREAM).then(|| canonical_string(stream));
    let doc = hashed_document(
        &canonical_string(tenant),
        stream_json.as_deref(),
        seq,
        prev_hash,
        &record_canonical(r, created_at_ms),
    );
    sha256_hex(&doc)
}

/// The `prev_hash` of a stream's first row. [`GENESIS_HASH`] for the
/// [`LEGACY_STREAM`]; otherwise the SHA-256 of the RFC 8785 canonical start
/// document `{"previous": null | {"hash", "seq", "stream"}, "stream",
/// "tenant", "type": "toolgate.stream.start", "v": 2}`, so the first row
/// commits to the stream's name and to the previous head its writer knew.
/// Migration 0006 (`toolgate_stream_genesis`) computes the same text.
pub fn genesis_hash(tenant: &str, stream: &str, previous: Option<&StreamLink>) -> Result<String> {
    if stream == LEGACY_STREAM {
        return Ok(GENESIS_HASH.to_owned());
    }
    let previous = match previous {
        None => b"null".to_vec(),
        Some(link) => canonical_object(&mut [
            ("hash", &canonical_string(&link.hash)),
            ("seq", link.seq.to_string().as_bytes()),
            ("stream", &canonical_string(&link.stream)),
        ]),
    };
    let doc = canonical_object(&mut [
        ("previous", &previous),
        ("stream", &canonical_string(stream)),
        ("tenant", &canonical_string(tenant)),
        ("type", &canonical_string("toolgate.stream.start")),
        ("v", HASH_FORMAT.to_string().as_bytes()),
    ]);
    Ok(sha256_hex(&doc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn sample() -> DecisionRecord {
        DecisionRecord {
            decision_id: "d\u{e9}\"1".into(),
            run_id: "r".into(),
            step_id: "s".into(),
            tool: "t".into(),
            verdict: "allow".into(),
            reason: "x".into(),
            message: Some("line\nbreak \u{1F600}".into()),
            matched_rule: None,
            policy_version: "p@1".into(),
            risk: "low".into(),
            args_digest: "sha256:0".into(),
            call_digest: Some("sha256:1".into()),
            definition_digest: None,
            created_at: Timestamp::from_millisecond(1_700_000_000_123).unwrap(),
        }
    }

    /// The piecewise document must equal canonicalizing the whole object,
    /// or the PostgreSQL and SQLite hashes (and `verify`) would diverge;
    /// both the legacy (v1) and the per-stream (v2) shapes.
    #[test]
    fn hashed_document_is_rfc8785_canonical() {
        let r = sample();
        let record_json = record_canonical(&r, 1_700_000_000_123);
        let record_value: serde_json::Value = serde_json::from_slice(&record_json).unwrap();
        for tenant in ["acme", "t\u{e9}nant \"q\"", "\u{1F600}"] {
            let legacy = serde_json::json!({
                "v": HASH_FORMAT_LEGACY,
                "tenant": tenant,
                "seq": 42,
                "prev_hash": GENESIS_HASH,
                "record": record_value,
            });
            let built = hashed_document(
                &canonical_string(tenant),
                None,
                42,
                GENESIS_HASH,
                &record_json,
            );
            assert_eq!(built, canonical_json(&legacy));
            for stream in ["pod-1/0190", "p\u{e9}d \"x\"/\u{1F600}"] {
                let streamed = serde_json::json!({
                    "v": HASH_FORMAT,
                    "tenant": tenant,
                    "stream": stream,
                    "seq": 42,
                    "prev_hash": GENESIS_HASH,
                    "record": record_value,
                });
                let built = hashed_document(
                    &canonical_string(tenant),
                    Some(canonical_string(stream).as_slice()),
                    42,
                    GENESIS_HASH,
                    &record_json,
                );
                assert_eq!(built, canonical_json(&streamed));
            }
        }
        let trigger =
            include_str!("../../../../migrations/postgres/0008_stream_head_is_last_row.sql");
        assert!(trigger.contains(&format!("\"v\":{HASH_FORMAT}}}")));
        assert!(trigger.contains(&format!("\"v\":{HASH_FORMAT_LEGACY}}}")));
    }

    /// The genesis document is canonical JSON too, and commits to the link.
    #[test]
    fn genesis_document_is_canonical_and_covers_the_link() {
        let link = StreamLink {
            stream: "pod/\u{e9}".into(),
            seq: 7,
            hash: "ab".repeat(32),
        };
        let whole = serde_json::json!({
            "v": HASH_FORMAT,
            "type": "toolgate.stream.start",
            "tenant": "acme",
            "stream": "pod/2",
            "previous": {"stream": link.stream, "seq": 7, "hash": link.hash},
        });
        let expected = sha256_hex(&canonical_json(&whole));
        assert_eq!(
            genesis_hash("acme", "pod/2", Some(&link)).unwrap(),
            expected
        );
        let unlinked = genesis_hash("acme", "pod/2", None).unwrap();
        assert_ne!(unlinked, expected);
        let mut other = link.clone();
        other.seq = 6;
        assert_ne!(
            genesis_hash("acme", "pod/2", Some(&other)).unwrap(),
            expected
        );
        assert_ne!(genesis_hash("acme2", "pod/2", None).unwrap(), unlinked);
        assert_eq!(
            genesis_hash("acme", LEGACY_STREAM, None).unwrap(),
            GENESIS_HASH
        );
    }

    #[test]
    fn hash_covers_every_field() {
        let h = |tenant: &str, stream: &str, seq: i64, prev: &str, r: &DecisionRecord, at: i64| {
            row_hash(tenant, stream, seq, prev, r, at)
        };
        let base = h("acme", "s", 1, GENESIS_HASH, &sample(), 5);
        assert_ne!(base, h("acme2", "s", 1, GENESIS_HASH, &sample(), 5));
        assert_ne!(base, h("acme", "s2", 1, GENESIS_HASH, &sample(), 5));
        assert_ne!(
            base,
            h("acme", LEGACY_STREAM, 1, GENESIS_HASH, &sample(), 5)
        );
        assert_ne!(base, h("acme", "s", 2, GENESIS_HASH, &sample(), 5));
        assert_ne!(base, h("acme", "s", 1, &"1".repeat(64), &sample(), 5));
        assert_ne!(base, h("acme", "s", 1, GENESIS_HASH, &sample(), 6));
        let mut r = sample();
        r.matched_rule = Some("r".into());
        assert_ne!(base, h("acme", "s", 1, GENESIS_HASH, &r, 5));
        let mut r = sample();
        r.call_digest = Some("sha256:2".into());
        assert_ne!(base, h("acme", "s", 1, GENESIS_HASH, &r, 5));
    }

    /// A definition digest is hashed with the record when present (in
    /// RFC 8785 key order), and absent rows keep their document.
    #[test]
    fn definition_digest_is_hashed_only_when_present() {
        let mut r = sample();
        let without = String::from_utf8(record_canonical(&r, 1)).unwrap();
        assert!(!without.contains("definition_digest"));
        r.definition_digest = Some("sha256:d".into());
        let with = String::from_utf8(record_canonical(&r, 1)).unwrap();
        assert!(
            with.contains(r#""decision_id":"dé\"1","definition_digest":"sha256:d""#),
            "{with}"
        );
    }

    /// Rows written before `call_digest` existed hash as they always did.
    #[test]
    fn record_without_call_digest_keeps_the_old_document() {
        let mut r = sample();
        r.call_digest = None;
        let doc = String::from_utf8(record_canonical(&r, 5)).unwrap();
        assert!(!doc.contains("call_digest"));
        r.call_digest = Some("sha256:1".into());
        let doc = String::from_utf8(record_canonical(&r, 5)).unwrap();
        assert!(doc.contains("\"call_digest\":\"sha256:1\""));
    }
}
