//! One id rule at every way in: a tool, step, action, decision or digest
//! id is checked once, when the request is read, by the same rule
//! (`toolgate_policy::Id`) whether it came to `/v1/authorize`, a batch, the
//! workspace API or an intent, and a refusal names the member it refused.

use crate::common::*;
use serde_json::{Value, json};

/// Ids no way in may take, with why.
fn bad_ids() -> Vec<(&'static str, String)> {
    vec![
        ("blank", "   ".into()),
        ("too long", "x".repeat(257)),
        ("newline", "s1\nforged log line".into()),
        ("NUL", "s\u{0}".into()),
        ("escape", "\u{1b}[31mred".into()),
    ]
}

/// `body` with `value` put at the member `path` (`calls.0.tool`).
fn with(mut body: Value, path: &str, value: &str) -> Value {
    let mut at = &mut body;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        at = match part.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*part],
        };
    }
    at[parts[parts.len() - 1]] = json!(value);
    body
}

#[tokio::test]
async fn every_way_in_refuses_a_bad_id_and_names_it() {
    each_backend!(|h| {
        let run = unique("run");
        // Ways in, each with a well-formed body and the id members it takes.
        let ways: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "/v1/authorize",
                json!({"tool": "reader", "arguments": {}, "run_id": run, "step_id": "s1",
                       "action": "read", "definition_digest": "sha256:00"}),
                vec!["tool", "step_id", "action", "definition_digest"],
            ),
            (
                "/v1/authorize/batch",
                json!({"run_id": run, "calls": [
                    {"tool": "reader", "arguments": {}, "step_id": "s1"},
                    {"tool": "reader", "arguments": {}, "step_id": "s2", "action": "read"}]}),
                vec!["calls.0.tool", "calls.1.step_id", "calls.1.action"],
            ),
            (
                "/v1/workspace/read",
                json!({"run_id": run, "path": "a.txt", "step_id": "s1"}),
                vec!["step_id"],
            ),
            (
                "/v1/workspace/write",
                json!({"run_id": run, "path": "a.txt", "content": "x", "step_id": "s1"}),
                vec!["step_id"],
            ),
            (
                "/v1/intents",
                json!({"decision_id": "d1", "run_id": run, "step_id": "s1", "tool": "bash",
                       "args_digest": "sha256:00"}),
                vec![
                    "decision_id",
                    "step_id",
                    "tool",
                    "args_digest",
                    "call_digest",
                ],
            ),
        ];
        for (path, body, members) in &ways {
            for member in members {
                for (why, id) in bad_ids() {
                    let (status, err) = h.post(path, with(body.clone(), member, &id)).await;
                    assert_eq!(
                        (status, err["error"]["code"].as_str()),
                        (400, Some("invalid_request")),
                        "{path} {member} {why}: {err}"
                    );
                    let message = err["error"]["message"].as_str().unwrap();
                    let named = member.replace(".0.", "[0].").replace(".1.", "[1].");
                    assert!(message.contains(&named), "{path} {member}: {message}");
                }
            }
        }
        h.stop().await;
        assert!(
            h.tenant_log().await.is_empty(),
            "a refused id left no decision behind"
        );
    });
}

#[tokio::test]
async fn the_longest_id_passes_every_way_in_and_an_empty_step_is_none() {
    each_backend!(|h| {
        let run = unique("run");
        let longest = "s".repeat(256);
        let (status, v) = h
            .post(
                "/v1/authorize",
                json!({"tool": "reader", "arguments": {}, "run_id": run, "step_id": longest}),
            )
            .await;
        assert_eq!((status, v["verdict"].as_str()), (200, Some("allow")), "{v}");
        let (status, v) = h
            .post(
                "/v1/authorize/batch",
                json!({"run_id": run, "calls": [{"tool": "reader", "arguments": {}, "step_id": longest}]}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        for step in [json!(longest), json!(""), Value::Null] {
            let (status, v) = h
                .post(
                    "/v1/workspace/write",
                    json!({"run_id": run, "path": "a.txt", "content": "x", "step_id": step}),
                )
                .await;
            assert_eq!(status, 200, "{step}: {v}");
        }
        let (status, v) = h
            .post(
                "/v1/authorize",
                json!({"tool": "reader", "arguments": {}, "run_id": run, "step_id": ""}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        h.stop().await;
        let log = h.tenant_log().await;
        let steps: Vec<&str> = log.iter().map(|r| r.record.step_id.as_str()).collect();
        assert_eq!(steps.len(), 6, "{steps:?}");
        assert_eq!(steps.iter().filter(|s| **s == longest).count(), 3);
        assert_eq!(
            steps.iter().filter(|s| **s == "-").count(),
            3,
            "an empty or absent step is recorded as no step: {steps:?}"
        );
    });
}
