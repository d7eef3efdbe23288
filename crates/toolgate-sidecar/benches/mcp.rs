//! The MCP gateway's added latency: the same allowed low-risk `tools/call`
//! sent straight to an upstream MCP endpoint and through the sidecar's
//! `/mcp/NAME`, in one run, sequentially over kept-alive loopback
//! connections (p50 and p99 of each, and the difference).
//!
//!   cargo bench -p toolgate-sidecar --bench mcp
//!
//! The upstream is a minimal streamable-HTTP endpoint that answers
//! `tools/call` with a JSON `CallToolResult` (no SSE, no session), so what
//! is measured is the gateway: parse, decide (in process), forward, relay.
//! The sidecar and the upstream share one server runtime thread; the client
//! runs on another.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::post;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_sidecar::{Sidecar, SidecarConfig};

const SPEC: &str = r#"
mode: rules
rules:
  demo.echo: {allow: ["*"]}
  stream.echo: {allow: ["*"]}
  "*": {deny: ["*password*"]}
hardline: {cidrs: ["169.254.0.0/16"]}
effects:
  demo.echo: {sideEffect: NONE, risk: low, readOnly: true}
  stream.echo: {sideEffect: NONE, risk: low, readOnly: true}
"#;

fn call(i: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"text": "hello"}}})
}

/// The upstream's answer to `req`.
fn answer(req: &Value) -> Value {
    // The gateway calls only tools it has seen listed, with a schema.
    let result = if req["method"] == "tools/list" {
        json!({"tools": [{"name": "echo", "description": "Echoes text.",
                          "inputSchema": {"type": "object",
                                          "properties": {"text": {"type": "string"}}}}]})
    } else {
        json!({"content": [{"type": "text", "text": "hello"}], "isError": false})
    };
    json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
}

/// `/mcp` answers in JSON, `/sse` as an SSE stream (headers and body in
/// separate writes, as streaming servers do). `TCP_NODELAY` on both, so the
/// direct peer is not slowed by the upstream itself.
async fn upstream() -> SocketAddr {
    use axum::serve::ListenerExt;
    let app = axum::Router::new()
        .route(
            "/mcp",
            post(|axum::Json(req): axum::Json<Value>| async move { axum::Json(answer(&req)) }),
        )
        .route(
            "/sse",
            post(|axum::Json(req): axum::Json<Value>| async move {
                let event = format!("event: message\ndata: {}\n\n", answer(&req));
                let body = axum::body::Body::from_stream(futures_util::stream::once(async move {
                    Ok::<_, std::convert::Infallible>(event)
                }));
                ([("content-type", "text/event-stream")], body)
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// p50 and p99 (µs) of `n` sequential `tools/call`s to `url` from Python's
/// blocking `http.client`, the most common way scripts call HTTP: it
/// delays its ACKs, so a server that writes an answer in two pieces
/// without `TCP_NODELAY` makes it wait for the delayed ACK (~40 ms).
fn blocking_client(url: &str, n: u64) -> (f64, f64) {
    let script = r#"
import http.client, json, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); n = int(sys.argv[2])
c = http.client.HTTPConnection(u.hostname, u.port)
h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
def call(i):
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "hello"}}})
    c.request("POST", u.path, body, h); r = c.getresponse(); data = r.read()
    assert r.status == 200 and b"hello" in data, data
call(0); call(1)
times = []
for i in range(n):
    t = time.perf_counter(); call(i + 2); times.append((time.perf_counter() - t) * 1e6)
times.sort()
print(times[len(times) // 2], times[int((len(times) - 1) * 0.99)])
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, url, &n.to_string()])
        .output()
        .expect("python3 runs the blocking client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace().map(|p| p.parse::<f64>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

async fn start_sidecar(dir: &std::path::Path, upstream: SocketAddr) -> Sidecar {
    let key = SigningKey::from_seed(&[2; 32]);
    let (_, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: "bench".into(),
                namespace: None,
            },
            spec: toolgate_policy::load::from_str(SPEC).unwrap(),
            grants: vec![],
            sequence: 1,
            issued_at: Timestamp::now(),
            expires_at: Timestamp::now() + SignedDuration::from_hours(1),
        },
        &key,
    )
    .unwrap();
    std::fs::write(dir.join("bundle.json"), bytes).unwrap();
    std::fs::write(
        dir.join("trust.pem"),
        key.public_key().to_spki_pem().unwrap(),
    )
    .unwrap();
    let mut config = SidecarConfig::new(
        dir.join("bundle.json"),
        dir.join("trust.pem"),
        format!("sqlite://{}?mode=rwc", dir.join("bench.db").display()),
    );
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.workspace_base = dir.join("ws");
    config.tenant = "bench".into();
    config.mcp_upstreams = vec![
        ("demo".into(), format!("http://{upstream}/mcp")),
        ("stream".into(), format!("http://{upstream}/sse")),
    ];
    Sidecar::start(config).await.unwrap()
}

