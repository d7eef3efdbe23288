//! The agent's trace context, carried by `toolgate mcp wrap` from a
//! message's `params._meta` (where MCP clients put `traceparent` and
//! `tracestate`) to its requests to the sidecar, so the sidecar's spans of
//! the call join the agent's trace. The wrapper exports no spans itself:
//! it only passes the context on, whether or not it has an exporter.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use toolgate_contract::names::TRACE_CONTEXT_FIELDS;

/// Longest field passed on: a `traceparent` is 55 characters and W3C caps
/// `tracestate` at 512; anything longer is not a trace context.
const MAX_FIELD_BYTES: usize = 512;

tokio::task_local! {
    static CALLER: CallerTrace;
}

/// The trace context one message arrived with (empty when it had none).
#[derive(Debug, Clone, Default)]
pub struct CallerTrace(HeaderMap);

impl CallerTrace {
    /// The context in `message`'s `params._meta`: each field that is a
    /// short, valid header value; the rest is dropped (the sidecar parses
    /// what it gets strictly, and the agent is not trusted to send sense).
    pub fn of_message(message: &Value) -> Self {
        let mut headers = HeaderMap::new();
        let meta = message.pointer("/params/_meta").and_then(Value::as_object);
        for field in TRACE_CONTEXT_FIELDS {
            if let Some(value) = meta
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .filter(|v| v.len() <= MAX_FIELD_BYTES)
                .and_then(|v| HeaderValue::from_str(v).ok())
            {
                headers.insert(HeaderName::from_static(field), value);
            }
        }
        Self(headers)
    }

    /// Runs `work` with this context as the caller's.
    pub async fn scope<F: Future>(self, work: F) -> F::Output {
        CALLER.scope(self, work).await
    }

    /// The headers of the current caller's context (none outside a scope).
    pub(crate) fn current_headers() -> HeaderMap {
        CALLER.try_with(|c| c.0.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn only_the_callers_valid_fields_are_passed_on() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let message = json!({"params": {"_meta": {
            "traceparent": parent, "tracestate": "x".repeat(600), "other": "kept out"}}});
        let headers = CallerTrace::of_message(&message)
            .scope(async { CallerTrace::current_headers() })
            .await;
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(headers["traceparent"], parent);
        let forged = json!({"params": {"_meta": {"traceparent": "a\r\nx-injected: 1"}}});
        assert!(CallerTrace::of_message(&forged).0.is_empty());
        assert!(
            CallerTrace::current_headers().is_empty(),
            "nothing outside a scope"
        );
    }
}
