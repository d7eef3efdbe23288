//! Property-based fuzzing of the MCP message layer: whatever a client or a
//! (possibly hostile) server sends, classifying, listing, filtering and
//! digesting never panic, and a filtered `tools/list` only ever shrinks.
//! Cases: `TOOLGATE_FUZZ_CASES` (default 256).

use std::collections::HashSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate_mcp::message;

fn config() -> ProptestConfig {
    let cases = std::env::var("TOOLGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases(cases)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        ".{0,16}".prop_map(Value::String),
        Just(json!("tools/call")),
        Just(json!("tools/list")),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_owned()),
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("name".to_owned()),
                    Just("arguments".to_owned()),
                    Just("result".to_owned()),
                    Just("tools".to_owned()),
                    Just("inputSchema".to_owned()),
                    Just("error".to_owned()),
                    Just("isError".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn client_messages_are_classified_without_panic(m in json_value()) {
        let kind = message::classify(&m);
        // Only a message naming the method can be a call or a listing.
        if !matches!(kind, message::FromClient::Other) {
            prop_assert!(m.get("method").and_then(Value::as_str).is_some());
        }
        if let Some(id) = m.get("id") {
            let _ = message::step_id(id);
            let _ = message::error(id, -32600, "x");
        }
    }

    #[test]
    fn server_answers_are_listed_and_filtered_without_panic(
        m in json_value(),
        tools in prop::collection::vec(json_value(), 0..6),
        keep in prop::collection::hash_set("[a-z.]{0,8}", 0..4),
    ) {
        let _ = message::is_failure(&m);
        let mut response = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}});
        for tool in message::listed_definitions(&response) {
            let digest = message::definition_digest(tool);
            prop_assert!(digest.starts_with("sha256:"));
        }
        let before = message::listed_definitions(&response).len();
        let visible: HashSet<String> = keep;
        message::filter_tools(&mut response, "demo", &visible);
        let after = message::listed_tools(&response);
        prop_assert!(after.len() <= before);
        for name in after {
            prop_assert!(visible.contains(&message::policy_tool("demo", &name)));
        }
        let mut garbage = m;
        message::filter_tools(&mut garbage, "demo", &visible);
    }
}
