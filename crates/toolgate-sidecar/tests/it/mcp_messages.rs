//! No MCP message reaches an upstream undecided (#44 items 3 and 4): a
//! prompt-injected agent holding a secret tries every channel besides
//! `tools/call` — custom methods and notifications, undefined parameters
//! and `_meta`, made-up cursors, its own `Authorization` and
//! `Last-Event-ID`, GET and DELETE — against an upstream that records
//! every byte it gets; and `/mcp/NAME` answers protocol 2026-07-28's
//! header rules as the transport says.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, Method};
use serde_json::{Value, json};

use crate::common::*;

const SECRET: &str = "hunter2-SECRET";

fn spec() -> String {
    "mode: rules\nrules:\n  demo.echo: {allow: [\"*\"]}\n  demo.x/declared: {allow: [\"*\"]}\n  \
     demo.deploy: {allow: [\"*\"]}\n\
     effects:\n  demo.echo: {sideEffect: NONE, risk: low}\n  \
     demo.deploy: {sideEffect: NONE, risk: low}\n  \
     demo.x/declared: {sideEffect: NONE, risk: low}\n\
     egress: {allowHosts: [localhost]}\n"
        .to_owned()
}

/// Everything the upstream received: HTTP method, headers and body.
type Seen = Arc<Mutex<Vec<String>>>;

/// An MCP server on loopback that records every request whole and answers
/// `tools/list` in two pages (`nextCursor: page-2`, `cacheScope: public`).
async fn upstream() -> (String, Seen) {
    async fn handle(
        State(seen): State<Seen>,
        method: Method,
        headers: HeaderMap,
        body: String,
    ) -> axum::Json<Value> {
        let mut record = format!("{method}\n");
        for (name, value) in &headers {
            record.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
        }
        record.push_str(&body);
        seen.lock().unwrap().push(record);
        let m: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let result = match m["method"].as_str().unwrap_or_default() {
            "tools/list" if m.pointer("/params/cursor").is_none() => json!({
                "tools": [{"name": "echo", "inputSchema": {"type": "object"}},
                          {"name": "deploy", "inputSchema": {"type": "object", "properties": {
                              "service": {"type": "string", "x-mcp-header": "Service"}}}}],
                "nextCursor": "page-2", "cacheScope": "public"}),
            "tools/list" => json!({"tools": [], "cacheScope": "public"}),
            _ => json!({}),
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": m["id"], "result": result}))
    }
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route("/mcp", axum::routing::any(handle))
        .with_state(seen.clone());
    (serve_mcp(app).await, seen)
}

struct Gateway {
    _scratch: tempfile::TempDir,
    h: Harness,
    seen: Seen,
}

async fn gateway() -> Gateway {
    gateway_with(&spec()).await
}

async fn gateway_with(spec: &str) -> Gateway {
    let scratch = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        scratch.path().join("t.db").display()
    );
    let (upstream_url, seen) = upstream().await;
    let credentials = scratch.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::write(credentials.join("demo"), "Bearer gateway-owned-token\n").unwrap();
    let bundle = bundle(spec, 1, day(), &key());
    let h = Harness::start_configured(scratch.path(), &url, Some(&bundle), &unique("t"), |c| {
        c.mcp_upstreams = vec![("demo".into(), upstream_url)];
        c.mcp_credentials_dir = Some(credentials);
    })
    .await;
    Gateway {
        _scratch: scratch,
        h,
        seen,
    }
}

