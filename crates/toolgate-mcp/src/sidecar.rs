//! The sidecar's agent API as the gateway uses it: the [`Decider`] of
//! `toolgate mcp wrap`, over HTTP through [`toolgate_client::Client`].

use std::collections::HashMap;
use std::time::Duration;

use toolgate_client::{AuthorizeRequest, Client, ClientError};
use toolgate_contract::ApprovalStatus;

use crate::McpError;
use crate::caller_trace::CallerTrace;
use crate::gateway::{
    AuthorizeResponse, Decider, MessageScreen, RefusalRequest, Screened, ToolCall,
};

/// HTTP client of one sidecar (`$TOOLGATE_URL`), passing on each
/// message's trace context.
#[derive(Debug, Clone)]
pub struct Sidecar {
    client: Client,
}

impl Sidecar {
    /// A client of the sidecar at `base` (e.g. `http://127.0.0.1:15031`);
    /// each request may take `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, McpError> {
        let client = Client::new(base, timeout)?.per_request_headers(CallerTrace::current_headers);
        Ok(Self { client })
    }
}

/// Unreachable and unreadable are the gateway's `sidecar_unreachable` (the
/// sidecar cannot be asked); the sidecar's envelope keeps its code.
impl From<ClientError> for McpError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Refused { code, message, .. } => McpError::Refused { code, message },
            other => McpError::Sidecar(other.to_string()),
        }
    }
}

impl Decider for Sidecar {
    async fn authorize(&self, call: ToolCall<'_>) -> Result<AuthorizeResponse, McpError> {
        let request = AuthorizeRequest {
            tool: call.tool.to_owned(),
            action: None,
            arguments: call.arguments.clone(),
            run_id: call.run_id.clone(),
            step_id: Some(call.step_id.to_owned()),
            tenant: None,
            definition_digest: call.definition_digest.map(str::to_owned),
        };
        Ok(self.client.authorize(&request).await?)
    }

    async fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        Ok(self.client.visible(tools, definitions).await?)
    }

    async fn begin_intent(
        &self,
        decided: &AuthorizeResponse,
        call: ToolCall<'_>,
    ) -> Result<String, McpError> {
        let id = self
            .client
            .begin_intent(decided, call.run_id, call.step_id, call.tool)
            .await?;
        self.client.effect_sent(&id).await?;
        Ok(id)
    }

    async fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> Result<(), McpError> {
        Ok(self.client.complete_intent(id, failed, detail).await?)
    }

    async fn wait_for_approval(
        &self,
        id: &str,
        wait: Duration,
    ) -> Result<ApprovalStatus, McpError> {
        Ok(self.client.wait_for_approval(id, wait).await?)
    }

    async fn screen(&self, message: &MessageScreen) -> Result<Screened, McpError> {
        Ok(self.client.screen(message).await?)
    }

    async fn refused(&self, refusal: &RefusalRequest) -> Result<(), McpError> {
        self.client
            .refuse(refusal)
            .await
            .map(drop)
            .map_err(Into::into)
    }
}
