//! Every rejection `verify` makes, in order, plus rotation, determinism and
//! grants.

use crate::common::*;
use jiff::SignedDuration;
use toolgate_bundle::{
    BundleDocument, BundleError, Envelope, MAX_ENVELOPE_BYTES, PAYLOAD_TYPE, TrustSet,
    VerifyOptions, verify,
};
use toolgate_policy::{Call, Context, Decision, PolicyVersion, Reason};

fn code(result: Result<toolgate_bundle::VerifiedBundle, BundleError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

fn at(now: jiff::Timestamp) -> VerifyOptions {
    VerifyOptions::at(now)
}

#[test]
fn a_signed_bundle_verifies_and_reports_its_identity() {
    let key = old_key();
    let doc = document(7);
    let bytes = Envelope::sign(&doc, &key).to_bytes();
    let v = verify(&bytes, &trust(&[&key]), &at(t0())).unwrap();
    assert_eq!(v.document(), &doc);
    assert_eq!(v.digest(), doc.digest());
    assert!(v.digest().starts_with("sha256:") && v.digest().len() == 7 + 64);
    assert_eq!(v.keyid(), key.key_id());
    assert_eq!(v.sequence(), 7);
    assert_eq!(v.expires_at(), t0() + SignedDuration::from_hours(24));
    let expected = PolicyVersion::compute("safe-coding", &doc.spec, &doc.grants);
    assert_eq!(v.policy_version(), expected.version);
    assert_eq!(v.policy().version(), &expected);
    assert!(v.policy_version().starts_with("safe-coding@"));
}

#[test]
fn key_id_is_sha256_prefix_of_raw_public_key() {
    use sha2::Digest;
    let key = old_key();
    let raw = key.public_key();
    let want = format!(
        "ed25519:{}",
        &hex::encode(sha2::Sha256::digest(raw.as_bytes()))[..16]
    );
    assert_eq!(key.key_id(), want);
    assert_eq!(key.key_id().len(), "ed25519:".len() + 16);
}

#[test]
fn malformed_envelopes_are_bundle_malformed() {
    let key = old_key();
    let trust = trust(&[&key]);
    let good = signed(1, &key);
    let mut env: serde_json::Value = serde_json::from_slice(&good).unwrap();

    let mut cases: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"not json".to_vec(),
        b"[]".to_vec(),
        b"{\"payloadType\":1}".to_vec(),
    ];
    // unknown envelope field
    let mut extra = env.clone();
    extra["extra"] = serde_json::json!(true);
    cases.push(serde_json::to_vec(&extra).unwrap());
    // payload not base64
    let mut bad64 = env.clone();
    bad64["payload"] = serde_json::json!("!!!not base64!!!");
    cases.push(serde_json::to_vec(&bad64).unwrap());
    // no signatures
    env["signatures"] = serde_json::json!([]);
    cases.push(serde_json::to_vec(&env).unwrap());
    // too large: a valid envelope padded with whitespace past the limit
    let mut big = good.clone();
    big.resize(MAX_ENVELOPE_BYTES + 1, b' ');
    cases.push(big);

    for case in cases {
        let err = verify(&case, &trust, &at(t0())).unwrap_err();
        assert_eq!(err.code(), "bundle_malformed", "{err}");
    }
    // Just under the limit is fine: size alone is not a reason to reject.
    let mut padded = good.clone();
    padded.resize(MAX_ENVELOPE_BYTES, b' ');
    assert_eq!(code(verify(&padded, &trust, &at(t0()))), "ok");
}

