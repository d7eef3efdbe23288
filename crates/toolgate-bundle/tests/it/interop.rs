//! An independent implementation (Python `cryptography`) verifies what we
//! sign: PAE recomputed from the spec, SPKI PEM loaded by OpenSSL's
//! bindings, key id and canonical form recomputed.

use std::process::Command;

use crate::common::*;

const VERIFIER: &str = r#"
import base64, hashlib, json, sys
from cryptography.hazmat.primitives.serialization import load_pem_public_key, Encoding, PublicFormat
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

envelope = json.load(open(sys.argv[1], "rb"))
pub = load_pem_public_key(open(sys.argv[2], "rb").read())
assert isinstance(pub, Ed25519PublicKey), type(pub)
raw = pub.public_bytes(Encoding.Raw, PublicFormat.Raw)
keyid = "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]

ptype = envelope["payloadType"]
body = base64.b64decode(envelope["payload"], validate=True)
pae = b"DSSEv1 %d %s %d %s" % (len(ptype.encode()), ptype.encode(), len(body), body)
sigs = [s for s in envelope["signatures"] if s["keyid"] == keyid]
assert sigs, "no signature with keyid " + keyid
pub.verify(base64.b64decode(sigs[0]["sig"], validate=True), pae)  # raises on failure

doc = json.loads(body)
canon = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
assert canon == body, "payload is not canonical JSON"
print(json.dumps({"keyid": keyid, "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
                  "policyVersion": doc["policyVersion"]["version"], "ptype": ptype}))
"#;

fn python_ready() -> bool {
    Command::new("python3")
        .args([
            "-c",
            "import cryptography.hazmat.primitives.asymmetric.ed25519",
        ])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_python(envelope: &[u8], public_pem: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let env_path = dir.path().join("bundle.json");
    let pub_path = dir.path().join("signing.pub");
    std::fs::write(&env_path, envelope).unwrap();
    std::fs::write(&pub_path, public_pem).unwrap();
    Command::new("python3")
        .arg("-c")
        .arg(VERIFIER)
        .arg(&env_path)
        .arg(&pub_path)
        .output()
        .unwrap()
}

#[test]
fn python_cryptography_verifies_our_envelope() {
    if !python_ready() && may_skip("python3 with the `cryptography` package") {
        return;
    }
    let key = toolgate_bundle::SigningKey::generate();
    let doc = document(3);
    let bytes = toolgate_bundle::Envelope::sign(&doc, &key).to_bytes();
    let out = run_python(&bytes, &key.public_key().to_spki_pem().unwrap());
    assert!(
        out.status.success(),
        "python rejected the bundle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["keyid"], key.key_id());
    assert_eq!(report["digest"], doc.digest());
    assert_eq!(report["policyVersion"], doc.policy_version.version);
    assert_eq!(report["ptype"], toolgate_bundle::PAYLOAD_TYPE);

    // The independent verifier also rejects a tampered payload, so the
    // success above is not vacuous.
    let mut env = toolgate_bundle::Envelope::from_bytes(&bytes).unwrap();
    let other = toolgate_bundle::Envelope::sign(&document(4), &key);
    env.payload = other.payload;
    let out = run_python(&env.to_bytes(), &key.public_key().to_spki_pem().unwrap());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("InvalidSignature"));
}
