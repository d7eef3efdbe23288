//! The console over real HTTP, against a stand-in for the Kubernetes API
//! (TokenReviews say the token is the user name; everyone may list
//! Approvals in `team-a` only, where one waits and can be patched; one
//! waits in `team-b` too; the console's metadata watch is fed by the test),
//! with a plain HTTP client that sends what it is told: a copied cookie, a
//! form token from another session, an `Origin` of the same host on another
//! port or scheme, one sign-in too many, a path that names no namespace.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use toolgate_console::{Cluster, Console, Keys, sessions};

/// Where people may list Approvals.
const NS: &str = "team-a";
/// Where they may not.
const OTHER: &str = "team-b";
const GROUP: &str = "/apis/toolgate.dev/v1alpha1";

/// What the stand-in API server was asked: (method, path, impersonated user).
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// The stand-in: what it was asked, and the events its watch sends.
#[derive(Clone)]
struct Api {
    seen: Seen,
    watch: broadcast::Sender<String>,
}

async fn api_server() -> (String, Api) {
    let api = Api {
        seen: Arc::default(),
        watch: broadcast::channel(16).0,
    };
    let state = api.clone();
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move { fake_api(&state, &method, &uri, &headers, &body) }
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, api)
}

fn meta(ns: &str, name: &str, version: u32) -> serde_json::Value {
    serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                       "metadata": {"name": name, "namespace": ns, "uid": name,
                                    "resourceVersion": version.to_string()}})
}

fn waiting(ns: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"request": {"approvalId": name, "tenant": ns, "invocationId": "i",
                             "tool": "bash", "argsDigest": "sha256:0", "runId": "r",
                             "policyVersion": "p@1"}}})
}

fn fake_api(api: &Api, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Response {
    let user = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    api.seen
        .lock()
        .unwrap()
        .push((method.to_string(), uri.path().to_owned(), user.clone()));
    let json = |v: serde_json::Value| axum::Json(v).into_response();
    let forbidden = || {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "message": "forbidden", "reason": "Forbidden", "code": 403});
        (StatusCode::FORBIDDEN, axum::Json(status)).into_response()
    };
    let namespaced = format!("{GROUP}/namespaces/{NS}/approvals");
    let path = uri.path();
    let query = uri.query().unwrap_or_default();
    if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
        let review: serde_json::Value = serde_json::from_slice(body).unwrap();
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let status = if token == "bad" {
            serde_json::json!({"authenticated": false, "error": "no such token"})
        } else {
            serde_json::json!({"authenticated": true,
                               "user": {"username": token, "groups": ["oncall"]}})
        };
        return json(serde_json::json!({"apiVersion": "authentication.k8s.io/v1",
                                       "kind": "TokenReview", "spec": review["spec"],
                                       "status": status}));
    }
    if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" {
        let review: serde_json::Value = serde_json::from_slice(body).unwrap();
        let ns = review["spec"]["resourceAttributes"]["namespace"].as_str();
        return json(serde_json::json!({"apiVersion": "authorization.k8s.io/v1",
                                       "kind": "SelfSubjectAccessReview",
                                       "spec": review["spec"],
                                       "status": {"allowed": ns == Some(NS)}}));
    }
    if path == format!("{GROUP}/approvals") && !user.is_empty() {
        return forbidden();
    }
    if path == format!("{GROUP}/approvals") && query.contains("watch=true") {
        // The console's own metadata watch: what the test sends, until it goes.
        let events = futures::stream::unfold(api.watch.subscribe(), |mut rx| async move {
            let line = rx.recv().await.ok()?;
            Some((Ok::<_, std::io::Error>(Bytes::from(line + "\n")), rx))
        });
        return Body::from_stream(events).into_response();
    }
    if path == format!("{GROUP}/approvals") {
        return json(serde_json::json!({"apiVersion": "meta.k8s.io/v1",
                                       "kind": "PartialObjectMetadataList",
                                       "metadata": {"resourceVersion": "1"},
                                       "items": [meta(NS, "apr-1", 1), meta(OTHER, "apr-2", 1)]}));
    }
    if path == namespaced {
        return json(serde_json::json!({"apiVersion": "toolgate.dev/v1alpha1",
                                       "kind": "ApprovalList",
                                       "metadata": {"resourceVersion": "1"},
                                       "items": [waiting(NS, "apr-1")]}));
    }
    if let Some(name) = path.strip_prefix(&format!("{namespaced}/")) {
        return json(
            serde_json::json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
                               "metadata": {"name": name, "namespace": NS}, "spec": {}}),
        );
    }
    if path.starts_with(&format!("{GROUP}/namespaces/{OTHER}/")) {
        return forbidden();
    }
    StatusCode::NOT_FOUND.into_response()
}

