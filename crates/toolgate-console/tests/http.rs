//! The console over real HTTP, against a stand-in for the Kubernetes API
//! (TokenReviews say the token is the user name; one Approval waits, is
//! watched forever and can be patched), with a plain HTTP client that sends what
//! it is told: a copied cookie, a form token from another session, an
//! `Origin` of the same host on another port or scheme, one sign-in too
//! many.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use toolgate_console::{Cluster, Console, Keys, sessions};

const NS: &str = "toolgate-system";

/// What the stand-in API server was asked: (method, path, impersonated user).
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

async fn api_server() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let log = log.clone();
            async move { fake_api(&log, &method, &uri, &headers, &body) }
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn fake_api(seen: &Seen, method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Response {
    let user = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    seen.lock()
        .unwrap()
        .push((method.to_string(), uri.path().to_owned(), user));
    let json = |v: serde_json::Value| axum::Json(v).into_response();
    let approvals = format!("/apis/toolgate.dev/v1alpha1/namespaces/{NS}/approvals");
    let path = uri.path();
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
    if path == approvals && uri.query().unwrap_or_default().contains("watch=true") {
        // A watch that never says anything, until the client goes.
        return Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>())
            .into_response();
    }
    if path == approvals {
        let waiting = serde_json::json!({
            "apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
            "metadata": {"name": "apr-1", "namespace": NS},
            "spec": {"request": {"approvalId": "1", "tenant": "agents", "invocationId": "i",
                                 "tool": "bash", "argsDigest": "sha256:0", "runId": "r",
                                 "policyVersion": "p@1"}}});
        return json(serde_json::json!({"apiVersion": "toolgate.dev/v1alpha1",
                                       "kind": "ApprovalList",
                                       "metadata": {"resourceVersion": "1"}, "items": [waiting]}));
    }
    if let Some(name) = path.strip_prefix(&format!("{approvals}/")) {
        return json(
            serde_json::json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
                                       "metadata": {"name": name, "namespace": NS}, "spec": {}}),
        );
    }
    StatusCode::NOT_FOUND.into_response()
}

/// A console (plain HTTP unless `secure`) on the stand-in API server.
async fn console(secure: bool) -> (SocketAddr, Seen) {
    let (api, seen) = api_server().await;
    let config = kube::Config::new(api.parse().unwrap());
    let console = Console {
        cluster: Cluster::new(config, NS.into()).unwrap(),
        keys: Keys::new(vec![9; 32], None).unwrap(),
        secure_cookies: secure,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = toolgate_console::router(console).into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
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
        "/approvals/apr-1",
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
    let (addr, seen) = console(false).await;
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
                "/approvals/apr-1",
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
            "/approvals/apr-1",
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
        "/approvals/apr-1",
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
