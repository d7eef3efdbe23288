//! Where the demo's script runs: the agent's HTTP client, the human
//! approver's database access, and the MCP server behind the gateway.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use toolgate_gate::AuthorizeRequest;
use toolgate_sidecar::api::EffectSentRequest;
use toolgate_store::ApprovalDecision;

use super::script::{Act, Answer, Memory, TENANT};
use crate::cli_error::CliError;

/// Where the script's acts go: the agent's HTTP client, the database (for
/// the human approver), the run's workspace and the MCP server's counter.
pub(super) struct Demo {
    pub(super) agent: Agent,
    pub(super) store: toolgate_store::Store,
    pub(super) workspace: std::path::PathBuf,
    pub(super) upstream_calls: Arc<AtomicUsize>,
}

impl Demo {
    pub(super) async fn perform(&self, act: Act, memory: &mut Memory) -> Result<Answer, CliError> {
        let agent = &self.agent;
        match act {
            Act::Authorize(req) => agent.authorize(&req).await,
            Act::BeginIntent(req) => agent.post("/v1/intents", &req).await,
            Act::EffectSent(id) => {
                let path = format!("/v1/intents/{id}/effect-sent");
                agent.post(&path, &EffectSentRequest::default()).await
            }
            Act::Complete(id, req) => {
                let path = format!("/v1/intents/{id}/complete");
                agent.post(&path, &req).await
            }
            Act::Approve(id) => {
                let now = jiff::Timestamp::now();
                let by = "alice@platform";
                self.store
                    .approvals()
                    .resolve(
                        TENANT,
                        &id,
                        ApprovalDecision::Approved,
                        by,
                        Some("release day"),
                        now,
                    )
                    .await?;
                outln!("   (alice approves, as `toolgate approvals approve {id} --by {by}` would)");
                Ok(Answer::default())
            }
            Act::WaitForApproval(id) => agent.get(&format!("/v1/approvals/{id}?wait=5")).await,
            Act::Write(req) => agent.post("/v1/workspace/write", &req).await,
            Act::Read(req) => agent.post("/v1/workspace/read", &req).await,
            Act::PlantSymlink => {
                let link = self.workspace.join("etc");
                memory.linked = std::os::unix::fs::symlink("/etc", link).is_ok();
                Ok(Answer::default())
            }
            Act::Mcp(message) => {
                let before = self.upstream_calls.load(Ordering::SeqCst);
                let mut answer = agent.post("/mcp/tickets", &message).await?;
                answer.reached_upstream = self.upstream_calls.load(Ordering::SeqCst) - before;
                Ok(answer)
            }
        }
    }
}

/// The scripted agent's HTTP client.
pub(super) struct Agent {
    pub(super) http: reqwest::Client,
    pub(super) base: String,
}

impl Agent {
    async fn authorize(&self, req: &AuthorizeRequest) -> Result<Answer, CliError> {
        let mut answer = self.post("/v1/authorize", req).await?;
        answer.verdict = serde_json::from_value(answer.body.clone()).ok();
        outln!(
            "   -> {} {}: {} ({})",
            req.tool,
            Value::Object(req.arguments.clone()),
            answer
                .verdict
                .as_ref()
                .map_or("?", |v| v.verdict.verdict.as_str()),
            answer.reason_text()
        );
        Ok(answer)
    }

    async fn post(&self, path: &str, body: &impl serde::Serialize) -> Result<Answer, CliError> {
        Self::send(self.http.post(format!("{}{path}", self.base)).json(body)).await
    }

    async fn get(&self, path: &str) -> Result<Answer, CliError> {
        Self::send(self.http.get(format!("{}{path}", self.base))).await
    }

    async fn send(request: reqwest::RequestBuilder) -> Result<Answer, CliError> {
        let resp = request
            .send()
            .await
            .map_err(|e| CliError::Usage(format!("sidecar request failed: {e}")))?;
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            ..Answer::default()
        })
    }
}

/// A minimal streamable-HTTP MCP endpoint on loopback with three tools
/// (`purge_all` is not in the profile); counts the calls that reach it.
pub(super) async fn demo_mcp_server() -> Result<(std::net::SocketAddr, Arc<AtomicUsize>), CliError>
{
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |axum::Json(req): axum::Json<Value>| {
            let counter = counter.clone();
            async move {
                let result = match req["method"].as_str() {
                    Some("tools/list") => json!({"tools": [
                        {"name": "search", "description": "Search tickets", "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
                        {"name": "close", "description": "Close a ticket", "inputSchema": {"type": "object", "properties": {"ticket": {"type": "string"}}, "required": ["ticket"]}},
                        {"name": "purge_all", "description": "Delete every ticket", "inputSchema": {"type": "object"}}
                    ]}),
                    Some("tools/call") => {
                        counter.fetch_add(1, Ordering::SeqCst);
                        json!({"content": [{"type": "text", "text": "done"}], "isError": false})
                    }
                    _ => json!({}),
                };
                axum::Json(json!({"jsonrpc": "2.0", "id": req["id"], "result": result}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|source| CliError::Io {
            path: "demo MCP server".into(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| CliError::Io {
        path: "demo MCP server".into(),
        source,
    })?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, calls))
}