/// A console (plain HTTP unless `secure`) on the stand-in API server.
async fn console(secure: bool) -> (SocketAddr, Api) {
    let (url, api) = api_server().await;
    let config = kube::Config::new(url.parse().unwrap());
    let console = Console {
        cluster: Cluster::new(config).unwrap(),
        keys: Keys::new(vec![9; 32], None).unwrap(),
        secure_cookies: secure,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = toolgate_console::router(console).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, api)
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request, as written, on its own connection.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    form: &str,
) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(form);
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut raw))
        .await
        .expect("an answer")
        .unwrap();
    parse(&String::from_utf8_lossy(&raw))
}

fn parse(raw: &str) -> Answer {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn origin(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// Signs `token` in: the `Cookie` header value of the new session.
async fn sign_in(addr: SocketAddr, token: &str) -> String {
    let o = origin(addr);
    let a = send(
        addr,
        "POST",
        "/login",
        &[("Origin", &o)],
        &format!("token={token}"),
    )
    .await;
    assert_eq!(a.status, 303, "{}", a.body);
    let set = a.header("set-cookie").expect("a session cookie");
    set.split(';').next().unwrap().to_owned()
}

/// The form token on the page `cookie`'s session gets.
async fn csrf(addr: SocketAddr, cookie: &str) -> String {
    let a = send(addr, "GET", "/", &[("Cookie", cookie)], "").await;
    assert_eq!(a.status, 200, "{}", a.body);
    let at = a
        .body
        .find("name=\"csrf\" value=\"")
        .expect("a decision form")
        + 19;
    a.body[at..at + 64].to_owned()
}

#[tokio::test]
async fn a_signed_out_cookie_is_refused_when_replayed() {
    let (addr, _) = console(false).await;
    let cookie = sign_in(addr, "alice").await;
    let other = sign_in(addr, "alice").await;
    let json = [("Cookie", cookie.as_str()), ("Accept", "application/json")];
    assert_eq!(send(addr, "GET", "/fragment", &json, "").await.status, 200);

    // A live-update stream open at the time ends with the sign-out.
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!(
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        ).as_bytes())
        .await
        .unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");

    let o = origin(addr);
    let out = send(
        addr,
        "POST",
        "/logout",
        &[("Cookie", &cookie), ("Origin", &o)],
        "",
    )
    .await;
    assert_eq!(out.status, 303, "{}", out.body);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));

    // The browser forgot the cookie; a copy of it is refused everywhere.
    for (method, path) in [("GET", "/fragment"), ("GET", "/"), ("GET", "/events")] {
        let a = send(addr, method, path, &json, "").await;
        assert_eq!(a.status, 401, "{method} {path}: {}", a.body);
        let error: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(error["error"]["code"], "unauthenticated", "{}", a.body);
    }
    let a = send(addr, "GET", "/", &[("Cookie", &cookie)], "").await;
    assert_eq!(a.status, 401, "a page too: {}", a.body);
    let a = send(
        addr,
        "POST",
        "/approvals/team-a/apr-1",
        &[("Cookie", &cookie), ("Origin", &o)],
        "csrf=x&decision=approved",
    )
    .await;
    assert_eq!(a.status, 401, "{}", a.body);
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest))
        .await
        .expect("the open stream ended with the sign-out")
        .unwrap();
    // The same person's other session is still signed in.
    let a = send(addr, "GET", "/fragment", &[("Cookie", &other)], "").await;
    assert_eq!(a.status, 200, "{}", a.body);
}

