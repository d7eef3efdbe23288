//! `toolgate console`: a web page for the people who answer escalations.
//!
//! It lists the pending Approvals (tool, masked preview, run, requester,
//! policy version, time left) and recent decisions, takes an approve or
//! deny with a reason, and updates live (server-sent events) when
//! approvals arrive or are decided elsewhere. It holds no authority of its
//! own: every read and every decision goes to the Kubernetes API as the
//! signed-in person ([`cluster`]), who signs in through an authenticating
//! proxy or with a Kubernetes token ([`identity`]). Approvals live in
//! their tenants' namespaces: a person sees, and hears of changes in, only
//! the namespaces they may list ([`namespaces`]).
//!
//! Web security: a strict Content-Security-Policy (scripts and styles from
//! the console only, nothing inline, no framing), `SameSite=Strict`,
//! `HttpOnly` session cookies revoked on the server at sign-out
//! ([`sessions`]), a per-session token in every form plus a same-origin
//! check (scheme, host and port) on every change, a sign-in rate limit per
//! source address, and HTML escaping of every string, with invisible
//! characters written out ([`pages`]).

pub mod cluster;
pub mod error;
pub mod identity;
pub mod names;
pub mod namespaces;
pub mod origin;
pub mod pages;
pub mod sessions;

use axum::serve::ListenerExt;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Extension, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use jiff::Timestamp;
use serde::Deserialize;
use toolgate_k8s::crd::Decision;

pub use cluster::Cluster;
pub use error::ConsoleError;
pub use identity::{Identity, Keys, SignedIn};
use sessions::SignInLimit;

/// Every response's security headers.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Longest decision reason taken.
const MAX_REASON: usize = 512;

/// What the console serves with.
pub struct Console {
    /// The cluster, reached as the signed-in person.
    pub cluster: Cluster,
    /// Session and proxy secrets.
    pub keys: Keys,
    /// Whether the session cookie is `Secure` (off only for plain-HTTP
    /// development on loopback).
    pub secure_cookies: bool,
}

impl Console {
    /// The scheme people reach the console with: `https` (its cookies are
    /// `Secure`, so a session exists only there) unless serving plain HTTP
    /// for development.
    fn scheme(&self) -> &'static str {
        if self.secure_cookies { "https" } else { "http" }
    }
}

/// The console and what it counts while serving.
struct App {
    console: Console,
    sign_ins: SignInLimit,
}

impl Deref for App {
    type Target = Console;
    fn deref(&self) -> &Console {
        &self.console
    }
}

type Shared = Arc<App>;

/// The console's routes. Serve them with the peer's address
/// (`into_make_service_with_connect_info::<SocketAddr>`), which the
/// sign-in rate limit counts by; without it every sign-in counts as one
/// address's.
pub fn router(console: Console) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/fragment", get(fragment))
        .route("/events", get(events))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/approvals/{namespace}/{name}", post(decide))
        .route("/static/console.js", get(script))
        .route("/static/console.css", get(style))
        .route("/healthz", get(|| async { "ok" }))
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(Arc::new(App {
            console,
            sign_ins: SignInLimit::default(),
        }))
}

/// Serves the console on `listen` until the process ends.
pub async fn serve(listen: SocketAddr, console: Console) -> Result<(), ConsoleError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ConsoleError::Config(format!("listen on {listen}: {e}")))?;
    console.cluster.start_watch();
    tracing::info!(%listen, proxied = console.keys.proxied(), "console serving");
    axum::serve(
        listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        }),
        router(console).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .map_err(|e| ConsoleError::Config(e.to_string()))
}

/// A page as the response body.
fn html(page: maud::Markup) -> Response {
    axum::response::Html(page.into_string()).into_response()
}

async fn secure_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    // Another site's window or page gets no handle on ours, nor our responses.
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// A refusal: JSON `{error: {code, message}}` for a script, a page for a person.
fn refusal(headers: &HeaderMap, who: Option<&Identity>, e: &ConsoleError) -> Response {
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    let body = if wants_json {
        Json(serde_json::json!({"error": {"code": e.code(), "message": e.to_string()}}))
            .into_response()
    } else {
        html(pages::error(who, e.code(), &e.to_string()))
    };
    with_retry_after((e.status(), body).into_response(), e)
}

