//! `RunCancellation`: how a platform team stops an agent's run with kubectl.
//! The custom resource; the controller's reconciler records it.
//!
//! Creating one (`kubectl toolgate cancel RUN -n NAMESPACE`) asks the
//! controller to write the cancellation into the database for the run of
//! that namespace's tenant; from then on every sidecar refuses the run's
//! calls with `run_cancelled`, and its pending approvals are cancelled. A
//! run id is the agent's to choose, so `scope` can name a wider stop the
//! agent cannot step around: every run of one pod, of one profile, or of
//! the whole namespace (`kubectl toolgate cancel --pod NAME`, `--profile
//! NAME`, `--all`). The object's namespace is the tenant, so RBAC on
//! `runcancellations` in a namespace is exactly the right to stop that
//! namespace's runs. The spec is immutable; the status says when the
//! cancellation was recorded.

// Each `printcolumn(...)` repeats `type_`; clippy reads them as duplicates
// of one attribute.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_policy::{PolicyError, RunId, Scope, ScopeKind, Stop};

/// Phase once the cancellation is in the database.
pub const PHASE_APPLIED: &str = "Applied";
/// Phase while the database refuses it (retried).
pub const PHASE_FAILED: &str = "Failed";

/// Stops one run of an agent in this namespace: every sidecar refuses the
/// run's further calls and its pending approvals are cancelled. Open intents
/// are kept for resume; nothing is replayed.
#[derive(
    CustomResource, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema,
)]
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
        name = "Scope",
        type_ = "string",
        json_path = ".spec.scope",
        description = "run (the default), pod, profile or namespace"
    ),
    printcolumn(
        name = "Run",
        type_ = "string",
        json_path = ".spec.runId",
        description = "The cancelled run"
    ),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.target",
        description = "The cancelled pod or profile"
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
#[x_kube(validation = Rule::new("has(self.runId) == (!has(self.scope) || self.scope == 'run')").message("runId names the run of scope run (the default), and only of it"))]
#[x_kube(validation = Rule::new("has(self.target) == (has(self.scope) && (self.scope == 'pod' || self.scope == 'profile'))").message("target names the pod or profile of scopes pod and profile, and only of them"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCancellationSpec {
    /// What stops: `run` (the default, one run by `runId`), `pod` or
    /// `profile` (every run of the pod or profile `target` names) or
    /// `namespace` (every run of this namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ScopeKind>,
    /// The run id the agent sends as `run_id` (ASCII letters are
    /// case-folded: `Run-1` cancels `run-1`), for scope `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$")
    )]
    pub run_id: Option<String>,
    /// The pod or profile name, for scopes `pod` and `profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")
    )]
    pub target: Option<String>,
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

impl RunCancellationSpec {
    /// The stop this spec names, or why it names none (the API server's
    /// rules refuse the same specs; this is the check for objects that got
    /// in before them).
    pub fn stop(&self) -> Result<Stop, PolicyError> {
        match self.scope.unwrap_or(ScopeKind::Run) {
            ScopeKind::Run => match (&self.run_id, &self.target) {
                (Some(run), None) => Ok(Stop::Run(RunId::parse(run)?)),
                _ => Err(PolicyError::InvalidScope {
                    message: "scope run needs runId and no target".into(),
                }),
            },
            kind if self.run_id.is_some() => Err(PolicyError::InvalidScope {
                message: format!("scope {} takes no runId", kind.as_str()),
            }),
            kind => Ok(Stop::Scope(Scope::parse(
                kind.as_str(),
                self.target.as_deref(),
            )?)),
        }
    }

    /// The spec that names `stop`.
    pub fn of(stop: &Stop, reason: Option<String>) -> Self {
        let (scope, run_id, target) = match stop {
            Stop::Run(run) => (None, Some(run.to_string()), None),
            Stop::Scope(Scope::Namespace) => (Some(ScopeKind::Namespace), None, None),
            Stop::Scope(s) => (Some(s.kind()), None, Some(s.target().to_owned())),
        };
        Self {
            scope,
            run_id,
            target,
            reason,
        }
    }
}

/// Object name `kubectl toolgate cancel` uses for `stop`: deterministic, so
/// cancelling twice finds the first request. A scope's key holds a `/`,
/// which no run id does, so a run and a scope never share a name.
pub fn stop_object_name(stop: &Stop) -> String {
    match stop {
        Stop::Run(run) => object_name(run.as_str()),
        Stop::Scope(s) => object_name(&format!("{}/{}", s.kind().as_str(), s.target())),
    }
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