#[tokio::test]
async fn a_form_token_works_only_in_its_own_session() {
    let (addr, api) = console(false).await;
    let seen = &api.seen;
    let first = sign_in(addr, "alice").await;
    let second = sign_in(addr, "alice").await;
    let (a, b) = (csrf(addr, &first).await, csrf(addr, &second).await);
    assert_ne!(a, b, "every session has its own form token");
    let o = origin(addr);
    let decide = |cookie: String, token: String| {
        let o = o.clone();
        async move {
            send(
                addr,
                "POST",
                "/approvals/team-a/apr-1",
                &[("Cookie", &cookie), ("Origin", &o)],
                &format!("csrf={token}&decision=approved"),
            )
            .await
        }
    };
    let refused = decide(second.clone(), a.clone()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        refused.body.contains("data-code=\"forbidden\""),
        "{}",
        refused.body
    );
    assert!(!seen.lock().unwrap().iter().any(|(m, _, _)| m == "PATCH"));
    let taken = decide(second.clone(), b).await;
    assert_eq!(taken.status, 303, "{}", taken.body);
    let patched: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _, _)| m == "PATCH")
        .cloned()
        .collect();
    assert_eq!(patched.len(), 1);
    assert_eq!(patched[0].2, "alice", "decided as the signed-in person");
    // Signed out, the first session's token is worth nothing either way.
    let out = send(
        addr,
        "POST",
        "/logout",
        &[("Cookie", &first), ("Origin", &o)],
        "",
    )
    .await;
    assert_eq!(out.status, 303);
    assert_eq!(decide(first, a).await.status, 401);
}

#[tokio::test]
async fn another_port_or_scheme_is_another_origin() {
    let (addr, _) = console(false).await;
    let cookie = sign_in(addr, "alice").await;
    let token = csrf(addr, &cookie).await;
    let host = addr.ip();
    let port = addr.port();
    for bad in [
        format!("http://{host}:{}", port.wrapping_add(1)),
        format!("https://{host}:{port}"),
        format!("http://{host}"),
        format!("http://localhost:{port}"),
        "null".to_owned(),
    ] {
        let a = send(
            addr,
            "POST",
            "/approvals/team-a/apr-1",
            &[("Cookie", &cookie), ("Origin", &bad)],
            &format!("csrf={token}&decision=approved"),
        )
        .await;
        assert_eq!(a.status, 403, "{bad}: {}", a.body);
        let a = send(addr, "POST", "/login", &[("Origin", &bad)], "token=alice").await;
        assert_eq!(a.status, 403, "sign-in from {bad}");
    }
    let a = send(
        addr,
        "POST",
        "/approvals/team-a/apr-1",
        &[("Cookie", &cookie), ("Origin", &origin(addr))],
        &format!("csrf={token}&decision=approved"),
    )
    .await;
    assert_eq!(a.status, 303, "{}", a.body);

    // A console behind TLS (Secure cookies) takes its https origin only.
    let (addr, _) = console(true).await;
    let https = format!("https://{addr}");
    let a = send(
        addr,
        "POST",
        "/login",
        &[("Origin", &origin(addr))],
        "token=alice",
    )
    .await;
    assert_eq!(a.status, 403, "http origin of an https console");
    let a = send(addr, "POST", "/login", &[("Origin", &https)], "token=alice").await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert!(a.header("set-cookie").unwrap().contains("; Secure"));
}

#[tokio::test]
async fn one_sign_in_too_many_waits() {
    let (addr, _) = console(false).await;
    let o = origin(addr);
    // Failed or not, every attempt counts.
    for i in 0..sessions::SIGN_INS_PER_WINDOW {
        let token = if i % 2 == 0 { "bad" } else { "alice" };
        let a = send(
            addr,
            "POST",
            "/login",
            &[("Origin", &o)],
            &format!("token={token}"),
        )
        .await;
        assert!(
            matches!(a.status, 303 | 401),
            "attempt {i}: {} {}",
            a.status,
            a.body
        );
    }
    let a = send(addr, "POST", "/login", &[("Origin", &o)], "token=alice").await;
    assert_eq!(a.status, 429, "{}", a.body);
    let wait: u64 = a
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(a.header("set-cookie").is_none());
    // Whoever signs in from there waits as well.
    let a = send(addr, "POST", "/login", &[("Origin", &o)], "token=bob").await;
    assert_eq!(a.status, 429, "{}", a.body);
}