async fn measure(client: &reqwest::Client, url: &str, n: u64) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let started = Instant::now();
        let r = client
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&call(i))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["result"]["isError"], false, "{body}");
        out.push(started.elapsed());
    }
    out.sort();
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let n: u64 = std::env::var("TOOLGATE_BENCH_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000);
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (upstream_addr, sidecar_addr) = server.block_on(async {
        let up = upstream().await;
        let sidecar = start_sidecar(dir.path(), up).await;
        let addr = sidecar.addr;
        std::mem::forget(sidecar);
        (up, addr)
    });
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_rt.block_on(async {
        let client = reqwest::Client::new();
        let direct_url = format!("http://{upstream_addr}/mcp");
        let gateway_url = format!("http://{sidecar_addr}/mcp/demo");
        // The gateway learns the tool's definition from a listing first.
        let listed: Value = client
            .post(&gateway_url)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(listed["result"]["tools"][0]["name"], "echo", "{listed}");
        // Warm both paths (connections, allocator, the decision batcher).
        measure(&client, &direct_url, 500).await;
        measure(&client, &gateway_url, 500).await;
        // Interleave rounds so drift hits both alike.
        let (mut direct, mut gateway) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            direct.extend(measure(&client, &direct_url, n / 5).await);
            gateway.extend(measure(&client, &gateway_url, n / 5).await);
        }
        direct.sort();
        gateway.sort();
        // For reference: the same decision asked of /v1/authorize over HTTP.
        let authorize_url = format!("http://{sidecar_addr}/v1/authorize");
        let mut authorize = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let started = Instant::now();
            let r = client
                .post(&authorize_url)
                .json(&json!({"tool": "demo.echo", "arguments": {"text": "hello"},
                              "run_id": "bench", "step_id": "mcp:demo"}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            let _: Value = r.json().await.unwrap();
            authorize.push(started.elapsed());
        }
        authorize.sort();
        let (d50, d99) = (pct(&direct, 0.5), pct(&direct, 0.99));
        let (g50, g99) = (pct(&gateway, 0.5), pct(&gateway, 0.99));
        println!("mcp tools/call, {n} sequential requests each, loopback, kept-alive connections");
        println!(
            "  direct to upstream   p50 {:>7.0} µs   p99 {:>7.0} µs",
            us(d50),
            us(d99)
        );
        println!(
            "  through /mcp/demo    p50 {:>7.0} µs   p99 {:>7.0} µs",
            us(g50),
            us(g99)
        );
        println!(
            "  /v1/authorize alone  p50 {:>7.0} µs   p99 {:>7.0} µs   (the decision, for reference)",
            us(pct(&authorize, 0.5)),
            us(pct(&authorize, 0.99))
        );
        println!(
            "  added by the gateway p50 {:>7.0} µs   p99 {:>7.0} µs   (goal: p50 <= 100 µs)",
            us(g50.saturating_sub(d50)),
            us(g99.saturating_sub(d99))
        );
        // An SSE answer to a blocking client that delays its ACKs.
        let stream_url = format!("http://{sidecar_addr}/mcp/stream");
        let listed = client
            .post(&stream_url)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(listed.contains("echo"), "{listed}");
        let m = (n / 5).max(200);
        let (bd50, bd99) = blocking_client(&format!("http://{upstream_addr}/sse"), m);
        let (bg50, bg99) = blocking_client(&stream_url, m);
        println!("mcp tools/call answered as SSE, {m} sequential requests from Python's http.client");
        println!("  direct to upstream   p50 {bd50:>7.0} µs   p99 {bd99:>7.0} µs");
        println!("  through /mcp/stream  p50 {bg50:>7.0} µs   p99 {bg99:>7.0} µs   (a delayed ACK would be ~40,000 µs)");
    });
}
