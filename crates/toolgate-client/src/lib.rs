//! The sidecar's agent API as its Rust callers use it: one typed HTTP
//! client ([`Client`]) and the one wait-then-ask-again routine
//! ([`wait_then_ask_again`], [`Client::authorize_waiting`]). `toolgate hook`
//! and `toolgate mcp wrap` ask through it; the MCP gateway runs the same
//! routine over its `Decider`, which may be the sidecar in process.
//!
//! The bodies are the contract's (`toolgate_contract::agent_api`), filled
//! in with the policy's validated types; verdicts are read into the typed
//! [`Decision`], never matched as strings. Errors are one enum with stable
//! codes; the sidecar's `{"error": {"code", "message"}}` keeps its code.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod waiting;

use std::collections::HashMap;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use toolgate_contract::ApprovalStatus;
use toolgate_contract::agent_api::{self, MAX_WAIT_SECONDS};
use toolgate_policy::{Id, Reason, RunId, Verdict};

pub use error::ClientError;
pub use toolgate_contract::agent_api::{RecordedRefusal, Screened};
pub use toolgate_policy::Decision;
pub use waiting::{Outcome, wait_then_ask_again};

/// One call to decide (`POST /v1/authorize`): tool and step as the caller
/// names them (the sidecar judges their spelling), the run already valid.
pub type AuthorizeRequest = agent_api::AuthorizeRequest<String, RunId>;
/// The sidecar's answer to one call, with the policy's typed verdict.
pub type AuthorizeResponse = agent_api::AuthorizeResponse<Verdict>;
/// A refusal made at an edge, to be recorded (`POST /v1/refusals`).
pub type RefusalRequest = agent_api::RefusalRequest<Id, RunId, Reason>;
/// A message other than a `tools/call`, to be screened by flow rules.
pub type MessageScreen = agent_api::MessageScreen<Id, RunId>;

/// HTTP client of one sidecar's agent API (`$TOOLGATE_URL`).
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    /// Every request but the approval long-poll: bounded by `timeout`.
    http: reqwest::Client,
    /// The long-poll: `timeout` plus the longest wait it may ask for.
    poll: reqwest::Client,
    /// Headers added to each request when it is sent (a caller's trace
    /// context that changes per call).
    per_request: Option<fn() -> HeaderMap>,
}