#[tokio::test]
async fn a_path_naming_no_namespace_or_approval_is_refused_before_any_request() {
    let (addr, api) = console(false).await;
    let cookie = sign_in(addr, "alice").await;
    let token = csrf(addr, &cookie).await;
    let o = origin(addr);
    for path in [
        "/approvals/Team-A/apr-1",
        "/approvals/team.a/apr-1",
        "/approvals/team-a/apr-1%2Fstatus",
        "/approvals/team-a/APR-1",
        "/approvals/%2E%2E/apr-1",
    ] {
        let a = send(
            addr,
            "POST",
            path,
            &[
                ("Cookie", &cookie),
                ("Origin", &o),
                ("Accept", "application/json"),
            ],
            &format!("csrf={token}&decision=approved"),
        )
        .await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        let error: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(error["error"]["code"], "invalid_name", "{path}: {}", a.body);
    }
    assert!(
        !api.seen
            .lock()
            .unwrap()
            .iter()
            .any(|(m, _, _)| m == "PATCH")
    );
    // Another namespace's Approval: the API server's refusal, in its words.
    let a = send(
        addr,
        "POST",
        "/approvals/team-b/apr-2",
        &[
            ("Cookie", &cookie),
            ("Origin", &o),
            ("Accept", "application/json"),
        ],
        &format!("csrf={token}&decision=approved"),
    )
    .await;
    assert_eq!(a.status, 403, "{}", a.body);
    let error: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(error["error"]["code"], "kubernetes_refused", "{}", a.body);
}

/// Reads `stream` until it has said `event: change` `count` times in all,
/// or `wait` passes: whether it did.
async fn changes_seen(
    stream: &mut TcpStream,
    seen: &mut String,
    count: usize,
    wait: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = [0u8; 4096];
    while seen.matches("event: change").count() < count {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            _ => return false,
        }
    }
    true
}

#[tokio::test]
async fn people_see_and_hear_of_only_the_namespaces_they_may_read() {
    let (addr, api) = console(false).await;
    let cookie = sign_in(addr, "alice").await;
    // The list is read where alice may read, as her; never in team-b.
    let a = send(addr, "GET", "/fragment", &[("Cookie", &cookie)], "").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.body
            .contains("data-namespace=\"team-a\" data-name=\"apr-1\""),
        "{}",
        a.body
    );
    assert!(
        a.body.contains("action=\"/approvals/team-a/apr-1\""),
        "{}",
        a.body
    );
    assert!(!a.body.contains("apr-2"), "{}", a.body);
    {
        let seen = api.seen.lock().unwrap();
        let asked = |p: &str| {
            seen.iter()
                .any(|(_, path, user)| path == p && user == "alice")
        };
        assert!(asked(&format!("{GROUP}/namespaces/{NS}/approvals")));
        assert!(
            !seen.iter().any(|(_, path, _)| path.contains(OTHER)),
            "{seen:?}"
        );
    }

    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!(
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        ).as_bytes())
        .await
        .unwrap();
    let mut seen = String::new();
    assert!(
        changes_seen(&mut stream, &mut seen, 1, Duration::from_secs(10)).await,
        "{seen}"
    );
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    let modified = |ns: &str, version: u32| {
        serde_json::json!({"type": "MODIFIED", "object": meta(ns, "apr-x", version)}).to_string()
    };
    // A change in team-b: nothing, not even a ping.
    api.watch.send(modified(OTHER, 2)).unwrap();
    assert!(
        !changes_seen(&mut stream, &mut seen, 2, Duration::from_secs(2)).await,
        "{seen}"
    );
    // One in team-a: a ping.
    api.watch.send(modified(NS, 3)).unwrap();
    assert!(
        changes_seen(&mut stream, &mut seen, 2, Duration::from_secs(10)).await,
        "{seen}"
    );
    assert_eq!(seen.matches("event: change").count(), 2, "{seen}");
}
