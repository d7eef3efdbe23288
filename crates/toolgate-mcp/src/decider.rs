//! Who decides for the gateway, and what it is asked: the [`Decider`]
//! (the sidecar over HTTP, or the sidecar itself) and the agent API's
//! bodies it answers with.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use serde_json::{Map, Value};
use toolgate_contract::ApprovalStatus;

use crate::McpError;

/// The agent API's bodies with the policy's types, as the client reads
/// and writes them: the answer to one call, a refusal the gateway made on
/// its own, a message other than a `tools/call` screened by flow rules.
pub use toolgate_client::{AuthorizeResponse, MessageScreen, RefusalRequest, Screened};

/// One `tools/call` as the decider is asked about it, under its policy
/// tool name (`<server>__<tool>`).
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// Policy tool name.
    pub tool: &'a str,
    /// The call's arguments, as the client sent them.
    pub arguments: &'a Map<String, Value>,
    /// Run the call belongs to, in its canonical spelling.
    pub run_id: &'a toolgate_policy::RunId,
    /// Step id; one per server, so a call retried after its approval is
    /// the same invocation.
    pub step_id: &'a str,
    /// Digest of the tool definition the server announced, when it did.
    pub definition_digest: Option<&'a str>,
}

/// Who decides: the sidecar over HTTP ([`crate::sidecar::Sidecar`]) or,
/// inside the sidecar, its own decision path.
pub trait Decider: Send + Sync + 'static {
    /// The gate's answer to the call, typed: the verdict with its
    /// `decision_id` and, for an escalation, its approval.
    fn authorize(
        &self,
        call: ToolCall<'_>,
    ) -> impl Future<Output = Result<AuthorizeResponse, McpError>> + Send;

    /// Which of `tools` may be offered, given the announced digests.
    fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> impl Future<Output = Result<Vec<String>, McpError>> + Send;

    /// Records the intent of an allowed high-risk call and marks it
    /// effect-sent; returns its id.
    fn begin_intent(
        &self,
        decided: &AuthorizeResponse,
        call: ToolCall<'_>,
    ) -> impl Future<Output = Result<String, McpError>> + Send;

    /// Closes an intent `completed` or `error`.
    fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> impl Future<Output = Result<(), McpError>> + Send;

    /// Waits up to `wait` for an approval; returns its status.
    fn wait_for_approval(
        &self,
        id: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<ApprovalStatus, McpError>> + Send;

    /// Records a refusal the gateway made on its own as a denial in the
    /// decision log (`POST /v1/refusals`, the gate's `refuse`).
    fn refused(
        &self,
        refusal: &RefusalRequest,
    ) -> impl Future<Output = Result<(), McpError>> + Send;

    /// Screens a message other than a `tools/call` by the run's flow rules
    /// (`POST /v1/messages/screen`, the gate's `screen_message`).
    fn screen(
        &self,
        message: &MessageScreen,
    ) -> impl Future<Output = Result<Screened, McpError>> + Send;
}