impl Client {
    /// A client of the sidecar at `base` (`http://127.0.0.1:15031`); each
    /// request may take `timeout`, a long-poll `timeout` more than it waits.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::with_headers(base, timeout, HeaderMap::new())
    }

    /// As [`Client::new`], sending `headers` with every request (the
    /// hook's trace context from its environment).
    pub fn with_headers(
        base: &str,
        timeout: Duration,
        headers: HeaderMap,
    ) -> Result<Self, ClientError> {
        let build = |t: Duration| {
            reqwest::Client::builder()
                .timeout(t)
                .default_headers(headers.clone())
                .build()
                .map_err(|e| ClientError::Setup(e.to_string()))
        };
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http: build(timeout)?,
            poll: build(timeout.saturating_add(Duration::from_secs(MAX_WAIT_SECONDS)))?,
            per_request: None,
        })
    }

    /// Adds `headers()` to each request as it is sent: context that lives
    /// with the task making the call (the MCP caller's trace).
    pub fn per_request_headers(mut self, headers: fn() -> HeaderMap) -> Self {
        self.per_request = Some(headers);
        self
    }

    /// The sidecar's base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Asks once (`POST /v1/authorize`). An answer that is not a verdict
    /// is [`ClientError::Unreadable`]: nothing is guessed from it.
    pub async fn authorize(
        &self,
        request: &AuthorizeRequest,
    ) -> Result<AuthorizeResponse, ClientError> {
        self.post("/v1/authorize", request).await
    }

    /// Asks, and on an escalation waits up to `total_wait` for a human,
    /// then asks again once (see [`wait_then_ask_again`]).
    pub async fn authorize_waiting(
        &self,
        request: &AuthorizeRequest,
        total_wait: Duration,
    ) -> Result<Outcome, ClientError> {
        wait_then_ask_again(
            || self.authorize(request),
            |approval, wait| async move { self.wait_for_approval(&approval, wait).await },
            total_wait,
        )
        .await
    }

    /// One long-poll of an approval (`GET /v1/approvals/{id}?wait=`): its
    /// status once decided or after `wait`, which is clamped to 1 s ..
    /// [`MAX_WAIT_SECONDS`].
    pub async fn approval(&self, id: &str, wait: Duration) -> Result<ApprovalStatus, ClientError> {
        let secs = wait.as_secs().clamp(1, MAX_WAIT_SECONDS);
        let url = format!("{}/v1/approvals/{id}", self.base);
        let body: Value = self
            .send(self.poll.get(&url).query(&[("wait", secs)]), &url)
            .await?;
        // A status the contract does not name is unusable: fail closed.
        body["status"]
            .as_str()
            .and_then(ApprovalStatus::from_wire)
            .ok_or_else(|| ClientError::Unreadable(format!("approval {id}: no readable status")))
    }

    /// Long-polls an approval until it is decided or `total_wait` has
    /// passed (polls of at most [`MAX_WAIT_SECONDS`]); its last status.
    pub async fn wait_for_approval(
        &self,
        id: &str,
        total_wait: Duration,
    ) -> Result<ApprovalStatus, ClientError> {
        // A wait too long to represent is as good as forever.
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(total_wait)
            .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)));
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let status = self.approval(id, left).await?;
            if !status.is_pending() || tokio::time::Instant::now() >= deadline {
                return Ok(status);
            }
        }
    }

    /// Which of `tools` may be offered, given their announced definition
    /// digests (`POST /v1/tools/visible`).
    pub async fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Result<Vec<String>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Visible {
            #[serde(default)]
            tools: Vec<String>,
        }
        let body = json!({"tools": tools, "definitions": definitions});
        let visible: Visible = self.post("/v1/tools/visible", &body).await?;
        Ok(visible.tools)
    }

    /// Records the intent of the allowed call `decided` (`POST
    /// /v1/intents`); returns its id.
    pub async fn begin_intent(
        &self,
        decided: &AuthorizeResponse,
        run_id: &RunId,
        step_id: &str,
        tool: &str,
    ) -> Result<String, ClientError> {
        let body = json!({
            "decision_id": decided.decision_id,
            "run_id": run_id,
            "step_id": step_id,
            "tool": tool,
            "args_digest": decided.verdict.args_digest,
            "call_digest": decided.verdict.call_digest,
        });
        let answer: Value = self.post("/v1/intents", &body).await?;
        answer["intent_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ClientError::Unreadable("intent answer without intent_id".into()))
    }

    /// Marks an intent's effect as sent (the watermark).
    pub async fn effect_sent(&self, id: &str) -> Result<(), ClientError> {
        let path = format!("/v1/intents/{id}/effect-sent");
        self.post::<Value>(&path, &json!({})).await.map(drop)
    }

    /// Closes an intent `error` (`failed`) or `completed`, with `detail`.
    pub async fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> Result<(), ClientError> {
        let outcome = if failed { "error" } else { "completed" };
        let mut body = json!({"outcome": outcome});
        if let Some(d) = detail {
            body["detail"] = json!(d);
        }
        let path = format!("/v1/intents/{id}/complete");
        self.post::<Value>(&path, &body).await.map(drop)
    }

    /// Screens a message by the run's flow rules (`POST /v1/messages/screen`).
    pub async fn screen(&self, message: &MessageScreen) -> Result<Screened, ClientError> {
        self.post("/v1/messages/screen", message).await
    }

    /// Records an edge's refusal as a denial (`POST /v1/refusals`).
    pub async fn refuse(&self, refusal: &RefusalRequest) -> Result<RecordedRefusal, ClientError> {
        self.post("/v1/refusals", refusal).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        self.send(self.http.post(&url).json(body), &url).await
    }

    /// Sends, and reads a success as `T` or a failure as the error envelope.
    async fn send<T: DeserializeOwned>(
        &self,
        mut request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<T, ClientError> {
        if let Some(headers) = self.per_request {
            request = request.headers(headers());
        }
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Unreachable {
                url: url.to_owned(),
                source,
            })?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| ClientError::Unreadable(format!("{url}: {e}")))?;
        if !status.is_success() {
            return Err(ClientError::from_envelope(status.as_u16(), &body));
        }
        serde_json::from_value(body)
            .map_err(|e| ClientError::Unreadable(format!("{url} answered: {e}")))
    }
}

#[cfg(test)]
mod tests;
