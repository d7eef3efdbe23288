//! Key files, trust files, and OpenSSL interoperability of both.

use std::process::Command;

use crate::common::*;
use toolgate_bundle::{PublicKey, SigningKey, TrustSet, VerifyOptions, verify};

const RSA_PUB: &str = "-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC8bsNZDOZMMqLQAIfeu5GWWcLJ
FO2lSoupmX53ql5dzztiAm6VHPevohMGhFQVzzpuQXWxt4cIq46zhTaU/KKqCvo2
78tlYZ4dt9m+mcJUqUIJUKUiVWW1sSQ6AbC+gI0ARMMaxeKWfEUEprujFPH1USiS
wmOtFn5uutgbGly31wIDAQAB
-----END PUBLIC KEY-----
";

const P256_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEjLhLCXaK6VSFa8w3ejgqwwEfXcop
spTtGlSJweJxab7RSfu89/u1cwmRL8mEM5c6pXpWvFqEVM3834o0lreXpw==
-----END PUBLIC KEY-----
";

fn openssl() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn private_and_public_pem_round_trip() {
    let key = SigningKey::generate();
    let pem = key.to_pkcs8_pem().unwrap();
    assert!(
        pem.starts_with("-----BEGIN PRIVATE KEY-----\n"),
        "{}",
        &*pem
    );
    let back = SigningKey::from_pkcs8_pem(&pem).unwrap();
    assert_eq!(back.key_id(), key.key_id());
    let public = key.public_key().to_spki_pem().unwrap();
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----\n"));
    assert_eq!(PublicKey::from_spki_pem(&public).unwrap(), key.public_key());
    // Two generated keys differ.
    assert_ne!(SigningKey::generate().key_id(), key.key_id());
    // Debug never shows the secret.
    assert!(!format!("{key:?}").contains(&pem[28..40]));
}

#[test]
fn bad_key_files_are_key_invalid() {
    for text in [
        "",
        "garbage",
        RSA_PUB,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    ] {
        assert_eq!(
            SigningKey::from_pkcs8_pem(text).unwrap_err().code(),
            "key_invalid",
            "{text}"
        );
    }
    assert_eq!(
        PublicKey::from_spki_pem(RSA_PUB).unwrap_err().code(),
        "key_invalid"
    );
}

#[test]
fn private_key_file_is_owner_only_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signing.key");
    let key = SigningKey::generate();
    key.write_file(&path).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let err = SigningKey::generate().write_file(&path).unwrap_err();
    assert_eq!(err.code(), "io");
    assert_eq!(SigningKey::from_file(&path).unwrap().key_id(), key.key_id());
}

#[test]
fn trust_file_parsing() {
    let a = old_key().public_key().to_spki_pem().unwrap();
    let b = new_key().public_key().to_spki_pem().unwrap();
    // Comments between blocks and duplicates are fine.
    let text = format!("# old key\n{a}\n# new key\n{b}{a}");
    let set = TrustSet::from_pem(&text).unwrap();
    assert_eq!(set.len(), 2);
    let mut ids = vec![old_key().key_id(), new_key().key_id()];
    ids.sort();
    assert_eq!(set.key_ids().collect::<Vec<_>>(), ids);

    let err = |t: &str| TrustSet::from_pem(t).unwrap_err().code();
    assert_eq!(err(""), "trust_invalid");
    assert_eq!(err("# nothing here\n"), "trust_invalid");
    assert_eq!(
        err(&format!("{a}{}", &*old_key().to_pkcs8_pem().unwrap())),
        "trust_invalid"
    );
    assert_eq!(err("-----BEGIN PUBLIC KEY-----\nAAAA\n"), "trust_invalid");
    assert_eq!(err("-----BEGIN PUBLIC"), "trust_invalid");
    assert_eq!(err(&format!("{a}{RSA_PUB}")), "key_invalid");
    assert_eq!(err(P256_PUB), "key_invalid");
    assert!(
        TrustSet::from_pem(&format!("{a}{P256_PUB}"))
            .unwrap_err()
            .to_string()
            .contains("key 2")
    );
    assert_eq!(TrustSet::from_keys([]).unwrap_err().code(), "trust_invalid");
    let missing = TrustSet::from_file(std::path::Path::new("/nonexistent/trust.pem")).unwrap_err();
    assert_eq!(missing.code(), "io");
}

#[test]
fn openssl_generated_key_loads_and_signs() {
    if !openssl() && may_skip("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("k.pem");
    let pub_path = dir.path().join("k.pub");
    let ok = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&key_path)
        .status()
        .unwrap();
    assert!(ok.success());
    let ok = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&key_path)
        .arg("-out")
        .arg(&pub_path)
        .status()
        .unwrap();
    assert!(ok.success());
    let key = SigningKey::from_file(&key_path).unwrap();
    let trust = TrustSet::from_file(&pub_path).unwrap();
    let v = verify(&signed(1, &key), &trust, &VerifyOptions::at(t0())).unwrap();
    assert_eq!(v.keyid(), key.key_id());
}

#[test]
fn openssl_reads_our_keys() {
    if !openssl() && may_skip("openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("signing.key");
    let key = SigningKey::generate();
    key.write_file(&key_path).unwrap();
    let out = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&key_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        key.public_key().to_spki_pem().unwrap()
    );
    // OpenSSL writes PKCS#8 v1 for Ed25519; so do we, byte for byte.
    let out = Command::new("openssl")
        .args(["pkey", "-in"])
        .arg(&key_path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        *key.to_pkcs8_pem().unwrap()
    );
}
