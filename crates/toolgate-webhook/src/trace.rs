//! One span per admission review, exported when the binary turns tracing
//! on. The kube-apiserver sends a `traceparent` with its webhook calls when
//! its own tracing is on, so a review then joins the API request's trace.

use axum::http::HeaderMap;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::HeaderExtractor;
use toolgate_contract::TRACE_TARGET;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::review::{AdmissionRequest, AdmissionResponse};

/// The span of one review by webhook `hook`, continuing the caller's
/// trace when the request names a valid one.
pub(crate) fn admission(hook: &'static str, headers: &HeaderMap) -> Span {
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "admission",
        otel.name = %format_args!("admission {hook}"),
        otel.kind = "server",
        otel.status_code = Empty,
        toolgate.webhook = hook,
        toolgate.admission.uid = Empty,
        toolgate.admission.operation = Empty,
        toolgate.admission.allowed = Empty,
        toolgate.admission.reason = Empty,
        toolgate.admission.patched = Empty,
        k8s.namespace.name = Empty,
        k8s.object.name = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let cx =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
    span
}

/// Records the review and its answer on the current admission span.
pub(crate) fn reviewed(request: &AdmissionRequest, response: &AdmissionResponse) {
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    span.record("toolgate.admission.uid", request.uid.as_str());
    span.record("toolgate.admission.operation", request.operation.as_str());
    span.record("toolgate.admission.allowed", response.allowed);
    span.record("toolgate.admission.patched", response.patch.is_some());
    if let Some(ns) = &request.namespace {
        span.record("k8s.namespace.name", ns.as_str());
    }
    if let Some(name) = &request.name {
        span.record("k8s.object.name", name.as_str());
    }
    if let Some(status) = &response.status {
        span.record("toolgate.admission.reason", status.reason.as_str());
    }
}

/// Marks the current admission span failed: the review could not be read.
pub(crate) fn unreadable(code: &str) {
    let span = Span::current();
    span.record("otel.status_code", "ERROR");
    span.record("toolgate.admission.reason", code);
}