/// `response` with `Retry-After`, when `e` passes with time.
fn with_retry_after(mut response: Response, e: &ConsoleError) -> Response {
    if let Some(seconds) = e.retry_after() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The signed-in person, until when and in which session, or the answer to
/// give instead: for a page, a redirect to the sign-in form when nobody is
/// signed in; for what scripts fetch (`page` false), a `401`; a `401` for
/// a session signed out and an untrusted forwarded identity.
fn signed_in(
    console: &Console,
    headers: &HeaderMap,
    page: bool,
) -> Result<SignedIn, Box<Response>> {
    match console
        .keys
        .identify_until(headers, Timestamp::now().as_second())
    {
        Ok(Some(who)) => Ok(who),
        Ok(None) if page && !console.keys.proxied() => {
            Err(Box::new(Redirect::to("/login").into_response()))
        }
        Ok(None) => {
            let why = if console.keys.proxied() {
                "sign in through the authenticating proxy"
            } else {
                "sign in first"
            };
            let e = ConsoleError::Unauthenticated(why.into());
            Err(Box::new(refusal(headers, None, &e)))
        }
        Err(e) => Err(Box::new(refusal(headers, None, &e))),
    }
}

#[derive(Deserialize)]
struct Notice {
    done: Option<String>,
}

async fn index(
    State(console): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<Notice>,
) -> Response {
    let signed = match signed_in(&console, &headers, true) {
        Ok(signed) => signed,
        Err(r) => return *r,
    };
    let who = &signed.who;
    match console.cluster.list(who).await {
        Ok(items) => {
            let csrf = console.keys.csrf_token(&signed);
            let table = pages::approvals(&items, &csrf, Timestamp::now());
            // Submitted, not recorded: the controller may still refuse a
            // decision (the list then says why).
            let notice = match q.done.as_deref() {
                Some("approved") => Some("Submitted: approved."),
                Some("denied") => Some("Submitted: denied."),
                _ => None,
            };
            html(pages::index(who, table, notice))
        }
        Err(e) => refusal(&headers, Some(who), &e),
    }
}

async fn fragment(State(console): State<Shared>, headers: HeaderMap) -> Response {
    let signed = match signed_in(&console, &headers, false) {
        Ok(signed) => signed,
        Err(r) => return *r,
    };
    match console.cluster.list(&signed.who).await {
        Ok(items) => html(pages::approvals(
            &items,
            &console.keys.csrf_token(&signed),
            Timestamp::now(),
        )),
        Err(e) => refusal(&headers, Some(&signed.who), &e),
    }
}

/// The longest one event stream lives before the browser reconnects (and
/// so is identified again).
const STREAM_SECONDS: i64 = 600;

async fn events(State(console): State<Shared>, headers: HeaderMap) -> Response {
    let SignedIn {
        who,
        until,
        session,
    } = match signed_in(&console, &headers, false) {
        Ok(signed) => signed,
        Err(r) => return *r,
    };
    // Someone who may not list Approvals gets the API server's refusal (a
    // browser's EventSource then stops), not a stream that ends at once.
    if let Err(e) = console.cluster.may_list(&who).await {
        return refusal(&headers, Some(&who), &e);
    }
    let left = until
        .saturating_sub(Timestamp::now().as_second())
        .clamp(0, STREAM_SECONDS);
    match console.cluster.changes(&who).await {
        Ok(changes) => {
            // The stream ends no later than the session, and at once when
            // the session is signed out.
            let timeout = Box::pin(tokio::time::sleep(Duration::from_secs(left.unsigned_abs())));
            let app = console.clone();
            let signed_out = Box::pin(async move {
                match session {
                    Some(id) => app.keys.revoked.signed_out(&id).await,
                    None => std::future::pending().await,
                }
            });
            let end = futures::future::select(timeout, signed_out);
            let stream = changes
                .take_until(end)
                .map(|()| Ok::<_, Infallible>(Event::default().event("change").data("approvals")));
            Sse::new(stream)
                .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
                .into_response()
        }
        Err(e) => refusal(&headers, Some(&who), &e),
    }
}

async fn login_form(State(console): State<Shared>) -> Response {
    if console.keys.proxied() {
        return Redirect::to("/").into_response();
    }
    html(pages::login(None))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

fn cookie_attributes(console: &Console, max_age: i64) -> String {
    let secure = if console.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    format!("Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}

async fn login(
    State(console): State<Shared>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let from = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.0.0.ip());
    if let Err(retry_after) = console.sign_ins.attempt(from, Instant::now()) {
        tracing::warn!(%from, "sign-in rate limit reached");
        let e = ConsoleError::RateLimited {
            message: format!("too many sign-in attempts: try again in {retry_after} s"),
            retry_after,
        };
        let page = (e.status(), html(pages::login(Some(&e.to_string()))));
        return with_retry_after(page.into_response(), &e);
    }
    if console.keys.proxied() || !origin::same_origin(&headers, console.scheme()) {
        let e = ConsoleError::Forbidden("sign in from the console's own page".into());
        return refusal(&headers, None, &e);
    }
    let now = Timestamp::now().as_second();
    if let Some(retry_after) = console.keys.revoked.full(now) {
        let e = ConsoleError::Busy {
            message: format!(
                "too many sessions were signed out in the last hour: sign-in resumes in \
                 {retry_after} s"
            ),
            retry_after,
        };
        return refusal(&headers, None, &e);
    }
    match console.cluster.review(&form.token).await {
        Ok(who) => {
            // Never longer than the token the person signed in with.
            let longest = now + identity::SESSION_SECONDS;
            let expires =
                identity::token_expiry(&form.token).map_or(longest, |exp| exp.min(longest));
            let cookie = match console.keys.session_cookie(&who, expires) {
                Ok(cookie) => cookie,
                Err(e) => return refusal(&headers, None, &e),
            };
            let set = format!(
                "{}={cookie}; {}",
                identity::SESSION_COOKIE,
                cookie_attributes(&console, (expires - now).max(0))
            );
            let mut r = Redirect::to("/").into_response();
            if let Ok(v) = HeaderValue::from_str(&set) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => (e.status(), html(pages::login(Some(&e.to_string())))).into_response(),
    }
}

async fn logout(State(console): State<Shared>, headers: HeaderMap) -> Response {
    if !origin::same_origin(&headers, console.scheme()) {
        let e = ConsoleError::Forbidden("sign out from the console's own page".into());
        return refusal(&headers, None, &e);
    }
    // The session is revoked on the server, until it would have expired:
    // a copy of the cookie is worth nothing from now on. (One already
    // signed out, or none, has nothing left to revoke.)
    let now = Timestamp::now().as_second();
    if let Ok(Some(signed)) = console.keys.identify_until(&headers, now)
        && let Err(e) = console.keys.sign_out(&signed, now)
    {
        tracing::warn!(code = e.code(), "sign-out not recorded");
        return refusal(&headers, Some(&signed.who), &e);
    }
    let mut r = Redirect::to("/login").into_response();
    let clear = format!(
        "{}=; {}",
        identity::SESSION_COOKIE,
        cookie_attributes(&console, 0)
    );
    if let Ok(v) = HeaderValue::from_str(&clear) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[derive(Deserialize)]
struct DecideForm {
    csrf: String,
    decision: String,
    #[serde(default)]
    reason: String,
}

async fn decide(
    State(console): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<DecideForm>,
) -> Response {
    let signed = match signed_in(&console, &headers, true) {
        Ok(signed) => signed,
        Err(r) => return *r,
    };
    let who = &signed.who;
    if !origin::same_origin(&headers, console.scheme())
        || !console.keys.csrf_ok(&signed, &form.csrf)
    {
        let e = ConsoleError::Forbidden(
            "this form did not come from your console page; reload it".into(),
        );
        return refusal(&headers, Some(who), &e);
    }
    // A path segment that is no namespace or object name never reaches
    // the API server.
    if let Err(e) = names::approval_path(&namespace, &name) {
        return refusal(&headers, Some(who), &e);
    }
    let decision = match form.decision.as_str() {
        "approved" => Decision::Approved,
        "denied" => Decision::Denied,
        _ => {
            let e = ConsoleError::InvalidRequest("decision is approved or denied".into());
            return refusal(&headers, Some(who), &e);
        }
    };
    let reason = form.reason.trim();
    if reason.chars().count() > MAX_REASON || reason.chars().any(char::is_control) {
        let e = ConsoleError::InvalidRequest(format!(
            "a reason is one line of at most {MAX_REASON} characters"
        ));
        return refusal(&headers, Some(who), &e);
    }
    let reason = (!reason.is_empty()).then_some(reason);
    match console
        .cluster
        .decide(who, &namespace, &name, decision, reason)
        .await
    {
        Ok(_) => Redirect::to(&format!("/?done={}", form.decision)).into_response(),
        Err(e) => refusal(&headers, Some(who), &e),
    }
}

async fn script() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/console.js"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/console.css"),
    )
        .into_response()
}
