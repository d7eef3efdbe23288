//! Verifying a 1,000-rule bundle (signature + parse + compile) beside the
//! floor any verifier pays: SHA-256 of the payload plus one Ed25519
//! `verify_strict` over the same PAE bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use ed25519_dalek::{Signature, VerifyingKey};
use jiff::{SignedDuration, Timestamp};
use sha2::{Digest, Sha256};
use toolgate_bundle::{
    BundleInput, Envelope, PAYLOAD_TYPE, ProfileRef, SigningKey, TrustSet, VerifyOptions, build,
    pae, verify,
};
use toolgate_policy::{CompiledPolicy, PolicySpec, load};

/// A bash policy with `n` rules: 40% deny, 40% allow, 20% escalate.
fn rules_spec(n: usize) -> PolicySpec {
    let globs = |prefix: &str, count: usize| -> String {
        (0..count)
            .map(|i| format!("'{prefix}{i} *'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let deny = n * 2 / 5;
    let allow = n * 2 / 5;
    let escalate = n - deny - allow;
    let yaml = format!(
        "{{mode: rules, rules: {{bash: {{deny: [{}], allow: [{}], escalate: [{}]}}}},
           effects: {{bash: {{sideEffect: PROCESS_EXEC, risk: high}}}}}}",
        globs("deny", deny),
        globs("allow", allow),
        globs("ask", escalate)
    );
    load::from_str(&yaml).expect("bench spec")
}

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_seed(&[42; 32]);
    let t0: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
    let (_, bytes) = build(
        BundleInput {
            profile: ProfileRef {
                name: "bench".into(),
                namespace: Some("agents".into()),
            },
            spec: rules_spec(1000),
            grants: vec![],
            sequence: 1,
            issued_at: t0,
            expires_at: t0 + SignedDuration::from_hours(24),
        },
        &key,
    )
    .unwrap();
    let trust = TrustSet::from_keys([key.public_key()]).unwrap();
    let options = VerifyOptions::at(t0);
    let verified = verify(&bytes, &trust, &options).unwrap();
    assert_eq!(verified.policy().rule_count(), 1000);
    eprintln!("envelope: {} bytes", bytes.len());

    c.bench_function("bundle_verify/1000_rules", |b| {
        b.iter(|| black_box(verify(black_box(&bytes), &trust, &options).unwrap()))
    });

    // Where the time goes: compiling the policy alone (the policy crate's cost).
    let spec = rules_spec(1000);
    c.bench_function("part/compile_only_1000_rules", |b| {
        b.iter(|| black_box(CompiledPolicy::compile("bench", black_box(&spec), &[]).unwrap()))
    });

    // The floor: the same payload bytes, hashed and signature-checked with
    // the primitives alone (no JSON, no compile).
    let envelope = Envelope::from_bytes(&bytes).unwrap();
    let payload = STANDARD.decode(&envelope.payload).unwrap();
    let sig: [u8; 64] = STANDARD
        .decode(&envelope.signatures[0].sig)
        .unwrap()
        .try_into()
        .unwrap();
    let signature = Signature::from_bytes(&sig);
    let public = VerifyingKey::from_bytes(key.public_key().as_bytes()).unwrap();
    c.bench_function("floor/sha256+ed25519_verify_strict", |b| {
        b.iter(|| {
            let digest = Sha256::digest(black_box(&payload));
            let message = pae(PAYLOAD_TYPE, black_box(&payload));
            public.verify_strict(&message, &signature).unwrap();
            black_box(digest)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
