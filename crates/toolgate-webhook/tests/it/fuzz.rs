//! Property-based fuzzing of the admission endpoints with real
//! AdmissionReview JSON: every fixture is mutated at generated JSON
//! pointers (values replaced by generated JSON, keys removed), and raw bytes
//! are sent too. The webhook must answer each with an AdmissionReview whose
//! `response.uid` echoes the request's (or a typed `400 {error}` when there
//! is no uid to answer to), and must never allow a mutated pod it should
//! refuse into a shape it cannot parse: an allowed pod answer's patch is
//! valid JSON Patch.
//!
//! Cases: `TOOLGATE_FUZZ_CASES` (default 64 per fixture); `scripts/fuzz.sh`
//! runs the long version.

use std::time::Duration;

use crate::common::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;
use toolgate_webhook::SidecarMode;

fn cases() -> u32 {
    std::env::var("TOOLGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        ".{0,24}".prop_map(Value::String),
        Just(Value::String("toolgate-sidecar".into())),
        Just(Value::String("true".into())),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_owned()),
                    Just("image".to_owned()),
                    Just("volumeMounts".to_owned()),
                    Just("toolgate.dev/profile".to_owned()),
                    "[a-z]{1,8}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every JSON pointer of `v`, the root excluded.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        _ => {}
    }
}

/// Replaces (or, for `None`, removes) the value at `pointer`.
fn mutate(doc: &mut Value, pointer: &str, replacement: Option<Value>) {
    let (parent, last) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    let last = last.replace("~1", "/").replace("~0", "~");
    let Some(parent) = doc.pointer_mut(parent) else {
        return;
    };
    match (parent, replacement) {
        (Value::Object(m), Some(v)) => {
            m.insert(last, v);
        }
        (Value::Object(m), None) => {
            m.remove(&last);
        }
        (Value::Array(a), Some(v)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a[i] = v;
            }
        }
        (Value::Array(a), None) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a.remove(i);
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn mutated_admission_reviews_get_typed_answers() {
    let server = TestServer::start(
        inject_config(SidecarMode::Native, Some("baseline")),
        Duration::from_secs(5),
    )
    .await;
    let mut client = server.client().await;
    let mut runner = TestRunner::new(Config::with_cases(cases()));
    let edits = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::option::weighted(0.8, json_value()),
        ),
        1..4,
    );
    let bytes = prop::collection::vec(any::<u8>(), 0..300);
    let fixtures = [
        ("pod-deployment-generatename.json", "/mutate-pods"),
        ("pod-multi-container.json", "/mutate-pods"),
        ("pod-already-injected.json", "/validate-pods"),
        ("policyprofile-good.json", "/validate-policyprofiles"),
        ("approval-resolve.json", "/validate-approvals"),
        ("approval-decision-change.json", "/validate-approvals"),
    ];
    let (mut answered, mut allowed) = (0, 0);
    for (name, path) in fixtures {
        let original = fixture_json(name);
        let mut all = Vec::new();
        pointers(&original, String::new(), &mut all);
        for _ in 0..cases() {
            let mut doc = original.clone();
            for (index, replacement) in edits.new_tree(&mut runner).unwrap().current() {
                mutate(&mut doc, index.get(all.as_slice()).as_str(), replacement);
            }
            let sent = serde_json::to_string(&doc).unwrap();
            let (status, body) = client.post(path, sent.clone().into_bytes()).await;
            match status {
                200 => {
                    let response = &body["response"];
                    assert_eq!(
                        response["uid"], doc["request"]["uid"],
                        "{path}: uid not echoed for {sent}"
                    );
                    let ok = response["allowed"]
                        .as_bool()
                        .unwrap_or_else(|| panic!("{path}: no `allowed` for {sent}: {body}"));
                    if ok {
                        allowed += 1;
                    } else {
                        assert!(response["status"]["reason"].is_string(), "{body}");
                    }
                    if let Some(patch) = response["patch"].as_str() {
                        use base64::Engine;
                        let raw = base64::engine::general_purpose::STANDARD
                            .decode(patch)
                            .expect("patch is base64");
                        let ops: json_patch::Patch =
                            serde_json::from_slice(&raw).expect("patch is JSON Patch");
                        let mut pod = doc["request"]["object"].clone();
                        json_patch::patch(&mut pod, &ops).unwrap_or_else(|e| {
                            panic!("{path}: patch does not apply ({e}) to {sent}")
                        });
                    }
                    answered += 1;
                }
                400 => assert!(
                    body["error"]["code"].is_string(),
                    "{path}: untyped 400 for {sent}: {body}"
                ),
                other => panic!("{path} answered {other} to {sent}: {body}"),
            }
        }
        for _ in 0..cases() {
            let raw = bytes.new_tree(&mut runner).unwrap().current();
            let (status, body) = client.post(path, raw).await;
            assert!(
                status == 200 || (status == 400 && body["error"]["code"].is_string()),
                "{path}: {status} {body}"
            );
        }
    }
    assert!(
        answered > 0 && allowed > 0,
        "mutations never reached a decision"
    );
    server.stop().await;
}
