//! Every refusal is in the decision log (#44 item 5): each reason an edge
//! refuses with (`Reason::EDGE`) is triggered through the real sidecar —
//! the MCP gateway's own checks, the upstream's egress, the workspace — and
//! each leaves a denial naming its check in the hash-chained log, written
//! before the refusal was answered; the chain still verifies.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;

use serde_json::{Value, json};
use toolgate_policy::Reason;

use crate::common::*;

fn spec() -> String {
    "mode: rules\nrules:\n  demo.echo: {allow: [\"*\"]}\n  demo.strict: {allow: [\"*\"]}\n  \
     demo.dup: {allow: [\"*\"]}\n  far.echo: {allow: [\"*\"]}\n  workspace.read: {allow: [\"*\"]}\n\
     effects:\n  demo.echo: {sideEffect: NONE, risk: low}\n  demo.strict: {sideEffect: NONE, risk: low}\n  \
     demo.dup: {sideEffect: NONE, risk: low}\n  far.echo: {sideEffect: NONE, risk: low}\n  \
     workspace.read: {sideEffect: WORKSPACE_READ, risk: low}\n\
     egress: {allowHosts: [localhost]}\n"
        .to_owned()
}

/// An MCP server listing `echo`, `strict` (an integer `n` required) and
/// `dup` twice.
async fn upstream() -> String {
    async fn handle(axum::Json(m): axum::Json<Value>) -> axum::Json<Value> {
        let result = match m["method"].as_str().unwrap_or_default() {
            "tools/list" => json!({"tools": [
                {"name": "echo", "inputSchema": {"type": "object"}},
                {"name": "strict", "inputSchema": {"type": "object", "required": ["n"],
                    "properties": {"n": {"type": "integer"}}}},
                {"name": "dup", "inputSchema": {"type": "object"}},
                {"name": "dup", "inputSchema": {"type": "object"}},
            ]}),
            _ => json!({"content": []}),
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": m["id"], "result": result}))
    }
    let app = axum::Router::new().route("/mcp", axum::routing::post(handle));
    serve_mcp(app).await
}

async fn mcp(h: &Harness, server: &str, message: Value, headers: &[(&str, &str)]) -> String {
    let mut request = h
        .client
        .post(format!("{}/mcp/{server}", h.base))
        .header("accept", "application/json, text/event-stream")
        .header("x-toolgate-run-id", "refused-run");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .json(&message)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

#[tokio::test]
async fn every_edge_refusal_is_a_logged_denial_before_it_is_answered() {
    let scratch = tempfile::tempdir().unwrap();
    for (backend, url) in backends(scratch.path()) {
        let dir = scratch.path().join(&backend);
        std::fs::create_dir_all(&dir).unwrap();
        let demo = upstream().await;
        let bundle = bundle(&spec(), 1, day(), &key());
        let mut h = Harness::start_configured(&dir, &url, Some(&bundle), &unique("t"), |c| {
            c.mcp_upstreams = vec![
                ("demo".into(), demo),
                // Outside `egress.allowHosts`.
                ("far".into(), "http://far.example/mcp".into()),
            ];
        })
        .await;
        let mut expected: Vec<(&str, &str, String)> = Vec::new();

        let body = mcp(&h, "demo", call("echo", json!({})), &[]).await;
        assert!(body.contains("tool_not_listed"), "{body}");
        expected.push(("demo.echo", "tool_not_listed", "mcp:tool_not_listed".into()));
        mcp(
            &h,
            "demo",
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            &[],
        )
        .await;
        let body = mcp(&h, "demo", call("strict", json!({"n": "seven"})), &[]).await;
        assert!(body.contains("invalid_arguments"), "{body}");
        expected.push((
            "demo.strict",
            "invalid_arguments",
            "mcp:invalid_arguments".into(),
        ));
        let body = mcp(&h, "demo", call("dup", json!({})), &[]).await;
        assert!(body.contains("tool_definition_changed"), "{body}");
        expected.push((
            "demo.dup",
            "tool_definition_changed",
            "mcp:tool_definition_changed".into(),
        ));
        let nameless = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {}});
        let body = mcp(&h, "demo", nameless, &[]).await;
        assert!(body.contains("-32602"), "{body}");
        expected.push((
            "demo.tools/call",
            "request_malformed",
            "mcp:request_malformed".into(),
        ));
        let body = mcp(
            &h,
            "demo",
            call("echo", json!({})),
            &[("mcp-method", "tools/list")],
        )
        .await;
        assert!(body.contains("-32020"), "{body}");
        let cursor =
            json!({"jsonrpc": "2.0", "id": 4, "method": "prompts/list", "params": {"cursor": "x"}});
        let body = mcp(&h, "demo", cursor, &[]).await;
        assert!(body.contains("cursor"), "{body}");
        expected.push((
            "demo.prompts/list",
            "request_malformed",
            "mcp:request_malformed".into(),
        ));
        let body = mcp(&h, "far", call("echo", json!({})), &[]).await;
        assert!(body.contains("mcp_upstream_not_allowed"), "{body}");
        expected.push((
            "far.tools/call",
            "upstream_not_allowed",
            "mcp:upstream_not_allowed".into(),
        ));

        // The workspace: an escape through a link, and a path it refuses.
        let root = dir.join("workspaces").join(&h.tenant).join("refused-run");
        std::fs::create_dir_all(&root).unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        for (path, code) in [
            ("etc/passwd", "workspace_escape"),
            ("a//b", "workspace_invalid_path"),
        ] {
            let (status, body) = h
                .post(
                    "/v1/workspace/read",
                    json!({"run_id": "refused-run", "path": path}),
                )
                .await;
            assert_eq!(body["error"]["code"], code, "{status} {body}");
            expected.push((
                "workspace.read",
                "workspace_refused",
                format!("workspace:{code}"),
            ));
        }

        let log = h.tenant_log().await;
        let denials: Vec<(String, String, String)> = log
            .iter()
            .map(|d| &d.record)
            .filter(|r| r.run_id == "refused-run")
            .inspect(|r| assert_eq!(r.verdict, "deny", "{r:?}"))
            .map(|r| {
                (
                    r.tool.clone(),
                    r.reason.clone(),
                    r.matched_rule.clone().unwrap_or_default(),
                )
            })
            .collect();
        for (tool, reason, check) in &expected {
            let row = (tool.to_string(), reason.to_string(), check.clone());
            assert!(
                denials.contains(&row),
                "{backend}: no row {row:?} in {denials:?}"
            );
        }
        // The header mismatch is logged too (its method is the header's body).
        assert!(
            denials
                .iter()
                .filter(|d| d.1 == "request_malformed")
                .count()
                >= 3,
            "{denials:?}"
        );
        // No workspace refusal was first recorded as an allow.
        assert!(
            !log.iter()
                .any(|d| d.record.run_id == "refused-run" && d.record.verdict == "allow")
        );
        let seen: BTreeSet<&str> = denials.iter().map(|d| d.1.as_str()).collect();
        let edge: BTreeSet<&str> = Reason::EDGE.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            seen, edge,
            "{backend}: every edge reason is triggered and logged"
        );
        for report in h.store.decisions().verify(Some(&h.tenant)).await.unwrap() {
            assert!(report.ok, "{backend}: {report:?}");
        }
        h.stop().await;
    }
}

#[tokio::test]
async fn an_agent_cannot_log_an_allow_or_a_policy_reason_as_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let (_, url) = backends(dir.path()).remove(0);
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(&spec(), 1, day(), &key()))).await;
    for reason in ["mode_allow_all", "allow_rule", "approved", "deny_rule"] {
        let (status, body) = h
            .post(
                "/v1/refusals",
                json!({"tool": "demo.echo", "run_id": "r", "reason": reason, "check": "mcp:x"}),
            )
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{reason}: {body}"
        );
    }
    let (status, body) = h
        .post(
            "/v1/refusals",
            json!({"tool": "demo.echo", "run_id": "r", "reason": "tool_not_listed", "check": "mcp:tool_not_listed"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let log = h.tenant_log().await;
    assert!(
        log.iter()
            .any(|d| d.record.decision_id == body["decision_id"] && d.record.verdict == "deny")
    );
    h.stop().await;
}
