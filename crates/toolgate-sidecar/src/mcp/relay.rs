//! The upstream's answer to one forwarded HTTP request, relayed message by
//! message through `toolgate_mcp::relay`:
//!
//! - `application/json`: one message, read up to `MAX_MESSAGE_BYTES`;
//! - `text/event-stream`: read event by event as it arrives (each event
//!   bounded the same way), so a stream is never held whole;
//! - anything else (202 Accepted, an HTML error page): passed on as it is,
//!   since no JSON-RPC message is in it.
//!
//! Whatever the framing, a request the gateway forwarded gets an answer: the
//! upstream's, judged, or a JSON-RPC error when that answer was unreadable,
//! too large or never came. A server request the policy refuses is answered
//! by a POST of its error to the upstream, and the client never sees it.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use toolgate_mcp::relay::{Answers, MAX_MESSAGE_BYTES, ServerStep, unreadable_answer};
use toolgate_mcp::sse::{Decoder, Event};

use super::Upstream;

/// Response headers passed back to the agent (the content type is the
/// gateway's own: see [`Framing`]).
const FORWARDED_RESPONSE_HEADERS: [&str; 3] =
    ["mcp-session-id", "mcp-protocol-version", "cache-control"];
/// Request headers the gateway's own POSTs to the upstream carry over.
const SESSION_HEADERS: [&str; 3] = ["mcp-session-id", "mcp-protocol-version", "authorization"];

/// One answer being relayed.
pub(super) struct Stream {
    pub(super) http: reqwest::Client,
    pub(super) upstream: Arc<Upstream>,
    /// The headers the request was forwarded with (session, protocol).
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) run_id: toolgate_policy::RunId,
    /// The gateway's id of the forwarded request, if it was one.
    pub(super) awaited: Option<String>,
    /// The stream answers a POST (a GET's carries no answers).
    pub(super) is_post: bool,
    /// No client reads the stream (a deferred call's): a request of the
    /// server on it is answered with an error, not left waiting.
    pub(super) detached: bool,
}

/// What the gateway reads a body as: its media type, from the raw header
/// bytes (before any `;`, trimmed, ASCII-lowercased), and only the two the
/// transport defines. Anything else, or a header that is not ASCII, is read
/// as neither: its body never reaches the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Json,
    Events,
    Neither,
}

fn framing(content_type: Option<&HeaderValue>) -> Framing {
    let Some(raw) = content_type.map(HeaderValue::as_bytes) else {
        return Framing::Neither;
    };
    if !raw.is_ascii() {
        return Framing::Neither;
    }
    let media = raw.split(|b| *b == b';').next().unwrap_or_default();
    match String::from_utf8_lossy(media)
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "application/json" => Framing::Json,
        "text/event-stream" => Framing::Events,
        _ => Framing::Neither,
    }
}

