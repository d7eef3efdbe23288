//! Held MCP tasks resumed when the sidecar starts (see
//! `toolgate_mcp::kept`): each waits for its approval again and is sent
//! with the headers of the request that made it, once the upstream's tools
//! are listed again (the call is checked against the definition the
//! upstream announces now).

use axum::http::HeaderMap;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::headers::forward_headers;
use super::{McpUpstreams, deferred::Deferred};

/// What a held task keeps of its request: the headers the upstream gets
/// (never the credential, read again when it is sent).
pub(super) fn context(from: &HeaderMap) -> Value {
    let headers: Map<String, Value> = forward_headers(from)
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), json!(value.to_str().ok()?))))
        .collect();
    json!({ "headers": headers })
}

fn headers_of(context: &Value) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(Value::Object(headers)) = context.get("headers") {
        for (name, value) in headers {
            if let (Ok(name), Some(Ok(value))) = (
                axum::http::HeaderName::try_from(name.as_str()),
                value.as_str().map(axum::http::HeaderValue::from_str),
            ) {
                out.insert(name, value);
            }
        }
    }
    out
}

impl McpUpstreams {
    /// Resumes every upstream's kept tasks.
    pub(crate) async fn resume_tasks(self) {
        for upstream in self.servers.values() {
            let gateway = &upstream.gateway;
            let resumed = match gateway.resume_tasks().await {
                Ok(resumed) => resumed,
                Err(e) => {
                    tracing::error!(server = %gateway.server(), error = %e, "cannot resume the kept MCP tasks");
                    continue;
                }
            };
            for task in resumed {
                if let Some(session) = &task.session {
                    upstream.sessions.issued(session);
                }
                let headers = match upstream.headers(&headers_of(&task.context)) {
                    Ok(headers) => headers,
                    Err(e) => {
                        tracing::error!(server = %gateway.server(), error = %e, "cannot resume a kept MCP task");
                        continue;
                    }
                };
                tracing::info!(server = %gateway.server(), task = %task.call.task(), "resuming a kept MCP task");
                let deferred = Deferred {
                    mcp: self.clone(),
                    upstream: upstream.clone(),
                    headers,
                    run_id: task.call.run_id().clone(),
                };
                let span = tracing::info_span!("mcp_task", task = %task.call.task());
                tokio::spawn(deferred.resume(task.call, task.session).instrument(span));
            }
        }
    }
}
