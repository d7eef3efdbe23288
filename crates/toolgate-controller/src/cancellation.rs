//! `RunCancellation`: how a platform team stops an agent's run with kubectl.
//!
//! Creating one (`kubectl toolgate cancel RUN -n NAMESPACE`) asks the
//! controller to write the cancellation into the database for the run of
//! that namespace's tenant; from then on every sidecar refuses the run's
//! calls with `run_cancelled`, and its pending approvals are cancelled. The
//! object's namespace is the tenant, so RBAC on `runcancellations` in a
//! namespace is exactly the right to stop that namespace's runs. The spec is
//! immutable; the status says when the cancellation was recorded.

// Each `printcolumn(...)` repeats `type_`; clippy reads them as duplicates
// of one attribute.
#![allow(clippy::duplicated_attributes)]

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{CustomResource, KubeSchema, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::error::ControllerError;

/// Phase once the cancellation is in the database.
pub const PHASE_APPLIED: &str = "Applied";
/// Phase while the database refuses it (retried).
pub const PHASE_FAILED: &str = "Failed";

/// Stops one run of an agent in this namespace: every sidecar refuses the
/// run's further calls and its pending approvals are cancelled. Open intents
/// are kept for resume; nothing is replayed.
#[derive(CustomResource, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "toolgate.dev",
    version = "v1alpha1",
    kind = "RunCancellation",
    namespaced,
    shortname = "tgrc",
    category = "toolgate",
    status = "RunCancellationStatus",
    doc = "A request to cancel one agent run of this namespace's tenant.",
    printcolumn(
        name = "Run",
        type_ = "string",
        json_path = ".spec.runId",
        description = "The cancelled run"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Applied once recorded in the database"
    ),
    printcolumn(
        name = "Approvals",
        type_ = "integer",
        json_path = ".status.approvalsCancelled",
        description = "Pending approvals this request cancelled"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable: create another RunCancellation"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCancellationSpec {
    /// The run id the agent sends as `run_id`.
    #[schemars(length(min = 1, max = 256))]
    pub run_id: String,
    /// Why (recorded, and shown to the agent by `GET /v1/runs/{run_id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
}

/// What the controller did with the request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunCancellationStatus {
    /// `Applied` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the run's cancellation was first recorded (RFC 3339); an
    /// earlier cancellation of the same run keeps its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested_at: Option<String>,
    /// Pending approvals of the run this request cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_cancelled: Option<u64>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Who a cancellation is recorded as: this object.
pub fn cancelled_by(obj: &RunCancellation) -> String {
    format!(
        "runcancellation:{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Object name `kubectl toolgate cancel` uses for `run_id`: deterministic,
/// so cancelling twice finds the first request.
pub fn object_name(run_id: &str) -> String {
    let clean: String = run_id
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let hash = toolgate_policy::digest::sha256_hex(run_id.as_bytes());
    let clean = clean.trim_matches('-');
    if clean.is_empty() {
        format!("cancel-{}", &hash[..10])
    } else {
        format!("cancel-{clean}-{}", &hash[..10])
    }
}

/// Records the cancellation once; an applied object is left alone.
pub async fn reconcile(
    obj: Arc<RunCancellation>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
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
    let outcome = ctx
        .store
        .runs()
        .cancel(
            &ns,
            &obj.spec.run_id,
            obj.spec.reason.as_deref(),
            &cancelled_by(&obj),
            ctx.now(),
        )
        .await;
    let (status, action) = match outcome {
        Ok(done) => {
            tracing::info!(
                namespace = ns,
                run = obj.spec.run_id,
                newly = done.newly_cancelled,
                "run cancelled"
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
    let api: Api<RunCancellation> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({ "status": status })),
    )
    .await?;
    Ok(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_valid_deterministic_and_distinct() {
        let a = object_name("Session_42/Å");
        assert_eq!(a, object_name("Session_42/Å"));
        assert!(a.starts_with("cancel-session-42-"), "{a}");
        assert_ne!(object_name("run-1"), object_name("run_1"));
        assert!(object_name("////").starts_with("cancel-"));
        for name in [a, object_name(&"x".repeat(300))] {
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            );
            assert!(!name.ends_with('-'));
        }
    }
}
