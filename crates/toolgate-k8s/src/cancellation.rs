//! `RunCancellation`: how a platform team stops an agent's run with kubectl.
//! The custom resource; the controller's reconciler records it.
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

use kube::{CustomResource, KubeSchema, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// The run id the agent sends as `run_id` (ASCII letters are
    /// case-folded: `Run-1` cancels `run-1`).
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$")
    )]
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
    crate::names::cancellation_name(run_id)
}
