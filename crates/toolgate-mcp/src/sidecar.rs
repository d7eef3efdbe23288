//! The sidecar's agent API as the gateway uses it: the [`Decider`] of
//! `toolgate mcp wrap`, over HTTP.

use std::collections::HashMap;
use std::time::Duration;
use toolgate_contract::agent_api::MAX_WAIT_SECONDS;

use serde_json::{Value, json};

use crate::McpError;
use crate::caller_trace::CallerTrace;
use crate::gateway::{
    AuthorizeResponse, Decider, MessageScreen, RefusalRequest, Screened, ToolCall, intent_id,
};

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
            poll: build(timeout + Duration::from_secs(MAX_WAIT_SECONDS))?,
        })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, McpError> {
        let response = request
            .headers(CallerTrace::current_headers())
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
}

impl Decider for Sidecar {
    async fn authorize(&self, call: ToolCall<'_>) -> Result<AuthorizeResponse, McpError> {
        let mut body = json!({
            "tool": call.tool,
            "arguments": call.arguments,
            "run_id": call.run_id,
            "step_id": call.step_id,
        });
        if let Some(d) = call.definition_digest {
            body["definition_digest"] = json!(d);
        }
        let answer = self.post("/v1/authorize", &body).await?;
        // An answer that is not a verdict is unusable: fail closed.
        serde_json::from_value(answer)
            .map_err(|e| McpError::Sidecar(format!("/v1/authorize answered no verdict: {e}")))
    }

    async fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
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

    async fn begin_intent(
        &self,
        decided: &AuthorizeResponse,
        call: ToolCall<'_>,
    ) -> Result<String, McpError> {
        let intent = self
            .post(
                "/v1/intents",
                &json!({
                    "decision_id": decided.decision_id,
                    "run_id": call.run_id,
                    "step_id": call.step_id,
                    "tool": call.tool,
                    "args_digest": decided.verdict.args_digest,
                    "call_digest": decided.verdict.call_digest,
                }),
            )
            .await?;
        let id = intent_id(&intent)?;
        self.post(&format!("/v1/intents/{id}/effect-sent"), &json!({}))
            .await?;
        Ok(id)
    }

    async fn complete_intent(
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

    async fn wait_for_approval(
        &self,
        id: &str,
        wait: Duration,
    ) -> Result<toolgate_contract::ApprovalStatus, McpError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let secs = left.as_secs().clamp(1, MAX_WAIT_SECONDS);
            let body = self
                .send(
                    self.poll
                        .get(format!("{}/v1/approvals/{id}", self.base))
                        .query(&[("wait", secs)]),
                )
                .await?;
            // A status the contract does not name is an unusable answer:
            // fail closed rather than guess.
            let status = body["status"]
                .as_str()
                .and_then(toolgate_contract::ApprovalStatus::from_wire)
                .ok_or_else(|| McpError::Sidecar(format!("approval {id}: no readable status")))?;
            if !status.is_pending() || tokio::time::Instant::now() >= deadline {
                return Ok(status);
            }
        }
    }

    async fn screen(&self, message: &MessageScreen) -> Result<Screened, McpError> {
        let body = serde_json::to_value(message)
            .map_err(|e| McpError::Sidecar(format!("message not serializable: {e}")))?;
        let answer = self.post("/v1/messages/screen", &body).await?;
        serde_json::from_value(answer)
            .map_err(|e| McpError::Sidecar(format!("/v1/messages/screen answered: {e}")))
    }

    async fn refused(&self, refusal: &RefusalRequest) -> Result<(), McpError> {
        let body = serde_json::to_value(refusal)
            .map_err(|e| McpError::Sidecar(format!("refusal not serializable: {e}")))?;
        self.post("/v1/refusals", &body).await.map(|_| ())
    }
}
