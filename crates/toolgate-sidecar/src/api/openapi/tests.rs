use std::collections::BTreeSet;

use serde_json::{Value, json};
use toolgate_contract::errors as codes;

use super::*;

const DOC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/agent-api.openapi.json"
);

/// `docs/agent-api.openapi.json` is exactly [`document_text`];
/// `TOOLGATE_BLESS=1` writes it there (the mechanism of the docs tables).
#[test]
fn the_checked_in_document_is_the_generated_one() {
    let text = document_text();
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        std::fs::write(DOC, &text).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(DOC).unwrap_or_default();
    assert!(
        stored == text,
        "docs/agent-api.openapi.json is stale: run \
         TOOLGATE_BLESS=1 cargo test -p toolgate-sidecar --lib openapi"
    );
}

/// Every route of the router is in the table and none is made up: the
/// `(method, path)` pairs of `api/mod.rs`'s `.route(...)` calls are the
/// table's rows.
#[test]
fn the_table_names_every_route_of_the_router() {
    let routed = routed_methods(include_str!("../mod.rs"));
    assert!(routed.contains(&("delete", "/mcp/{server}".to_owned())));
    let listed: BTreeSet<(&str, String)> = ROUTES
        .iter()
        .map(|r| (r.method, r.path.to_owned()))
        .collect();
    assert_eq!(routed, listed);
}

/// `(method, path)` of each `.route("PATH", get(..).post(..))` in `source`
/// but `/metrics`: the method routers named in the call's arguments.
fn routed_methods(source: &str) -> BTreeSet<(&'static str, String)> {
    const METHODS: [&str; 7] = ["get", "post", "put", "patch", "delete", "head", "options"];
    let mut out = BTreeSet::new();
    for rest in source.split(".route(").skip(1) {
        // The call's arguments: up to the parenthesis that closes it.
        let mut depth = 0usize;
        let end = rest
            .char_indices()
            .find(|&(_, c)| match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth == 0 => true,
                ')' => {
                    depth -= 1;
                    false
                }
                _ => false,
            })
            .map_or(rest.len(), |(i, _)| i);
        let args = &rest[..end];
        let Some(path) = args
            .trim_start()
            .strip_prefix('"')
            .and_then(|p| p.split('"').next())
        else {
            continue;
        };
        if path == "/metrics" {
            continue;
        }
        // A method router is a word right before `(`: `get(`, `.post(`.
        let mut found = 0;
        for (at, _) in args.match_indices('(') {
            let word_start = args[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            if let Some(m) = METHODS.iter().find(|m| **m == &args[word_start..at]) {
                out.insert((*m, path.to_owned()));
                found += 1;
            }
        }
        assert!(found > 0, "no method read for {path}");
    }
    out
}

/// Every stable code is answered by some route, and a route lists only
/// stable codes; the document's `ErrorCode` enum is exactly them.
#[test]
fn every_error_code_has_a_route_and_the_enum_is_the_contract_s() {
    let mut used: BTreeSet<&str> = GUARD.iter().copied().collect();
    for route in ROUTES {
        for code in route.errors {
            assert!(codes::lookup(code).is_some(), "{}: {code}", route.path);
            used.insert(code);
        }
    }
    let all: BTreeSet<&str> = codes::ALL.iter().map(|e| e.code).collect();
    let unused: Vec<_> = all.difference(&used).collect();
    // `no_route` is the fallback's (listed on the hook route's unknown format).
    assert!(unused.is_empty(), "codes no route lists: {unused:?}");
    let doc = document();
    let listed: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let contract: Vec<&str> = codes::ALL.iter().map(|e| e.code).collect();
    assert_eq!(listed, contract);
    let detail = &doc["components"]["schemas"]["ErrorDetail"];
    assert_eq!(
        detail["properties"]["code"]["$ref"],
        "#/components/schemas/ErrorCode"
    );
}

/// Each error answer sits under its code's status and names its codes.
#[test]
fn errors_sit_under_their_status() {
    let doc = document();
    let authorize = &doc["paths"]["/v1/authorize"]["post"]["responses"];
    assert_eq!(
        authorize["403"]["x-error-codes"],
        json!(["origin_not_allowed"])
    );
    assert_eq!(
        authorize["503"]["x-error-codes"],
        json!(["store_unavailable"])
    );
    assert_eq!(
        authorize["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AuthorizeResponse"
    );
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, answer) in op["responses"].as_object().unwrap() {
                for code in answer["x-error-codes"].as_array().into_iter().flatten() {
                    let code = code.as_str().unwrap();
                    assert_eq!(
                        codes::status_of(code).to_string(),
                        *status,
                        "{method} {path}: {code}"
                    );
                }
            }
        }
    }
}

/// The authorize answer has every member of the policy's verdict plus
/// the response's own, exactly what the sidecar writes for an allow.
#[test]
fn the_authorize_answer_is_the_verdict_flattened() {
    let doc = document();
    let answer = &doc["components"]["schemas"]["AuthorizeResponse"];
    let props: BTreeSet<&str> = answer["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let verdict: Verdict = serde_json::from_value(json!({
        "verdict": "deny", "reason": "deny_rule", "matched_rule": "deny:t:*",
        "policy_version": "p", "risk": "high", "intent_required": false,
        "args_digest": "sha256:a", "call_digest": "sha256:c", "enforced": false,
        "would_verdict": "deny", "would_reason": "deny_rule", "would_rule": "r",
        "warning": "w",
    }))
    .unwrap();
    let full = AuthorizeResponse {
        decision_id: "d".into(),
        verdict,
        approval_id: Some("a".into()),
        flow_labels_set: vec!["l".into()],
    };
    let written: BTreeSet<String> = match serde_json::to_value(&full).unwrap() {
        Value::Object(m) => m.keys().cloned().collect(),
        _ => unreachable!(),
    };
    assert_eq!(
        props,
        written.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    let required: BTreeSet<&str> = answer["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for member in [
        "decision_id",
        "verdict",
        "reason",
        "matched_rule",
        "enforced",
    ] {
        assert!(required.contains(member), "{member} is always written");
    }
    for member in ["approval_id", "flow_labels_set", "would_verdict", "warning"] {
        assert!(!required.contains(member), "{member} may be left out");
    }
}