impl Stream {
    /// The agent's response.
    pub(super) async fn relay(self, response: reqwest::Response) -> Response {
        let status =
            StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let framing = framing(response.headers().get(header::CONTENT_TYPE));
        let mut headers = HeaderMap::new();
        for name in FORWARDED_RESPONSE_HEADERS {
            if let Some(v) = response.headers().get(name)
                && let (Ok(n), Ok(v)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_bytes(v.as_bytes()),
                )
            {
                headers.insert(n, v);
            }
        }
        match framing {
            Framing::Events => {
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
                tokio::spawn(self.events(response, tx));
                let body = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|item| (item, rx))
                });
                (status, headers, Body::from_stream(body)).into_response()
            }
            Framing::Json if self.is_post => {
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                self.single(status, headers, response).await
            }
            _ => {
                // No message the gateway can judge: the status goes back, the
                // body does not (and a forwarded request gets its error).
                drop(response);
                let mut this = self;
                match this.failed_answer("the upstream answered with no JSON-RPC message") {
                    Some(error) => {
                        headers.insert(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        );
                        (status, headers, error.to_string()).into_response()
                    }
                    None => (status, headers).into_response(),
                }
            }
        }
    }

    /// One JSON message.
    async fn single(
        mut self,
        status: StatusCode,
        mut headers: HeaderMap,
        response: reqwest::Response,
    ) -> Response {
        let out = match read_bounded(response).await {
            Ok(bytes) => {
                let judged = self.judge(&bytes).await;
                self.failed_answer("the upstream sent no answer to it")
                    .or(judged)
            }
            Err(why) => self.failed_answer(&why),
        };
        match out {
            Some(message) => (status, headers, message.to_string()).into_response(),
            None => {
                headers.remove(header::CONTENT_TYPE);
                (StatusCode::ACCEPTED, headers).into_response()
            }
        }
    }

    /// An SSE stream, event by event, until it ends or the agent leaves.
    async fn events(
        mut self,
        mut response: reqwest::Response,
        tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) {
        let mut decoder = Decoder::new(MAX_MESSAGE_BYTES);
        let ended = loop {
            let chunk = match response.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break "the upstream's stream ended without an answer".to_owned(),
                Err(e) => break format!("the upstream's stream failed: {e}"),
            };
            let events = match decoder.push(&chunk) {
                Ok(events) => events,
                Err(e) => break e.to_string(),
            };
            for event in events {
                let Some(out) = self.event(event).await else {
                    continue;
                };
                if tx.send(Ok(Bytes::from(out))).await.is_err() {
                    // The agent left: nothing will read the answer.
                    self.give_up("the agent closed the stream");
                    return;
                }
            }
        };
        if let Some(message) = self.failed_answer(&ended) {
            let event = Event {
                event: Some("message".into()),
                data: Some(message.to_string()),
                ..Event::default()
            };
            let _ = tx.send(Ok(Bytes::from(event.encode()))).await;
        }
    }

    /// One event, re-encoded with its message judged; an event whose
    /// message is withheld keeps only its id (the resumption point).
    async fn event(&mut self, mut event: Event) -> Option<String> {
        let data = match event.data.take() {
            Some(d) if !d.trim().is_empty() => d,
            other => {
                event.data = other;
                return Some(event.encode());
            }
        };
        event.data = self.judge(data.as_bytes()).await.map(|m| m.to_string());
        (event.data.is_some() || event.id.is_some()).then(|| event.encode())
    }

    /// One message of the server: what the agent gets of it, if anything.
    async fn judge(&self, raw: &[u8]) -> Option<Value> {
        let gateway = &self.upstream.gateway;
        // The client takes any answer on a POST's stream as the answer to
        // that POST: only that one may pass.
        let answers = match (&self.awaited, self.is_post) {
            (Some(ours), true) => Answers::Only(ours),
            _ => Answers::None,
        };
        match gateway.from_server(raw, &self.run_id, answers).await {
            ServerStep::ToClient(message) if self.detached => {
                if let (Some(id), Some(_)) = (message.get("id"), message.get("method")) {
                    self.answer_server(toolgate_mcp::message::error(
                        id,
                        toolgate_mcp::message::POLICY_REFUSED,
                        "toolgate: this call was made by the gateway after its approval; no \
                         client is there to answer",
                    ));
                }
                None
            }
            ServerStep::ToClient(message) => Some(message),
            ServerStep::ToServer(answer) => {
                self.answer_server(answer);
                None
            }
            ServerStep::Drop(why) => {
                tracing::warn!(server = %gateway.server(), %why, "a message from the upstream was not passed on");
                None
            }
            ServerStep::Kept => None,
        }
    }

    /// The error that answers the awaited request when the upstream did not
    /// (`None` when it did, or nothing was awaited).
    fn failed_answer(&mut self, why: &str) -> Option<Value> {
        let ours = self.awaited.take()?;
        let original = self.upstream.gateway.abandon(&ours)?;
        Some(unreadable_answer(&original, why))
    }

    fn give_up(&self, why: &str) {
        if let Some(ours) = &self.awaited
            && self.upstream.gateway.abandon(ours).is_some()
        {
            tracing::warn!(server = %self.upstream.gateway.server(), %why, "a forwarded request got no answer");
        }
    }

    /// Sends the upstream the answer to one of its own requests.
    fn answer_server(&self, answer: Value) {
        let mut headers = reqwest::header::HeaderMap::new();
        for name in SESSION_HEADERS {
            if let Some(v) = self.headers.get(name) {
                headers.insert(name, v.clone());
            }
        }
        let request = self
            .http
            .post(&self.upstream.url)
            .headers(headers)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(answer.to_string());
        let server = self.upstream.gateway.server().to_owned();
        tokio::spawn(async move {
            if let Err(e) = request.send().await {
                tracing::warn!(%server, error = %e, "could not send the upstream its refusal");
            }
        });
    }
}

/// The whole body, or why not: at most `MAX_MESSAGE_BYTES` are held.
async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the upstream's answer failed: {e}"))?
    {
        if body.len() + chunk.len() > MAX_MESSAGE_BYTES {
            return Err(format!("larger than {MAX_MESSAGE_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
