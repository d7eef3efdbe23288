//! Property-based fuzzing of everything an agent can send the sidecar: each
//! endpoint gets generated JSON (biased towards the real field names, so the
//! checks behind the parser are reached) and raw bytes. The sidecar must
//! answer every request with a success or a typed `{error: {code, message}}`
//! 4xx — never a 5xx, never a dropped connection — and no workspace path,
//! however spelled, may touch a file outside the run's root.
//!
//! Cases per property: `TOOLGATE_FUZZ_CASES` (default 64 per endpoint);
//! `scripts/fuzz.sh` runs the long version.

use crate::common::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

fn cases() -> u32 {
    std::env::var("TOOLGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Field names the endpoints read, and a few they do not.
const KEYS: &[&str] = &[
    "tool",
    "action",
    "arguments",
    "run_id",
    "step_id",
    "tenant",
    "definition_digest",
    "decision_id",
    "args_digest",
    "call_digest",
    "verification_probe",
    "path",
    "content",
    "calls",
    "reason",
    "outcome",
    "detail",
    "tools",
    "definitions",
    "command",
    "url",
    "host",
    "file_path",
    "extra",
    "",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z._-]{0,12}",
        Just("bash".to_owned()),
        Just("reader".to_owned()),
        Just("workspace.write".to_owned()),
        Just("../../etc/passwd".to_owned()),
        Just("a/.env".to_owned()),
        Just("rm -rf /".to_owned()),
        Just("\u{0}\u{7f}\n\r\t".to_owned()),
        ".{0,40}",
        Just("x".repeat(300)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// A body shaped like a real request of `endpoint`, with generated values.
fn near_valid(endpoint: &str) -> impl Strategy<Value = Value> {
    let endpoint = endpoint.to_owned();
    (text(), text(), json_value(), prop::collection::vec(prop::sample::select(KEYS), 0..3))
        .prop_map(move |(a, b, v, drop)| {
            let mut body = match endpoint.as_str() {
                "/v1/authorize" => json!({"tool": a, "arguments": {"command": b, "path": v}, "run_id": "r"}),
                "/v1/authorize/batch" => json!({"run_id": a, "calls": [{"tool": b, "arguments": {"x": v}}]}),
                "/v1/intents" => json!({"decision_id": a, "run_id": "r", "step_id": "s", "tool": b, "args_digest": "sha256:x", "verification_probe": v}),
                "/v1/workspace/write" => json!({"run_id": a, "path": b, "content": v.to_string()}),
                "/v1/tools/visible" => json!({"tools": [a, b], "definitions": {"x": v}}),
                _ => json!({"run_id": a, "path": b}),
            };
            if let Value::Object(map) = &mut body {
                for key in drop {
                    map.remove(key);
                }
            }
            body
        })
}

fn sample<S: Strategy>(runner: &mut TestRunner, strategy: &S) -> S::Value {
    strategy.new_tree(runner).expect("generate").current()
}

/// Success, or a typed client error. Never a server error.
fn assert_typed(endpoint: &str, sent: &str, status: u16, body: &Value) {
    assert!(
        status < 500,
        "{endpoint} answered {status} to {sent}: {body}"
    );
    if status >= 400 {
        let code = body["error"]["code"].as_str().unwrap_or_default();
        assert!(
            !code.is_empty() && body["error"]["message"].is_string(),
            "{endpoint} answered {status} without an error envelope to {sent}: {body}"
        );
    }
}

#[tokio::test]
async fn every_endpoint_answers_generated_input_with_a_typed_result() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("fuzz.db").display());
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
    // A file outside every run's root that no request may change.
    let outside = dir.path().join("workspaces").join("sentinel.txt");
    std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
    std::fs::write(&outside, b"untouched").unwrap();

    let mut runner = TestRunner::new(Config::with_cases(cases()));
    let endpoints = [
        "/v1/authorize",
        "/v1/authorize/batch",
        "/v1/intents",
        "/v1/workspace/read",
        "/v1/workspace/write",
        "/v1/workspace/list",
        "/v1/workspace/stat",
        "/v1/tools/visible",
        "/v1/runs/fuzz-run/cancel",
    ];
    let bytes = prop::collection::vec(any::<u8>(), 0..256);
    for endpoint in endpoints {
        let shaped = near_valid(endpoint);
        let arbitrary = json_value();
        for _ in 0..cases() {
            for body in [
                serde_json::to_vec(&sample(&mut runner, &shaped)).unwrap(),
                serde_json::to_vec(&sample(&mut runner, &arbitrary)).unwrap(),
                sample(&mut runner, &bytes),
            ] {
                let sent = String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>();
                let (status, answer) = h.post_raw(endpoint, body).await;
                assert_typed(endpoint, &sent, status, &answer);
            }
        }
    }
    // Path segments of the GET endpoints are agent input too.
    for _ in 0..cases() {
        let id: String = sample(&mut runner, &text());
        let seg = id.replace(['/', '?', '#', '%'], "_");
        for path in [
            format!("/v1/runs/{seg}"),
            format!("/v1/approvals/{seg}?wait=1"),
            format!("/v1/intents?run_id={seg}"),
        ] {
            let (status, answer) = h.get_json(&path).await;
            if !answer.is_null() {
                assert_typed(&path, &seg, status, &answer);
            }
            assert!(status < 500, "{path} answered {status}");
        }
    }
    assert_eq!(std::fs::read(&outside).unwrap(), b"untouched");
    h.stop().await;
}

#[tokio::test]
async fn no_workspace_path_reaches_outside_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("paths.db").display()
    );
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
    let base = dir.path().join("workspaces");
    std::fs::create_dir_all(&base).unwrap();
    let parts = prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just("".to_owned()),
        Just("/".to_owned()),
        Just("/tmp".to_owned()),
        Just("\\..".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("..\u{0}".to_owned()),
        Just("ok".to_owned()),
        Just("sentinel.txt".to_owned()),
        "[a-z.]{1,6}",
    ];
    let path = prop::collection::vec(parts, 1..7).prop_map(|p| p.join("/"));
    let mut runner = TestRunner::new(Config::with_cases(cases()));
    let run = "fuzz-paths";
    for _ in 0..(cases() * 4) {
        let p: String = sample(&mut runner, &path);
        for (endpoint, body) in [
            (
                "/v1/workspace/write",
                json!({"run_id": run, "path": p, "content": "pwned"}),
            ),
            ("/v1/workspace/read", json!({"run_id": run, "path": p})),
            ("/v1/workspace/stat", json!({"run_id": run, "path": p})),
            ("/v1/workspace/list", json!({"run_id": run, "path": p})),
        ] {
            let (status, answer) = h.post(endpoint, body).await;
            assert_typed(endpoint, &p, status, &answer);
        }
    }
    // Every file written is inside the run's own root (and some were).
    let root = base.join(&h.tenant).join(run);
    let mut written_inside = 0;
    let mut stack = vec![dir.path().to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if std::fs::read(&path).unwrap_or_default() == b"pwned" {
                assert!(
                    path.starts_with(&root),
                    "written outside the run: {}",
                    path.display()
                );
                written_inside += 1;
            }
        }
    }
    assert!(
        written_inside > 0,
        "no generated path was ever writable: the test proves nothing"
    );
    h.stop().await;
}
