//! The gate's spans, exported as a trace when the binary turns tracing on
//! (all under [`TRACE_TARGET`], so with tracing off a span is one cached
//! interest check and no field is evaluated). One `execute_tool` span per
//! decided call, named and attributed per OpenTelemetry's GenAI
//! conventions, with `toolgate.*` attributes for the decision; child spans
//! for what takes time or can fail: the durable append, the run charge,
//! the approval request, the approval wait and each intent step. A call's
//! arguments are recorded only when the sidecar opts in.
//!
//! An adapter that knows its trace is not sampled says so with
//! [`with_sampling`], and the gate then builds none of its spans: at a 1 %
//! ratio, 99 calls in 100 pay for one root span, not for a dozen.

use tracing::field::Empty;
use tracing::{Instrument, Span};

use toolgate_contract::TRACE_TARGET;

use crate::{AuthorizeRequest, AuthorizeResponse, GateError, NO_STEP};

tokio::task_local! {
    static SAMPLED: bool;
}

/// Runs `work` (a request's handling) knowing whether the trace it belongs
/// to is sampled. Outside such a scope the gate's spans are built and the
/// tracer decides.
pub async fn with_sampling<F: Future>(sampled: bool, work: F) -> F::Output {
    SAMPLED.scope(sampled, work).await
}

/// Whether the surrounding request's trace is known to be dropped.
fn unsampled() -> bool {
    SAMPLED.try_with(|sampled| !*sampled).unwrap_or(false)
}

/// The span of one decided call, before it is decided.
pub(crate) fn tool_call(req: &AuthorizeRequest, tenant: &str, with_arguments: bool) -> Span {
    if unsampled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", req.tool),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %req.tool,
        gen_ai.tool.call.id = req.step_id.as_deref().unwrap_or(NO_STEP),
        gen_ai.tool.call.arguments = Empty,
        toolgate.run_id = %req.run_id,
        toolgate.tenant = tenant,
        toolgate.action = req.action.as_deref(),
        toolgate.decision_id = Empty,
        toolgate.verdict = Empty,
        toolgate.reason = Empty,
        toolgate.matched_rule = Empty,
        toolgate.policy_version = Empty,
        toolgate.risk = Empty,
        toolgate.enforced = Empty,
        toolgate.would_verdict = Empty,
        toolgate.approval_id = Empty,
        error.type = Empty,
    );
    if with_arguments && !span.is_disabled() {
        let arguments = serde_json::Value::Object(req.arguments.clone()).to_string();
        span.record("gen_ai.tool.call.arguments", arguments);
    }
    span
}

/// Records the answer (or the refusal) on a call's span.
pub(crate) fn decided(span: &Span, answer: &Result<AuthorizeResponse, GateError>) {
    if span.is_disabled() {
        return;
    }
    match answer {
        Ok(a) => {
            let v = &a.verdict;
            span.record("toolgate.decision_id", a.decision_id.as_str());
            span.record("toolgate.verdict", v.verdict.as_str());
            span.record("toolgate.reason", v.reason.as_str());
            span.record("toolgate.policy_version", v.policy_version.as_str());
            span.record("toolgate.risk", v.risk.as_str());
            span.record("toolgate.enforced", v.enforced);
            if let Some(rule) = &v.matched_rule {
                span.record("toolgate.matched_rule", rule.as_str());
            }
            if let Some(would) = v.would_verdict {
                span.record("toolgate.would_verdict", would.as_str());
            }
            if let Some(id) = &a.approval_id {
                span.record("toolgate.approval_id", id.as_str());
            }
        }
        Err(e) => failed(span, e.code()),
    }
}

/// Marks `span` as failed with the error's stable `code`.
pub(crate) fn failed(span: &Span, code: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", code);
}

/// A step inside a call or an intent (`toolgate.decision.append`, …).
pub(crate) fn step(name: &'static str) -> Span {
    if unsampled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TRACE_TARGET,
        "toolgate.step",
        otel.name = name,
        otel.status_code = Empty,
        error.type = Empty,
    )
}

/// The wait for approval `id` (its duration is the span's).
pub(crate) fn approval_wait(id: &str, wait_ms: u128) -> Span {
    if unsampled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TRACE_TARGET,
        "toolgate.approval.wait",
        toolgate.approval_id = id,
        toolgate.approval.wait_ms = wait_ms as u64,
        toolgate.approval.status = Empty,
        toolgate.approval.decided_by = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    )
}

/// Runs one step of an intent's life (`begin`, `effect_sent`,
/// `complete`) inside its span, recording the intent it left.
pub(crate) async fn intent_step(
    phase: &'static str,
    id: Option<&str>,
    step: impl Future<Output = Result<toolgate_store::Intent, GateError>>,
) -> Result<toolgate_store::Intent, GateError> {
    let span = intent(phase, id);
    let result = step.instrument(span.clone()).await;
    match &result {
        Ok(intent) => {
            span.record("toolgate.intent_id", intent.id.as_str());
            span.record("toolgate.decision_id", intent.decision_id.as_str());
            span.record("toolgate.intent.status", intent.status.as_str());
        }
        Err(e) => failed(&span, e.code()),
    }
    result
}

fn intent(phase: &'static str, id: Option<&str>) -> Span {
    if unsampled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TRACE_TARGET,
        "toolgate.intent",
        otel.name = %format_args!("toolgate.intent.{phase}"),
        toolgate.intent_id = id,
        toolgate.decision_id = Empty,
        toolgate.intent.status = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    )
}

/// An error with a stable code, for `error.type`.
pub(crate) trait Coded {
    fn code(&self) -> &str;
}

impl Coded for GateError {
    fn code(&self) -> &str {
        GateError::code(self)
    }
}

impl Coded for toolgate_store::StoreError {
    fn code(&self) -> &str {
        toolgate_store::StoreError::code(self)
    }
}

/// Runs one step inside its own span (named `name`), marked failed with
/// the error's code when it fails.
pub(crate) async fn traced<T, E: Coded>(
    name: &'static str,
    step: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let span = self::step(name);
    let result = step.instrument(span.clone()).await;
    if let Err(e) = &result {
        failed(&span, e.code());
    }
    result
}
