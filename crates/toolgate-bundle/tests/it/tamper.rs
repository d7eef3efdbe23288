//! Properties: no single-byte change to a payload verifies, and no input
//! makes `verify` panic.

use crate::common::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;
use toolgate_bundle::{Envelope, VerifyOptions, verify};

fn fixture() -> (Vec<u8>, Envelope) {
    let bytes = signed(1, &old_key());
    let env = Envelope::from_bytes(&bytes).unwrap();
    (bytes, env)
}

proptest! {
    // `scripts/fuzz.sh` raises the bound with TOOLGATE_FUZZ_CASES.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("TOOLGATE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
    ))]

    #[test]
    fn flipping_any_payload_byte_never_verifies(position in any::<prop::sample::Index>(), mask in 1u8..=255) {
        let (_, mut env) = fixture();
        let mut payload = env.payload_bytes().unwrap();
        let i = position.index(payload.len());
        payload[i] ^= mask;
        env.payload = STANDARD.encode(&payload);
        let err = verify(&env.to_bytes(), &trust(&[&old_key()]), &VerifyOptions::at(t0())).unwrap_err();
        prop_assert_eq!(err.code(), "bundle_bad_signature");
    }

    #[test]
    fn flipping_any_envelope_byte_never_verifies_or_panics(position in any::<prop::sample::Index>(), mask in 1u8..=255) {
        let (mut bytes, _) = fixture();
        let i = position.index(bytes.len());
        bytes[i] ^= mask;
        let result = verify(&bytes, &trust(&[&old_key()]), &VerifyOptions::at(t0()));
        // Flipping bits of JSON whitespace or escapes could in principle keep
        // the same decoded content; anything that verifies must be the same bundle.
        if let Ok(v) = result {
            prop_assert_eq!(v.document(), &document(1));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = verify(&bytes, &trust(&[&old_key()]), &VerifyOptions::at(t0()));
        let _ = toolgate_bundle::inspect(&bytes);
        let _ = toolgate_bundle::TrustSet::from_pem(&String::from_utf8_lossy(&bytes));
    }
}
