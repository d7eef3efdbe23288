//! The `RunCancellation` reconciler: records a cancellation in the database
//! once and reports it in the object's status (the resource itself is
//! [`toolgate_k8s::cancellation`]).

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
pub use toolgate_k8s::cancellation::{
    PHASE_APPLIED, PHASE_FAILED, RunCancellation, RunCancellationSpec, RunCancellationStatus,
    cancelled_by, object_name, stop_object_name,
};
use toolgate_policy::Stop;

use crate::context::Context;
use crate::error::ControllerError;

/// Records the cancellation once; an applied object is left alone.
pub async fn reconcile(
    obj: Arc<RunCancellation>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let span = crate::trace::reconcile(
        "RunCancellation",
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
    );
    crate::trace::traced(span, record(obj, ctx)).await
}

async fn record(obj: Arc<RunCancellation>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    if obj
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == PHASE_APPLIED)
    {
        return Ok(Action::await_change());
    }
    let ns = obj.namespace().ok_or_else(|| {
        ControllerError::InvalidObject("RunCancellation without namespace".into())
    })?;
    // The run in its canonical spelling, as every sidecar keys it, or the
    // scope; a spec naming neither fails for good (retrying cannot help).
    let stop = match obj.spec.stop() {
        Ok(stop) => stop,
        Err(e) => {
            let status = RunCancellationStatus {
                phase: Some(PHASE_FAILED.into()),
                message: Some(format!("{}: {e}", e.code())),
                ..Default::default()
            };
            ctx.apply_status(obj.as_ref(), &status).await?;
            return Ok(Action::await_change());
        }
    };
    let (runs, reason, by) = (
        ctx.store.runs(),
        obj.spec.reason.as_deref(),
        cancelled_by(&obj),
    );
    let outcome = match &stop {
        Stop::Run(run_id) => runs.cancel(&ns, run_id, reason, &by, ctx.now()).await,
        Stop::Scope(scope) => runs.cancel_scope(&ns, scope, reason, &by, ctx.now()).await,
    };
    let (status, action) = match outcome {
        Ok(done) => {
            tracing::info!(
                namespace = ns,
                stop = %stop,
                newly = done.newly_cancelled,
                "cancelled"
            );
            (
                RunCancellationStatus {
                    phase: Some(PHASE_APPLIED.into()),
                    cancel_requested_at: Some(done.requested_at.to_string()),
                    approvals_cancelled: Some(done.approvals_cancelled),
                    message: None,
                },
                Action::await_change(),
            )
        }
        Err(e) => (
            RunCancellationStatus {
                phase: Some(PHASE_FAILED.into()),
                message: Some(format!("{}: {e}", e.code())),
                ..Default::default()
            },
            Action::requeue(Duration::from_secs(10)),
        ),
    };
    ctx.apply_status(obj.as_ref(), &status).await?;
    Ok(action)
}
