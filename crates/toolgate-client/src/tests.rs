//! The client against a stand-in sidecar over real HTTP on 127.0.0.1.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Map, Value, json};

use super::*;

/// What the stand-in was asked, and how its approvals end.
#[derive(Default)]
struct Seen {
    /// Tools asked about, in order.
    asked: Vec<String>,
    /// `wait=` of each approval poll.
    waits: Vec<u64>,
    /// `traceparent` of each request.
    traces: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

/// A verdict as the sidecar answers it.
fn verdict(decision: &str, reason: &str, approval: Option<&str>) -> Value {
    let mut v = json!({
        "decision_id": "dec-1", "verdict": decision, "reason": reason,
        "policy_version": "sha256:p", "risk": "high", "intent_required": false,
        "args_digest": "sha256:a", "call_digest": "sha256:c",
    });
    if let Some(id) = approval {
        v["approval_id"] = json!(id);
    }
    v
}

/// Tool `T` is decided by its name: `allow`, `deny`, `broken` (an error
/// envelope), `garbled` (no verdict), or `escalate-S`: escalated under
/// approval `S` the first time, then as a decided approval `S` answers.
async fn authorize(
    State(seen): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Map<String, Value>>,
) -> (StatusCode, Json<Value>) {
    let tool = body["tool"].as_str().unwrap_or_default().to_owned();
    let asked_before = {
        let mut seen = seen.lock().unwrap();
        if let Some(t) = headers.get("traceparent") {
            seen.traces.push(t.to_str().unwrap().to_owned());
        }
        let before = seen.asked.contains(&tool);
        seen.asked.push(tool.clone());
        before
    };
    let answer = match tool.as_str() {
        "allow" => verdict("allow", "allow_rule", None),
        "deny" => verdict("deny", "deny_rule", None),
        "broken" => {
            let envelope = json!({"error": {"code": "store_unavailable", "message": "db down"}});
            return (StatusCode::SERVICE_UNAVAILABLE, Json(envelope));
        }
        "garbled" => json!({"decision_id": "d", "verdict": "maybe"}),
        "escalate-approved" if asked_before => verdict("allow", "approved", None),
        "escalate-denied" if asked_before => verdict("deny", "approval_denied", None),
        "escalate-expired" if asked_before => verdict("escalate", "escalate_rule", Some("new")),
        escalated => {
            let status = escalated.trim_start_matches("escalate-");
            verdict("escalate", "escalate_rule", Some(status))
        }
    };
    (StatusCode::OK, Json(answer))
}

/// Approval `S` has status `S` (`pending` never ends).
async fn approval(
    State(seen): State<Shared>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> (StatusCode, Json<Value>) {
    let wait = query
        .as_deref()
        .and_then(|q| q.strip_prefix("wait="))
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    seen.lock().unwrap().waits.push(wait);
    if id == "missing" {
        let envelope = json!({"error": {"code": "not_found", "message": "no such approval"}});
        return (StatusCode::NOT_FOUND, Json(envelope));
    }
    (
        StatusCode::OK,
        Json(json!({"approval_id": id, "status": id})),
    )
}

/// A stand-in sidecar on a free loopback port: its URL and what it saw.
async fn stand_in() -> (String, Shared) {
    let seen = Shared::default();
    let app = Router::new()
        .route("/v1/authorize", post(authorize))
        .route("/v1/approvals/{id}", get(approval))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn request(tool: &str) -> AuthorizeRequest {
    AuthorizeRequest {
        tool: tool.to_owned(),
        action: None,
        arguments: Map::new(),
        run_id: RunId::parse("run-1").unwrap(),
        step_id: Some("step-1".into()),
        tenant: None,
        definition_digest: None,
    }
}

fn client(url: &str) -> Client {
    Client::new(url, Duration::from_secs(5)).unwrap()
}

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn allow_and_deny_are_typed_verdicts() {
    let (url, seen) = stand_in().await;
    let c = client(&url);
    let allowed = c.authorize_waiting(&request("allow"), WAIT).await.unwrap();
    assert!(matches!(&allowed, Outcome::Allowed(a) if a.verdict.reason == Reason::AllowRule));
    assert_eq!(allowed.answer().decision_id, "dec-1");
    let denied = c.authorize_waiting(&request("deny"), WAIT).await.unwrap();
    assert!(matches!(&denied, Outcome::Denied(a) if a.verdict.reason == Reason::DenyRule));
    // Nothing waited on, nothing asked twice.
    assert_eq!(seen.lock().unwrap().asked, ["allow", "deny"]);
    assert!(seen.lock().unwrap().waits.is_empty());
}

#[tokio::test]
async fn an_approved_escalation_is_asked_again_once_and_allowed() {
    let (url, seen) = stand_in().await;
    let outcome = client(&url)
        .authorize_waiting(&request("escalate-approved"), WAIT)
        .await
        .unwrap();
    assert!(
        matches!(&outcome, Outcome::Allowed(a) if a.verdict.reason == Reason::Approved),
        "{outcome:?}"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.asked, ["escalate-approved", "escalate-approved"]);
    // One poll, asking for what is left of the wait.
    assert!(matches!(seen.waits[..], [4 | 5]), "{:?}", seen.waits);
}

#[tokio::test]
async fn a_denied_or_expired_approval_is_asked_again_and_answered_typed() {
    let (url, _) = stand_in().await;
    let c = client(&url);
    let denied = c
        .authorize_waiting(&request("escalate-denied"), WAIT)
        .await
        .unwrap();
    assert!(
        matches!(&denied, Outcome::Denied(a) if a.verdict.reason == Reason::ApprovalDenied),
        "{denied:?}"
    );
    let expired = c
        .authorize_waiting(&request("escalate-expired"), WAIT)
        .await
        .unwrap();
    match expired {
        Outcome::Escalated { answer, waited } => {
            assert_eq!(waited, Some(ApprovalStatus::Expired));
            assert_eq!(answer.approval_id.as_deref(), Some("new"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_wait_runs_out_in_polls_no_longer_than_the_limit() {
    let (url, seen) = stand_in().await;
    let c = client(&url);
    // No wait: the escalation comes back at once, nothing polled.
    let at_once = c
        .authorize_waiting(&request("escalate-pending"), Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(at_once, Outcome::Escalated { waited: None, .. }));
    assert!(seen.lock().unwrap().waits.is_empty());
    let started = std::time::Instant::now();
    let waited = c
        .authorize_waiting(&request("escalate-pending"), Duration::from_millis(300))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    match waited {
        Outcome::Escalated { answer, waited } => {
            assert_eq!(waited, Some(ApprovalStatus::Pending));
            assert_eq!(answer.approval_id.as_deref(), Some("pending"));
        }
        other => panic!("{other:?}"),
    }
    let waits = seen_waits(&seen);
    // Asked once per call: a pending approval is never asked again.
    assert_eq!(seen.lock().unwrap().asked.len(), 2);
    assert!(!waits.is_empty());
    assert!(waits.iter().all(|w| (1..=MAX_WAIT_SECONDS).contains(w)));
    // One poll never asks for more than the agent API's limit.
    let status = c.approval("pending", Duration::from_secs(3600)).await;
    assert_eq!(status.unwrap(), ApprovalStatus::Pending);
    assert_eq!(seen_waits(&seen).last(), Some(&MAX_WAIT_SECONDS));
}

fn seen_waits(seen: &Shared) -> Vec<u64> {
    seen.lock().unwrap().waits.clone()
}

#[tokio::test]
async fn an_error_envelope_keeps_the_contract_s_code() {
    let (url, _) = stand_in().await;
    let c = client(&url);
    let err = c.authorize(&request("broken")).await.unwrap_err();
    assert_eq!(err.code(), toolgate_contract::errors::STORE_UNAVAILABLE);
    assert_eq!(err.contract_code().map(|e| e.status), Some(503));
    assert!(
        matches!(&err, ClientError::Refused { status: 503, message, .. } if message == "db down")
    );
    // The error of the wait is the routine's error.
    let err = c.wait_for_approval("missing", WAIT).await.unwrap_err();
    assert_eq!(err.code(), toolgate_contract::errors::NOT_FOUND);
    // An answer that is no verdict is unusable, never guessed at.
    let err = c.authorize(&request("garbled")).await.unwrap_err();
    assert_eq!(err.code(), error::SIDECAR_UNREADABLE, "{err}");
    let err = c.approval("made-up", WAIT).await.unwrap_err();
    assert_eq!(err.code(), error::SIDECAR_UNREADABLE, "{err}");
}

#[tokio::test]
async fn an_unreachable_sidecar_is_reported_as_such() {
    // A port that was free a moment ago: nothing listens there now.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = client(&url)
        .authorize_waiting(&request("allow"), WAIT)
        .await
        .unwrap_err();
    assert_eq!(err.code(), error::SIDECAR_UNREACHABLE);
    assert!(err.to_string().contains("is unreachable"), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test]
async fn headers_fixed_and_per_request_are_sent() {
    fn traced() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("traceparent", "per-request".parse().unwrap());
        h
    }
    let (url, seen) = stand_in().await;
    let mut fixed = HeaderMap::new();
    fixed.insert("traceparent", "fixed".parse().unwrap());
    let c = Client::with_headers(&url, WAIT, fixed).unwrap();
    c.authorize(&request("allow")).await.unwrap();
    let c = c.per_request_headers(traced);
    c.authorize(&request("allow")).await.unwrap();
    assert_eq!(seen.lock().unwrap().traces, ["fixed", "per-request"]);
}