#[test]
fn wrong_payload_type_is_rejected_before_signatures() {
    let key = old_key();
    let mut env = Envelope::from_bytes(&signed(1, &key)).unwrap();
    env.payload_type = "application/vnd.in-toto+json".into();
    // Even with no trusted key at all, the type is checked first.
    let err = verify(&env.to_bytes(), &trust(&[&new_key()]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_payload_type");
    assert!(err.to_string().contains(PAYLOAD_TYPE));
}

#[test]
fn unknown_key_is_rejected() {
    let bytes = signed(1, &old_key());
    let err = verify(&bytes, &trust(&[&new_key()]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_unknown_key");
    assert!(err.to_string().contains(&old_key().key_id()), "{err}");
}

#[test]
fn bad_signatures_are_rejected() {
    let key = old_key();
    let trust = trust(&[&key]);
    let good = Envelope::from_bytes(&signed(1, &key)).unwrap();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;

    // A well-formed but wrong signature.
    let mut wrong = good.clone();
    wrong.signatures[0].sig = b64.encode([0u8; 64]);
    // Wrong length and broken base64 count as bad signatures, not malformed
    // envelopes: the envelope is fine, the signature is not.
    let mut short = good.clone();
    short.signatures[0].sig = b64.encode([1u8; 10]);
    let mut garbage = good.clone();
    garbage.signatures[0].sig = "%%%".into();
    // Signed by an untrusted key that claims a trusted key's id.
    let mut spoofed = Envelope::from_bytes(&signed(1, &new_key())).unwrap();
    spoofed.signatures[0].keyid = key.key_id();
    // A payload swapped under a valid signature.
    let mut swapped = good.clone();
    swapped.payload = Envelope::from_bytes(&signed(2, &key)).unwrap().payload;

    for env in [wrong, short, garbage, spoofed, swapped] {
        let err = verify(&env.to_bytes(), &trust, &at(t0())).unwrap_err();
        assert_eq!(err.code(), "bundle_bad_signature", "{err}");
    }
}

#[test]
fn signature_over_pae_not_over_raw_payload() {
    use base64::Engine;
    use ed25519_dalek::Signer;
    let key = old_key();
    let doc = document(1);
    let payload = doc.canonical_bytes();
    let pae = toolgate_bundle::pae(PAYLOAD_TYPE, &payload);
    let header = format!(
        "DSSEv1 {} {PAYLOAD_TYPE} {} ",
        PAYLOAD_TYPE.len(),
        payload.len()
    );
    assert_eq!(&pae[..header.len()], header.as_bytes());
    assert_eq!(&pae[header.len()..], &payload[..]);
    assert_eq!(toolgate_bundle::pae("t", b"ab"), b"DSSEv1 1 t 2 ab");

    // A signature by the trusted key over the bare payload (a classic DSSE
    // implementation bug) must not verify.
    let raw = ed25519_dalek::SigningKey::from_bytes(&[1; 32]);
    assert_eq!(toolgate_bundle::key_id(&raw.verifying_key()), key.key_id());
    let mut env = Envelope::sign(&doc, &key);
    env.signatures[0].sig =
        base64::engine::general_purpose::STANDARD.encode(raw.sign(&payload).to_bytes());
    let err = verify(&env.to_bytes(), &trust(&[&key]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_bad_signature");
    // ...while the same key over the PAE does.
    env.signatures[0].sig =
        base64::engine::general_purpose::STANDARD.encode(raw.sign(&pae).to_bytes());
    assert_eq!(
        code(verify(&env.to_bytes(), &trust(&[&key]), &at(t0()))),
        "ok"
    );

    // A bad trusted signature before a good one does not spoil it.
    let mut env = Envelope::sign(&doc, &key);
    env.signatures.insert(
        0,
        toolgate_bundle::EnvelopeSignature {
            keyid: new_key().key_id(),
            sig: env.signatures[0].sig.clone(),
        },
    );
    let v = verify(&env.to_bytes(), &trust(&[&key, &new_key()]), &at(t0())).unwrap();
    assert_eq!(v.keyid(), key.key_id());
}

#[test]
fn unknown_field_in_payload_is_invalid_policy() {
    let key = old_key();
    let trust = trust(&[&key]);
    let mut payload = payload_json(&signed(1, &key));
    payload["spec"]["rules"]["bash"]["alow"] = serde_json::json!(["*"]);
    let err = verify(&resign(&payload, &key), &trust, &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_invalid_policy");
    let policy = err.policy_error().unwrap();
    assert_eq!(policy.code(), "profile_unknown_field");
    assert_eq!(policy.field(), Some("payload.spec.rules.bash"));
    assert!(err.to_string().contains("alow"), "{err}");

    let mut top = payload_json(&signed(1, &key));
    top["status"] = serde_json::json!({});
    let err = verify(&resign(&top, &key), &trust, &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_invalid_policy");
    assert!(err.to_string().contains("status"), "{err}");
}

#[test]
fn a_policy_that_does_not_compile_is_invalid_policy() {
    let key = old_key();
    let mut payload = payload_json(&signed(1, &key));
    // A rule for a tool without an effects entry: the matrix is incomplete.
    payload["spec"]["rules"]["curl"] = serde_json::json!({"allow": ["*"]});
    let err = verify(&resign(&payload, &key), &trust(&[&key]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_invalid_policy");
    assert_eq!(err.policy_error().unwrap().field(), Some("spec.rules.curl"));

    let mut bad_grant = payload_json(&signed(1, &key));
    bad_grant["grants"][0]["expiresAt"] = serde_json::json!("tomorrow");
    let err = verify(&resign(&bad_grant, &key), &trust(&[&key]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_invalid_policy", "{err}");

    // The builder refuses the same inputs, so a signer never publishes them.
    let mut input = input(1, vec![]);
    input.spec.rules.insert("curl".into(), Default::default());
    assert_eq!(
        BundleDocument::new(input).unwrap_err().code(),
        "bundle_invalid_policy"
    );
}

#[test]
fn non_canonical_and_future_format_payloads_are_rejected() {
    let key = old_key();
    let payload = payload_json(&signed(1, &key));
    let pretty = serde_json::to_vec_pretty(&payload).unwrap();
    let err = verify(
        &Envelope::sign_bytes(&pretty, &key).to_bytes(),
        &trust(&[&key]),
        &at(t0()),
    )
    .unwrap_err();
    assert_eq!(err.code(), "bundle_not_canonical");

    // Same instant, other spelling: not the canonical encoding.
    let mut offset = payload.clone();
    offset["issuedAt"] = serde_json::json!("2030-01-01T01:00:00+01:00");
    let err = verify(&resign(&offset, &key), &trust(&[&key]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_not_canonical");

    // A duplicated key (parsers disagree on which one wins) is refused.
    let canonical = toolgate_policy::digest::canonical_json(&payload);
    let mut duplicated = b"{\"sequence\":99,".to_vec();
    duplicated.extend_from_slice(&canonical[1..]);
    let err = verify(
        &Envelope::sign_bytes(&duplicated, &key).to_bytes(),
        &trust(&[&key]),
        &at(t0()),
    )
    .unwrap_err();
    assert_eq!(err.code(), "bundle_not_canonical", "{err}");

    let mut future = payload.clone();
    future["formatVersion"] = serde_json::json!(2);
    let err = verify(&resign(&future, &key), &trust(&[&key]), &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_unsupported_format");
}

#[test]
fn edited_policy_version_is_version_mismatch() {
    let key = old_key();
    let trust = trust(&[&key]);
    for field in ["version", "specSha256", "hardlineSha256"] {
        let mut payload = payload_json(&signed(1, &key));
        let old = payload["policyVersion"][field].as_str().unwrap().to_owned();
        let edited = format!("{}0", &old[..old.len() - 1]);
        let edited = if edited == old {
            format!("{}1", &old[..old.len() - 1])
        } else {
            edited
        };
        payload["policyVersion"][field] = serde_json::json!(edited);
        let err = verify(&resign(&payload, &key), &trust, &at(t0())).unwrap_err();
        assert_eq!(err.code(), "bundle_version_mismatch", "{field}: {err}");
    }
    // Editing the rules without updating the version is caught the same way.
    let mut payload = payload_json(&signed(1, &key));
    payload["spec"]["rules"]["bash"]["allow"] = serde_json::json!(["*"]);
    let err = verify(&resign(&payload, &key), &trust, &at(t0())).unwrap_err();
    assert_eq!(err.code(), "bundle_version_mismatch");
}

#[test]
fn expiry_uses_the_injected_clock() {
    let key = old_key();
    let bytes = signed(1, &key);
    let trust = trust(&[&key]);
    let expires = t0() + SignedDuration::from_hours(24);
    assert_eq!(
        code(verify(
            &bytes,
            &trust,
            &at(expires - SignedDuration::from_nanos(1))
        )),
        "ok"
    );
    assert_eq!(code(verify(&bytes, &trust, &at(expires))), "bundle_expired");
    assert_eq!(
        code(verify(
            &bytes,
            &trust,
            &at(expires + SignedDuration::from_hours(1))
        )),
        "bundle_expired"
    );
}

#[test]
fn rollback_and_equivocation_are_refused() {
    let key = old_key();
    let trust = trust(&[&key]);
    let five = signed(5, &key);
    let digest = document(5).digest();
    let holding = |seq: u64, digest: &str| VerifyOptions::holding(t0(), seq, digest);

    assert_eq!(
        code(verify(&signed(4, &key), &trust, &holding(5, &digest))),
        "bundle_rollback"
    );
    assert_eq!(
        code(verify(&signed(0, &key), &trust, &holding(5, &digest))),
        "bundle_rollback"
    );
    // Reloading the held bundle is fine.
    assert_eq!(code(verify(&five, &trust, &holding(5, &digest))), "ok");
    // Newer is fine.
    assert_eq!(
        code(verify(&signed(6, &key), &trust, &holding(5, &digest))),
        "ok"
    );
    // Same sequence, different content: equivocation.
    let mut other = input(5, vec![]);
    other.expires_at += SignedDuration::from_hours(1);
    let other = Envelope::sign(&BundleDocument::new(other).unwrap(), &key).to_bytes();
    let err = verify(&other, &trust, &holding(5, &digest)).unwrap_err();
    assert!(matches!(err, BundleError::Equivocation { .. }), "{err}");
    assert_eq!(err.code(), "bundle_rollback");
    // Held sequence without a digest: an equal sequence is accepted.
    let opts = VerifyOptions {
        now: t0(),
        held_sequence: Some(5),
        held_digest: None,
    };
    assert_eq!(code(verify(&other, &trust, &opts)), "ok");
    assert_eq!(
        code(verify(&signed(4, &key), &trust, &opts)),
        "bundle_rollback"
    );
}

#[test]
fn checks_run_in_the_documented_order() {
    let key = old_key();
    let late = t0() + SignedDuration::from_hours(48);
    let old_seq = VerifyOptions {
        now: late,
        held_sequence: Some(100),
        held_digest: None,
    };
    // Expired and rolled back: expiry is reported first.
    assert_eq!(
        code(verify(&signed(1, &key), &trust(&[&key]), &old_seq)),
        "bundle_expired"
    );
    // ...but an untrusted signer is reported before either.
    assert_eq!(
        code(verify(&signed(1, &key), &trust(&[&new_key()]), &old_seq)),
        "bundle_unknown_key"
    );
    // A version mismatch in an expired bundle is reported as the mismatch.
    let mut payload = payload_json(&signed(1, &key));
    payload["policyVersion"]["version"] = serde_json::json!("safe-coding@000000000000+h00000000");
    assert_eq!(
        code(verify(&resign(&payload, &key), &trust(&[&key]), &old_seq)),
        "bundle_version_mismatch"
    );
    // An invalid policy with a bad signature is a bad signature.
    let mut env = Envelope::from_bytes(&resign(&payload, &key)).unwrap();
    env.signatures[0].sig = Envelope::from_bytes(&signed(1, &key)).unwrap().signatures[0]
        .sig
        .clone();
    assert_eq!(
        code(verify(&env.to_bytes(), &trust(&[&key]), &old_seq)),
        "bundle_bad_signature"
    );
}

#[test]
fn key_rotation_through_the_trust_file() {
    let (old, new) = (old_key(), new_key());
    let old_pem = old.public_key().to_spki_pem().unwrap();
    let new_pem = new.public_key().to_spki_pem().unwrap();
    let both = TrustSet::from_pem(&format!("{old_pem}{new_pem}")).unwrap();
    assert_eq!(both.len(), 2);
    let by_old = signed(1, &old);
    let by_new = signed(2, &new);
    assert_eq!(
        verify(&by_old, &both, &at(t0())).unwrap().keyid(),
        old.key_id()
    );
    assert_eq!(
        verify(&by_new, &both, &at(t0())).unwrap().keyid(),
        new.key_id()
    );

    let only_new = TrustSet::from_pem(&new_pem).unwrap();
    assert_eq!(
        code(verify(&by_old, &only_new, &at(t0()))),
        "bundle_unknown_key"
    );
    assert_eq!(code(verify(&by_new, &only_new, &at(t0()))), "ok");

    // During rotation a bundle may carry both signatures; either trust set accepts it.
    let mut dual = Envelope::sign(&document(3), &old);
    dual.add_signature(&new).unwrap();
    let dual = dual.to_bytes();
    assert_eq!(
        verify(&dual, &only_new, &at(t0())).unwrap().keyid(),
        new.key_id()
    );
    assert_eq!(
        verify(&dual, &TrustSet::from_pem(&old_pem).unwrap(), &at(t0()))
            .unwrap()
            .keyid(),
        old.key_id()
    );
}

#[test]
fn same_inputs_give_identical_bytes() {
    let key = old_key();
    let a = toolgate_bundle::build(input(9, vec![grant()]), &key).unwrap();
    let b = toolgate_bundle::build(input(9, vec![grant()]), &key).unwrap();
    assert_eq!(a.1, b.1);
    assert_eq!(a.0.digest(), b.0.digest());
    // The digest names the content, not the signer.
    let c = toolgate_bundle::build(input(9, vec![grant()]), &new_key()).unwrap();
    assert_eq!(a.0.digest(), c.0.digest());
    assert_ne!(a.1, c.1);
    // YAML key order in the source never matters: the spec is canonicalized.
    let payload = Envelope::from_bytes(&a.1).unwrap().payload_bytes().unwrap();
    assert_eq!(
        payload,
        toolgate_policy::digest::canonical_json(&payload_json(&a.1))
    );
}

#[test]
fn grants_change_digest_and_version_and_evaluate_from_the_bundle() {
    let key = old_key();
    let without = BundleDocument::new(input(1, vec![])).unwrap();
    let with = BundleDocument::new(input(1, vec![grant()])).unwrap();
    assert_ne!(without.digest(), with.digest());
    let sha12 = |v: &str| v.split('@').nth(1).unwrap()[..12].to_owned();
    assert_ne!(
        sha12(&without.policy_version.version),
        sha12(&with.policy_version.version)
    );
    assert_eq!(
        without.policy_version.hardline_sha256,
        with.policy_version.hardline_sha256
    );

    let v = verify(
        &Envelope::sign(&with, &key).to_bytes(),
        &trust(&[&key]),
        &at(t0()),
    )
    .unwrap();
    let args = serde_json::json!({"command": "cargo test --all"});
    let call = Call {
        tool: "bash",
        action: None,
        arguments: args.as_object().unwrap(),
    };
    let granted = v.policy().evaluate(
        &call,
        &Context {
            now: t0(),
            subject: Some("team-a"),
            ..Context::at(t0())
        },
    );
    assert_eq!(granted.verdict, Decision::Allow);
    assert_eq!(granted.reason, Reason::ApprovedByGrant);
    assert_eq!(
        granted.matched_rule.as_deref(),
        Some("grant:bash:cargo test*")
    );
    assert_eq!(granted.policy_version, v.policy_version());
    let other = v.policy().evaluate(
        &call,
        &Context {
            now: t0(),
            subject: Some("team-b"),
            ..Context::at(t0())
        },
    );
    assert_eq!(other.verdict, Decision::Escalate);
}

#[test]
fn builder_rejects_inverted_validity() {
    let mut i = input(1, vec![]);
    i.expires_at = i.issued_at;
    assert_eq!(
        BundleDocument::new(i).unwrap_err().code(),
        "bundle_invalid_input"
    );
}