impl Gateway {
    /// POSTs `message` as the agent, with `headers` besides the usual ones.
    async fn send(&self, message: Value, headers: &[(&str, &str)]) -> (u16, String) {
        let mut request = self
            .h
            .client
            .post(format!("{}/mcp/demo", self.h.base))
            .header("accept", "application/json, text/event-stream")
            .header("x-toolgate-run-id", "agent-run");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.json(&message).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    fn upstream_saw(&self) -> String {
        self.seen.lock().unwrap().join("\n---\n")
    }
}

fn request(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

#[tokio::test]
async fn methods_outside_the_protocol_are_tools_the_profile_must_declare() {
    let mut g = gateway().await;
    let (_, body) = g
        .send(request("x/anything", json!({"leak": SECRET})), &[])
        .await;
    assert!(body.contains("unknown_tool"), "{body}");
    let (_, body) = g
        .send(request("tasks/update", json!({"taskId": SECRET})), &[])
        .await;
    assert!(body.contains("unknown_tool"), "{body}");
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/leak", "params": {"leak": SECRET}});
    let (status, _) = g.send(note, &[]).await;
    assert_eq!(status, 202);
    let (_, body) = g
        .send(
            request(
                "resources/subscribe",
                json!({"uri": format!("file:///{SECRET}")}),
            ),
            &[],
        )
        .await;
    assert!(body.contains("unknown_tool"), "{body}");
    assert!(!g.upstream_saw().contains(SECRET), "{}", g.upstream_saw());
    // A method the profile names is decided and passes.
    let (_, body) = g.send(request("x/declared", json!({"a": 1})), &[]).await;
    assert!(body.contains("result"), "{body}");
    assert!(g.upstream_saw().contains("x/declared"));
    g.h.stop().await;
}

#[tokio::test]
async fn undefined_parameters_meta_and_made_up_cursors_never_reach_the_server() {
    let mut g = gateway().await;
    let (_, body) = g
        .send(
            request("prompts/list", json!({"leak": SECRET, "_meta": {
                "progressToken": "ok-1", "leak": SECRET, "tracestate": format!("k={SECRET}"),
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"x": {"note": SECRET}}}}})),
            &[],
        )
        .await;
    assert!(body.contains("result"), "{body}");
    let (_, body) = g
        .send(request("tools/list", json!({"cursor": SECRET})), &[])
        .await;
    assert!(body.contains("-32602") && body.contains("cursor"), "{body}");
    let saw = g.upstream_saw();
    assert!(!saw.contains(SECRET), "{saw}");
    assert!(
        saw.contains("ok-1"),
        "a well-formed progress token passes: {saw}"
    );
    // The server's own cursor goes back; the filtered listing is private.
    let (_, first) = g.send(request("tools/list", json!({})), &[]).await;
    assert!(first.contains("page-2"), "{first}");
    assert!(first.contains(r#""cacheScope":"private""#), "{first}");
    let (_, second) = g
        .send(request("tools/list", json!({"cursor": "page-2"})), &[])
        .await;
    assert!(second.contains("result"), "{second}");
    g.h.stop().await;
}

#[tokio::test]
async fn the_agents_headers_stay_here_and_the_upstream_gets_the_gateways_credential() {
    let mut g = gateway().await;
    let headers = [
        ("authorization", "Bearer hunter2-SECRET"),
        ("last-event-id", SECRET),
        ("x-forwarded-for", SECRET),
    ];
    let (status, body) = g.send(request("ping", json!({})), &headers).await;
    assert_eq!(status, 200, "{body}");
    let saw = g.upstream_saw();
    assert!(!saw.contains(SECRET), "{saw}");
    assert!(
        saw.contains("authorization: Bearer gateway-owned-token"),
        "{saw}"
    );
    // GET and DELETE carry nothing to the server.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response =
            g.h.client
                .request(method.clone(), format!("{}/mcp/demo", g.h.base))
                .header("mcp-session-id", SECRET)
                .header("last-event-id", SECRET)
                .send()
                .await
                .unwrap();
        assert_eq!(response.status().as_u16(), 405, "{method}");
        assert_eq!(response.headers()["allow"], "POST");
    }
    assert!(!g.upstream_saw().contains(SECRET));
    // A session id the server never issued is no session: 404, not passed on.
    let (status, _) = g
        .send(request("ping", json!({})), &[("mcp-session-id", SECRET)])
        .await;
    assert_eq!(status, 404);
    assert!(!g.upstream_saw().contains(SECRET));
    g.h.stop().await;
}

#[tokio::test]
async fn protocol_2026_07_28_routing_headers_are_required_and_checked() {
    let mut g = gateway().await;
    let modern = ("mcp-protocol-version", "2026-07-28");
    let call = request("tools/call", json!({"name": "echo", "arguments": {}}));
    for headers in [
        vec![modern],
        vec![modern, ("mcp-method", "tools/call")],
        vec![modern, ("mcp-method", "tools/list"), ("mcp-name", "echo")],
        vec![modern, ("mcp-method", "tools/call"), ("mcp-name", "other")],
    ] {
        let (status, body) = g.send(call.clone(), &headers).await;
        assert_eq!(status, 400, "{headers:?}: {body}");
        assert!(body.contains("-32020"), "{body}");
    }
    let before = g.seen.lock().unwrap().len();
    assert_eq!(before, 0, "nothing was forwarded");
    let headers = [modern, ("mcp-method", "tools/call"), ("mcp-name", "echo")];
    let (status, body) = g.send(call, &headers).await;
    assert_eq!(status, 200, "{body}");
    g.h.stop().await;
}

#[tokio::test]
async fn mcp_param_headers_are_checked_against_the_body_and_made_anew() {
    let mut g = gateway().await;
    g.send(request("tools/list", json!({})), &[]).await;
    let modern = ("mcp-protocol-version", "2026-07-28");
    let call = request(
        "tools/call",
        json!({"name": "deploy", "arguments": {"service": "api"}}),
    );
    let routing = [modern, ("mcp-method", "tools/call"), ("mcp-name", "deploy")];
    for param in [None, Some("db"), Some("=?base64?not base64?=")] {
        let mut headers = routing.to_vec();
        if let Some(value) = param {
            headers.push(("mcp-param-service", value));
        }
        let (status, body) = g.send(call.clone(), &headers).await;
        assert_eq!(status, 400, "{param:?}: {body}");
        assert!(
            body.contains("-32020") && body.contains("Mcp-Param-Service"),
            "{body}"
        );
    }
    assert!(
        !g.upstream_saw().contains("\"deploy\""),
        "nothing was forwarded"
    );
    let mut headers = routing.to_vec();
    headers.push(("mcp-param-service", "=?base64?YXBp?="));
    headers.push(("mcp-param-other", SECRET));
    let (status, body) = g.send(call, &headers).await;
    assert_eq!(status, 200, "{body}");
    let saw = g.upstream_saw();
    assert!(
        saw.contains("mcp-param-service: api"),
        "made from the body: {saw}"
    );
    assert!(!saw.contains(SECRET), "{saw}");
    g.h.stop().await;
}

/// `demo` can post: once the run has read a secret, nothing it sends `demo`
/// — not only `tools/call` — may reach the server.
const FLOWS: &str = r#"
mode: rules
rules:
  reader: {allow: ["*"]}
  demo.post: {allow: ["*"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low}
  demo.post: {sideEffect: NETWORK_WRITE, risk: write}
egress: {allowHosts: [localhost]}
flows:
  labels:
    private: {tools: [reader], match: ["*secret*"]}
  rules:
    - name: no-exfiltration
      when: [private]
      deny: {sideEffects: [NETWORK_WRITE]}
"#;

#[tokio::test]
async fn every_message_to_a_server_that_can_carry_data_out_obeys_the_flow_rules() {
    let mut g = gateway_with(FLOWS).await;
    let (_, body) = g.send(request("ping", json!({})), &[]).await;
    assert!(body.contains("result"), "before the label: {body}");
    let read =
        g.h.authorize("reader", json!({"path": "app/secret.txt"}), "agent-run")
            .await;
    assert_eq!(read["flow_labels_set"], json!(["private"]), "{read}");
    let before = g.seen.lock().unwrap().len();
    for message in [
        request("ping", json!({})),
        request("prompts/list", json!({})),
        request("logging/setLevel", json!({"level": "info"})),
        request(
            "resources/read",
            json!({"uri": format!("https://x/{SECRET}")}),
        ),
    ] {
        let (_, body) = g.send(message.clone(), &[]).await;
        assert!(
            body.contains("flow_rule") || body.contains("unknown_tool"),
            "{message}: {body}"
        );
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": 1, "progress": 1, "message": SECRET}});
    let (status, _) = g.send(note, &[]).await;
    assert_eq!(status, 202);
    assert_eq!(
        g.seen.lock().unwrap().len(),
        before,
        "nothing reached the server"
    );
    // Each refusal is in the log as the flow rule's denial.
    let refused =
        g.h.tenant_log()
            .await
            .into_iter()
            .filter(|d| d.record.reason == "flow_rule" && d.record.tool.starts_with("demo."))
            .count();
    assert!(refused >= 4, "{refused}");
    g.h.stop().await;
}
