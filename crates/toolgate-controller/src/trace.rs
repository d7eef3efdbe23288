//! The controller's spans, exported when the binary turns tracing on: one
//! per reconcile (PolicyProfile, Approval, RunCancellation), per bundle
//! publish, per approval-mirror pass and per checkpoint pass, each marked
//! failed with the error's stable code.

use tracing::field::Empty;
use tracing::{Instrument, Span};

use toolgate_contract::TRACE_TARGET;

use crate::error::ControllerError;

/// The span of one reconcile of the `kind` object `namespace/name`.
pub(crate) fn reconcile(kind: &'static str, namespace: &str, name: &str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        "reconcile",
        otel.name = %format_args!("reconcile {kind}"),
        otel.status_code = Empty,
        error.type = Empty,
        k8s.namespace.name = namespace,
        toolgate.kind = kind,
        toolgate.object = name,
    )
}

/// The span of one pass of a background loop or one step (`name`).
pub(crate) fn pass(name: &'static str) -> Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        "pass",
        otel.name = name,
        otel.status_code = Empty,
        error.type = Empty,
    )
}

/// Runs `work` inside `span`, marking it failed with the error's code.
pub(crate) async fn traced<T>(
    span: Span,
    work: impl Future<Output = Result<T, ControllerError>>,
) -> Result<T, ControllerError> {
    // Boxed: a reconcile's future is large in debug builds, and wrapping it
    // in place would grow every caller's frame by as much again.
    let result = Box::pin(work.instrument(span.clone())).await;
    if let Err(e) = &result {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", e.code());
    }
    result
}
