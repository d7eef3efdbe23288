//! The sidecar's agent API as the gateway uses it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::McpError;

/// Longest approval long-poll the sidecar accepts, in seconds.
const MAX_POLL_SECONDS: u64 = 60;

/// HTTP client of one sidecar (`$TOOLGATE_URL`).
#[derive(Debug, Clone)]
pub struct Sidecar {
    base: String,
    http: reqwest::Client,
    poll: reqwest::Client,
}

impl Sidecar {
    /// A client of the sidecar at `base` (e.g. `http://127.0.0.1:15031`);
    /// each request may take `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, McpError> {
        let build = |t: Duration| {
            reqwest::Client::builder()
                .timeout(t)
                .build()
                .map_err(|e| McpError::Sidecar(e.to_string()))
        };
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http: build(timeout)?,
            poll: build(timeout + Duration::from_secs(MAX_POLL_SECONDS))?,
        })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, McpError> {
        let response = request
            .send()
            .await
            .map_err(|e| McpError::Sidecar(format!("{} unreachable: {e}", self.base)))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| McpError::Sidecar(format!("unreadable answer: {e}")))?;
        if status.is_success() {
            return Ok(body);
        }
        let text = |p: &str| {
            body.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Err(McpError::Refused {
            code: text("/error/code"),
            message: text("/error/message"),
        })
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value, McpError> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }

    /// `POST /v1/authorize`: the verdict with its `decision_id`.
    pub async fn authorize(
        &self,
        tool: &str,
        arguments: &serde_json::Map<String, Value>,
        run_id: &str,
        step_id: &str,
        definition_digest: Option<&str>,
    ) -> Result<Value, McpError> {
        let mut body =
            json!({"tool": tool, "arguments": arguments, "run_id": run_id, "step_id": step_id});
        if let Some(d) = definition_digest {
            body["definition_digest"] = json!(d);
        }
        self.post("/v1/authorize", &body).await
    }

    /// `POST /v1/tools/visible`: which of `tools` may be offered, given the
    /// definition digests the server announced (by policy tool name).
    pub async fn visible(
        &self,
        tools: &[String],
        definitions: &std::collections::HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        let body = self
            .post(
                "/v1/tools/visible",
                &json!({"tools": tools, "definitions": definitions}),
            )
            .await?;
        Ok(body["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Records the intent of an allowed high-risk call and marks its effect
    /// as about to be sent; returns the intent id.
    pub async fn begin_intent(
        &self,
        verdict: &Value,
        tool: &str,
        run_id: &str,
        step_id: &str,
    ) -> Result<String, McpError> {
        let intent = self
            .post(
                "/v1/intents",
                &json!({
                    "decision_id": verdict["decision_id"],
                    "run_id": run_id,
                    "step_id": step_id,
                    "tool": tool,
                    "args_digest": verdict["args_digest"],
                    "call_digest": verdict["call_digest"],
                }),
            )
            .await?;
        let id = intent["intent_id"]
            .as_str()
            .ok_or_else(|| McpError::Sidecar("intent answer without intent_id".into()))?
            .to_owned();
        self.post(&format!("/v1/intents/{id}/effect-sent"), &json!({}))
            .await?;
        Ok(id)
    }

    /// Closes an intent: `completed` or `error`.
    pub async fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> Result<(), McpError> {
        let outcome = if failed { "error" } else { "completed" };
        let mut body = json!({"outcome": outcome});
        if let Some(d) = detail {
            body["detail"] = json!(d);
        }
        self.post(&format!("/v1/intents/{id}/complete"), &body)
            .await
            .map(|_| ())
    }

    /// Waits up to `wait` for an approval to be decided; returns its status
    /// (`pending` when nobody answered in time).
    pub async fn wait_for_approval(&self, id: &str, wait: Duration) -> Result<String, McpError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let secs = left.as_secs().clamp(1, MAX_POLL_SECONDS);
            let body = self
                .send(
                    self.poll
                        .get(format!("{}/v1/approvals/{id}", self.base))
                        .query(&[("wait", secs)]),
                )
                .await?;
            let status = body["status"].as_str().unwrap_or("pending").to_owned();
            if status != "pending" || tokio::time::Instant::now() >= deadline {
                return Ok(status);
            }
        }
    }
}

impl crate::gateway::Decider for Sidecar {
    async fn authorize(
        &self,
        tool: &str,
        arguments: &serde_json::Map<String, Value>,
        run_id: &str,
        step_id: &str,
        definition_digest: Option<&str>,
    ) -> Result<Value, McpError> {
        Sidecar::authorize(self, tool, arguments, run_id, step_id, definition_digest).await
    }

    async fn visible(
        &self,
        tools: &[String],
        definitions: &std::collections::HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        Sidecar::visible(self, tools, definitions).await
    }

    async fn begin_intent(
        &self,
        verdict: &Value,
        tool: &str,
        run_id: &str,
        step_id: &str,
    ) -> Result<String, McpError> {
        Sidecar::begin_intent(self, verdict, tool, run_id, step_id).await
    }

    async fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> Result<(), McpError> {
        Sidecar::complete_intent(self, id, failed, detail).await
    }

    async fn wait_for_approval(&self, id: &str, wait: Duration) -> Result<String, McpError> {
        Sidecar::wait_for_approval(self, id, wait).await
    }
}
