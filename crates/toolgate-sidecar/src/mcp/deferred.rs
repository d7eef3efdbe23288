//! A call held under a task (`toolgate_mcp::tasks`), sent to the upstream
//! once its approval is granted, with the headers of the request that made
//! it: the HTTP side of `toolgate_mcp::gateway::Gateway::run_deferred`.

use std::sync::Arc;

use serde_json::Value;

use super::{McpUpstreams, Upstream, relay, set_routing_headers, upstream_refusal};
use crate::trace_context;

/// A call held under a task (see `toolgate_mcp::tasks`), sent upstream
/// once its approval is granted, with the headers of the request that
/// made it.
pub(super) struct Deferred {
    pub(super) mcp: McpUpstreams,
    pub(super) upstream: Arc<Upstream>,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) run_id: toolgate_policy::RunId,
}

impl Deferred {
    pub(super) async fn run(self, call: toolgate_mcp::tasks::DeferredCall) {
        let gateway = &self.upstream.gateway;
        // The policy may have changed while a human decided: the upstream
        // is checked again before the approval is consumed.
        let sendable = || match upstream_refusal(&self.mcp, &self.upstream) {
            Some(why) => Err(format!("mcp_upstream_not_allowed: {why}")),
            None => Ok(()),
        };
        let Some(mut message) = gateway.run_deferred(call, sendable).await else {
            return;
        };
        let Some(ours) = message["id"].as_str().map(str::to_owned) else {
            return;
        };
        trace_context::inject_meta(&mut message);
        let mut headers = self.headers.clone();
        set_routing_headers(&mut headers, &message, &self.upstream.gateway);
        trace_context::inject(&mut headers);
        let send = self.send(message, headers, ours.clone());
        // Bounded: a server that never ends its answer must not hold the
        // gate (and the sidecar's shutdown) for ever.
        tokio::select! {
            () = send => {}
            () = gateway.closing() => {}
            () = tokio::time::sleep(toolgate_mcp::tasks::TASK_TTL) => {}
        }
        // Still unanswered: its task fails (whether it took effect is unknown).
        gateway.abandon(&ours);
    }

    /// Runs a task kept by the sidecar's last run: the upstream's tools
    /// are listed first, so the call is checked against what it announces
    /// now.
    pub(super) async fn resume(
        self,
        call: toolgate_mcp::tasks::DeferredCall,
        session: Option<String>,
    ) {
        // The call's own envelope (protocol version, client info) goes with it.
        let meta = call.message().pointer("/params/_meta").cloned();
        self.list_tools(session.as_deref(), meta).await;
        self.run(call).await;
    }

    /// Asks the upstream for its tools, read as a client's listing would be.
    async fn list_tools(&self, session: Option<&str>, meta: Option<serde_json::Value>) {
        let gateway = &self.upstream.gateway;
        let route = toolgate_mcp::relay::Route {
            run_id: &self.run_id,
            session,
            modern: true,
        };
        let id = format!("toolgate-resume-{}", uuid::Uuid::new_v4().simple());
        let mut list =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}});
        if let Some(meta) = meta {
            list["params"]["_meta"] = meta;
            toolgate_mcp::tasks::strip_declaration(&mut list);
        }
        let toolgate_mcp::relay::ClientStep::Forward { message, request } =
            gateway.from_client(list, route).await
        else {
            return;
        };
        let mut headers = self.headers.clone();
        set_routing_headers(&mut headers, &message, gateway);
        let sent = self
            .mcp
            .http
            .post(&self.upstream.url)
            .headers(headers.clone())
            .body(message.to_string())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(server = %gateway.server(), error = %e, "cannot list the tools of a resumed task's server");
                return;
            }
        };
        let stream = relay::Stream {
            http: self.mcp.http.clone(),
            upstream: self.upstream.clone(),
            headers,
            run_id: self.run_id.clone(),
            awaited: request,
            is_post: true,
            detached: true,
        };
        let mut relayed = stream.relay(response).await.into_body().into_data_stream();
        while futures_util::StreamExt::next(&mut relayed).await.is_some() {}
    }

    /// Sends the approved call and reads the answer into its task.
    async fn send(&self, message: Value, headers: reqwest::header::HeaderMap, ours: String) {
        let gateway = &self.upstream.gateway;
        let sent = self
            .mcp
            .http
            .post(&self.upstream.url)
            .headers(headers.clone())
            .body(message.to_string())
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(server = %gateway.server(), error = %e, "an approved call could not be sent");
                return;
            }
        };
        let stream = relay::Stream {
            http: self.mcp.http.clone(),
            upstream: self.upstream.clone(),
            headers,
            run_id: self.run_id.clone(),
            awaited: Some(ours),
            is_post: true,
            detached: true,
        };
        // Read to its end: the answer is kept for the task, nothing else
        // has anyone to go to.
        let mut relayed = stream.relay(response).await.into_body().into_data_stream();
        while futures_util::StreamExt::next(&mut relayed).await.is_some() {}
    }
}
