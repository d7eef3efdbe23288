//! W3C trace context in and out of the sidecar: the server span of each
//! agent request (its parent from `traceparent`/`tracestate`), the MCP
//! gateway's span of each message (its parent from `params._meta` when the
//! message carries one, as MCP clients now do), and the context injected
//! into what the gateway forwards, so the upstream server's spans join the
//! agent's trace. With tracing off every span here is disabled and nothing
//! is read, parsed or injected.

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use serde_json::Value;
use toolgate_contract::TRACE_TARGET;
use toolgate_contract::names::TRACE_CONTEXT_FIELDS as TRACE_FIELDS;
use tracing::field::Empty;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::error::ApiError;

/// `params._meta` of an MCP message, read as a carrier.
struct Meta<'a>(&'a serde_json::Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// A carrier of the agent's, read for its `traceparent` alone: its
/// `tracestate` (and `baggage`) are the agent's free text, which the trace
/// context the gateway sends upstreams would otherwise carry on to every
/// server (a channel no rule decides).
struct ParentOnly<'a>(&'a dyn Extractor);

impl Extractor for ParentOnly<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then(|| self.0.get(key)).flatten()
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

fn extract(carrier: &dyn Extractor) -> opentelemetry::Context {
    let carrier = ParentOnly(carrier);
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier))
}

/// Middleware: one server span per agent request, continuing the trace
/// the request names.
pub(crate) async fn server_span(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "http.server",
        otel.name = %format_args!("{} {}", req.method(), route.as_deref().unwrap_or("unmatched")),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %req.method(),
        http.route = route.as_deref(),
        url.path = req.uri().path(),
        http.response.status_code = Empty,
    );
    if span.is_disabled() {
        return next.run(req).await;
    }
    let _ = span.set_parent(extract(&HeaderExtractor(req.headers())));
    let sampled = sampled(&span);
    let response = toolgate_gate::with_sampling(sampled, next.run(req))
        .instrument(span.clone())
        .await;
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// Whether `span`'s trace is recorded: the tracer decides when the span
/// starts, which this forces (its parent must be set first).
pub(crate) fn sampled(span: &Span) -> bool {
    span.context().span().span_context().is_sampled()
}

/// The gateway's span of one message to upstream `server`, named and
/// attributed per the MCP conventions (`tools/call fs.read`). A message
/// whose `params._meta` carries a `traceparent` continues that trace;
/// otherwise the span is a child of the request's.
pub(crate) fn mcp_span(server: &str, headers: &HeaderMap, body: &[u8]) -> Span {
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "mcp",
        otel.name = Empty,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = Empty,
        mcp.session.id = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()),
        mcp.protocol.version = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()),
        jsonrpc.request.id = Empty,
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        toolgate.mcp.server = server,
        error.type = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let message: Option<Value> = serde_json::from_slice(body).ok();
    let method = message
        .as_ref()
        .and_then(|m| m.get("method"))
        .and_then(Value::as_str);
    let target = message
        .as_ref()
        .and_then(|m| m.pointer("/params/name"))
        .and_then(Value::as_str);
    span.record(
        "otel.name",
        match (method, target) {
            (Some(m), Some(t)) => format!("{m} {t}"),
            (Some(m), None) => m.to_owned(),
            // A response or a stream: what the client sent, by transport.
            _ => format!("mcp {server}"),
        },
    );
    if let Some(m) = method {
        span.record("mcp.method.name", m);
    }
    if let Some(id) = message.as_ref().and_then(|m| m.get("id")) {
        span.record("jsonrpc.request.id", id.to_string().trim_matches('"'));
    }
    if method == Some("tools/call") {
        span.record("gen_ai.operation.name", "execute_tool");
        if let Some(t) = target {
            span.record("gen_ai.tool.name", t);
        }
    }
    if let Some(meta) = message
        .as_ref()
        .and_then(|m| m.pointer("/params/_meta"))
        .and_then(Value::as_object)
        // A traceparent is 55 characters and a tracestate at most 512: an
        // agent's megabyte is not parsed.
        .filter(|meta| {
            meta.get("traceparent")
                .and_then(Value::as_str)
                .is_some_and(|t| t.len() <= 128)
                && meta
                    .get("tracestate")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t.len() <= 512)
        })
    {
        let cx = extract(&Meta(meta));
        // A malformed `traceparent` leaves the request's parent in place
        // rather than starting a trace of its own.
        if cx.span().span_context().is_valid() {
            let _ = span.set_parent(cx);
        }
    }
    span
}

/// Records how the gateway answered on its span.
pub(crate) fn mcp_answered(span: &Span, answer: &Result<Response, ApiError>) {
    match answer {
        Err(e) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", e.code());
        }
        Ok(r) if r.status().is_server_error() => {
            span.record("otel.status_code", "ERROR");
        }
        Ok(_) => {}
    }
}

/// Puts the current span's context in a forwarded message's
/// `params._meta`, replacing the agent's, so the upstream's own span (the
/// MCP SDKs read it there) is a child of the gateway's; with tracing off,
/// the message is left alone.
pub(crate) fn inject_meta(message: &mut Value) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    for field in TRACE_FIELDS {
        meta.remove(field);
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut MetaOut(meta)));
}

struct MetaOut<'a>(&'a mut serde_json::Map<String, Value>);

impl Injector for MetaOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), Value::String(value));
    }
}

/// Puts the current span's context on a request to an upstream, replacing
/// any the agent sent; with tracing off, leaves the headers alone.
pub(crate) fn inject(headers: &mut reqwest::header::HeaderMap) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    for field in TRACE_FIELDS {
        headers.remove(field);
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeaderInjector(headers))
    });
}
