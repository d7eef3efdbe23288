//! A bundle's candidate section (shadow mode): verified like the active
//! policy, or the whole bundle is refused; absent, the document's bytes
//! are what they were.

use crate::common::*;
use toolgate_bundle::{VerifyOptions, verify};
use toolgate_policy::load;

fn candidate_spec(extra_deny: &str) -> toolgate_policy::PolicySpec {
    let text = example_profile_text();
    let mut spec = load::parse_manifest(&text).unwrap().spec;
    if let Some(bash) = spec.rules.get_mut("bash") {
        bash.deny.push(extra_deny.to_owned());
    }
    spec
}

#[test]
fn a_candidate_is_signed_verified_and_compiled_beside_the_policy() {
    let doc = document(1)
        .with_candidate("next", candidate_spec("git push*"))
        .unwrap();
    let bytes = toolgate_bundle::sign(doc, &old_key()).unwrap().1;
    let verified = verify(&bytes, &trust(&[&old_key()]), &VerifyOptions::at(t0())).unwrap();
    let section = verified.document().candidate.clone().unwrap();
    assert!(section.policy_version.version.starts_with("next@"));
    let (active, candidate) = verified.into_policies();
    let candidate = candidate.expect("the candidate compiled");
    assert_eq!(candidate.version().version, section.policy_version.version);
    assert_ne!(active.version().version, candidate.version().version);
}

#[test]
fn a_bundle_without_a_candidate_keeps_its_bytes() {
    let bytes = signed(1, &old_key());
    assert!(payload_json(&bytes).get("candidate").is_none());
    assert_eq!(
        bytes,
        toolgate_bundle::sign(document(1), &old_key()).unwrap().1
    );
}

#[test]
fn a_candidate_whose_version_does_not_match_its_content_refuses_the_bundle() {
    let doc = document(1)
        .with_candidate("next", candidate_spec("git push*"))
        .unwrap();
    let bytes = toolgate_bundle::sign(doc, &old_key()).unwrap().1;
    // A signer that edits the candidate's rules but not its claimed version.
    let mut payload = payload_json(&bytes);
    payload["candidate"]["spec"]["rules"]["bash"]["deny"] = serde_json::json!(["rm *"]);
    let err = verify(
        &resign(&payload, &old_key()),
        &trust(&[&old_key()]),
        &VerifyOptions::at(t0()),
    )
    .unwrap_err();
    assert_eq!(err.code(), "bundle_version_mismatch", "{err}");

    // And one whose candidate does not compile.
    let mut payload = payload_json(&bytes);
    payload["candidate"]["spec"]["rules"]["bash"]["deny"] = serde_json::json!([""]);
    let err = verify(
        &resign(&payload, &old_key()),
        &trust(&[&old_key()]),
        &VerifyOptions::at(t0()),
    )
    .unwrap_err();
    assert_eq!(err.code(), "bundle_invalid_policy", "{err}");
    assert!(
        document(1)
            .with_candidate("next", candidate_spec(""))
            .is_err()
    );
}

#[test]
fn a_spec_naming_a_candidate_profile_is_signed_without_the_reference() {
    // Only the controller resolves `spec.candidate` (into a section); a
    // bundle built from such a spec elsewhere is the bundle of the spec
    // without it, byte for byte, and so is a candidate carrying one.
    let named = |mut spec: toolgate_policy::PolicySpec| {
        spec.candidate = Some(toolgate_policy::CandidateRef {
            profile: "elsewhere".into(),
        });
        spec
    };
    let mut with_ref = input(1, vec![grant()]);
    with_ref.spec = named(with_ref.spec);
    let doc = toolgate_bundle::BundleDocument::new(with_ref).unwrap();
    assert!(doc.spec.candidate.is_none());
    assert_eq!(doc.canonical_bytes(), document(1).canonical_bytes());
    let shadowing = doc
        .with_candidate("next", named(candidate_spec("git push*")))
        .unwrap();
    let plain = document(1)
        .with_candidate("next", candidate_spec("git push*"))
        .unwrap();
    assert_eq!(shadowing.canonical_bytes(), plain.canonical_bytes());
}
