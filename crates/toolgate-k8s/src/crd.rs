//! The two custom resources, `PolicyProfile` and `Approval`, as Rust types.
//!
//! The CRD manifests under `crds/` are generated from these types
//! ([`crdgen`](crate::crdgen)); a test fails when the committed files drift.
//!
//! `PolicyProfileSpec` is [`toolgate_policy::PolicySpec`] itself (a
//! transparent newtype, so the CRD schema is generated from the policy
//! crate's own field docs): whatever `toolgate check` accepts from a file the
//! cluster accepts as a resource, with one definition of the fields.

// Each `printcolumn(...)` repeats `type_`/`priority`; clippy reads them as
// duplicates of one attribute.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_policy::{Grant, PolicySpec};

pub use crate::escalation::{Escalation, FlowLabelCause, PastDecision};

/// API group of every toolgate resource.
pub const GROUP: &str = "toolgate.dev";
/// API version of every toolgate resource.
pub const VERSION: &str = "v1alpha1";

/// One named policy: what an agent's tools may do, enforced by the sidecar
/// of every pod that selects this profile.
///
/// The controller validates the spec, compiles in the profile's standing
/// grants, signs the result and publishes it as ConfigMap
/// `toolgate-bundle-<name>` (key `bundle.json`, a DSSE envelope).
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "toolgate.dev",
    version = "v1alpha1",
    kind = "PolicyProfile",
    namespaced,
    shortname = "tgp",
    category = "toolgate",
    status = "PolicyProfileStatus",
    doc = "A toolgate policy profile: rules, hardline, egress and tool effects, published as a signed bundle.",
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.version",
        description = "Policy version of the published bundle"
    ),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status",
        description = "Whether the spec compiles (False: the last good bundle is still served)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether a valid signed bundle is published"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.enforcement",
        description = "Enforcement mode (enforce, warn or dryRun)"
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.fleet.current",
        description = "Pods enforcing the current version"
    ),
    printcolumn(
        name = "Stale",
        type_ = "integer",
        json_path = ".status.fleet.stale",
        description = "Pods not enforcing the current version"
    ),
    printcolumn(
        name = "Candidate",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"CandidateDisagrees\")].reason",
        description = "What the shadowed candidate did: Disagrees, Agrees, CandidateNotFound or CandidateInvalid",
        priority = 1
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].message",
        description = "Why the spec was rejected, when it was"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.approvals) || self.approvals.ttlSeconds > 0",
    "message": "approvals.ttlSeconds must be positive"
}]))]
#[serde(transparent)]
pub struct PolicyProfileSpec(pub PolicySpec);

impl std::ops::Deref for PolicyProfileSpec {
    type Target = PolicySpec;

    fn deref(&self) -> &PolicySpec {
        &self.0
    }
}

impl std::ops::DerefMut for PolicyProfileSpec {
    fn deref_mut(&mut self) -> &mut PolicySpec {
        &mut self.0
    }
}

impl From<PolicyProfileSpec> for PolicySpec {
    fn from(s: PolicyProfileSpec) -> Self {
        s.0
    }
}

impl From<PolicySpec> for PolicyProfileSpec {
    fn from(s: PolicySpec) -> Self {
        PolicyProfileSpec(s)
    }
}

/// What the controller last published for a profile, and how the fleet follows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyProfileStatus {
    /// Policy version of the published bundle: `{profile}@{sha12}+h{sha8}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of the published bundle document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_digest: Option<String>,
    /// Name of the ConfigMap (same namespace) holding the bundle under key `bundle.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_ref: Option<String>,
    /// Publication sequence of the bundle; grows with every publication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// When the published bundle was signed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<String>,
    /// After this instant (RFC 3339) the published bundle authorizes nothing; the controller re-signs well before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Number of standing grants compiled into the published bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<u32>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Pods reporting heartbeats for this profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetStatus>,
    /// What `toolgate analyze`'s admission checks found in the spec of
    /// `observedGeneration` (shadowed or redundant globs, unused tools…),
    /// worded as the webhook's admission warnings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The candidate this profile shadows (`spec.candidate`) and how often
    /// it decided otherwise, as the fleet's sidecars report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CandidateStatus>,
    /// `Valid` (the spec compiles), `Ready` (a signed bundle is published),
    /// `Stale` (some pods lag) and, with a candidate, `CandidateDisagrees`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// How many sidecars enforce the current version of a profile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    /// Pods running the current version and seen in the last 60 seconds.
    pub current: u32,
    /// Pods running another version or not seen for 60 seconds.
    pub stale: u32,
    /// Every pod that has reported a heartbeat for this profile.
    pub total: u32,
}

/// What a profile's shadowed candidate decided, summed over the latest
/// heartbeat of each pod that enforces the current version beside this
/// candidate version. A pod counts from when it loaded the bundle, so this
/// is a sample of live traffic; `toolgate audit log --shadow-changed` lists
/// every call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CandidateStatus {
    /// The candidate PolicyProfile (`spec.candidate.profile`).
    pub profile: String,
    /// Its policy version signed into the bundle; absent when it could not
    /// be (see the `CandidateDisagrees` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Calls the candidate decided beside the active policy.
    pub shadowed: u64,
    /// Of those, the calls it decided otherwise.
    pub disagreements: u64,
    /// The most frequent disagreements, most frequent first (at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transitions: Vec<CandidateTransition>,
    /// When these counts were read from the heartbeats (RFC 3339). They are
    /// read again at most once per fleet refresh, unless the candidate
    /// starts or stops disagreeing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_at: Option<String>,
}

/// How many calls the active policy decided `from` and the candidate `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CandidateTransition {
    /// The active policy's verdict.
    pub from: String,
    /// The candidate's verdict.
    pub to: String,
    /// Calls.
    pub count: u64,
}

/// A status condition in the usual Kubernetes shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type: `Valid`, `Ready`, `Stale` or `CandidateDisagrees` (profiles), `Resolved` (approvals).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable PascalCase reason, e.g. `Compiled`, `InvalidSpec`, `Published`.
    pub reason: String,
    /// Human-readable detail; for an invalid spec, the policy error code and field.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The condition types of a PolicyProfile's status. `Condition::type_`
/// stays a string on the wire (the CRD schema is the usual Kubernetes
/// shape); code compares through this enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The spec compiles.
    Valid,
    /// A signed bundle is published (maybe the last good one).
    Ready,
    /// Some pods do not run the current version.
    Stale,
    /// The shadowed candidate decided some calls otherwise (`Unknown`:
    /// it could not be signed into the bundle).
    CandidateDisagrees,
}

impl ConditionType {
    /// Wire name, the `type` of the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Valid => "Valid",
            ConditionType::Ready => "Ready",
            ConditionType::Stale => "Stale",
            ConditionType::CandidateDisagrees => "CandidateDisagrees",
        }
    }
}

impl Condition {
    /// Whether this condition is of type `type_`.
    pub fn is(&self, type_: ConditionType) -> bool {
        self.type_ == type_.as_str()
    }
}

impl PolicyProfileStatus {
    /// The condition of type `type_`, if the status has one.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.is(type_))
    }
}

/// A human's answer to an approval: the policy crate's one set, which the
/// store, the webhook and the controller share.
pub use toolgate_policy::ApprovalDecision as Decision;

/// Either the answer to one escalated tool call (`request`) or a standing
/// grant (`grant`) compiled into a profile's next bundle.
///
/// Requests are created by the controller from the approvals database; a
/// human answers by setting `spec.decision` (`kubectl toolgate approve NAME`).
/// The decision cannot be changed once set.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "toolgate.dev",
    version = "v1alpha1",
    kind = "Approval",
    namespaced,
    shortname = "tga",
    category = "toolgate",
    status = "ApprovalStatus",
    doc = "A toolgate approval: the answer to one escalated tool call, or a standing grant for a profile.",
    printcolumn(
        name = "Tool",
        type_ = "string",
        json_path = ".status.tool",
        description = "Tool the approval is for"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Approved, Denied, Expired or Cancelled"
    ),
    printcolumn(
        name = "Preview",
        type_ = "string",
        json_path = ".spec.request.preview",
        description = "What the call would do (masked, at most 512 characters)"
    ),
    printcolumn(
        name = "Requested By",
        type_ = "string",
        json_path = ".status.requestedBy",
        description = "Who asked (tenant or sidecar)"
    ),
    printcolumn(
        name = "Decided By",
        type_ = "string",
        json_path = ".spec.decidedBy",
        description = "Who approved or denied it"
    ),
    printcolumn(
        name = "Expires",
        type_ = "date",
        json_path = ".status.expiresAt",
        description = "When the request stops being answerable, or the grant stops applying"
    ),
    printcolumn(
        name = "Profile",
        type_ = "string",
        json_path = ".status.profile",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("has(self.request) != has(self.grant)").message("exactly one of spec.request and spec.grant must be set"))]
#[x_kube(validation = Rule::new("has(self.request) == has(oldSelf.request) && has(self.grant) == has(oldSelf.grant)").message("an Approval stays a request or a grant: spec.request and spec.grant cannot be added or removed"))]
#[x_kube(validation = Rule::new("!has(oldSelf.decision) || (has(self.decision) && self.decision == oldSelf.decision)").message("spec.decision cannot be changed once set"))]
#[x_kube(validation = Rule::new("has(self.decision) || !has(self.decidedBy)").message("spec.decidedBy needs spec.decision"))]
#[x_kube(validation = Rule::new("has(self.decision) || !has(self.decidedByGroups)").message("spec.decidedByGroups needs spec.decision"))]
#[x_kube(validation = Rule::new("!has(oldSelf.decidedBy) || (has(self.decidedBy) && self.decidedBy == oldSelf.decidedBy)").message("spec.decidedBy cannot be changed once set"))]
#[x_kube(validation = Rule::new("!has(oldSelf.decision) || has(self.decidedByGroups) == has(oldSelf.decidedByGroups)").message("spec.decidedByGroups cannot be changed once decided"))]
#[x_kube(validation = Rule::new("!has(oldSelf.decidedByGroups) || (has(self.decidedByGroups) && self.decidedByGroups == oldSelf.decidedByGroups)").message("spec.decidedByGroups cannot be changed once set"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalSpec {
    /// The escalated call this approval answers (set by the controller from the database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.request is immutable"))]
    pub request: Option<ApprovalRequest>,
    /// A standing grant: lets matching calls that the profile would escalate through without asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<StandingGrant>,
    /// `approved` or `denied`, set by a human; immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Why the decision was made (recorded with the decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided: the username the API server authenticated when the
    /// decision was written (the validating webhook refuses any other
    /// value); immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub decided_by: Option<String>,
    /// Groups of the decider that count for `group:` approvers: a subset of
    /// the groups the API server authenticated when the decision was
    /// written (the webhook refuses others); immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(max = 256)))]
    pub decided_by_groups: Option<Vec<String>>,
}

/// One escalated tool call waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRequest {
    /// Approval id in the toolgate database.
    pub approval_id: String,
    /// Tenant the call ran for; approvals are tenant-scoped.
    pub tenant: String,
    /// Id of the tool invocation waiting for the answer.
    pub invocation_id: String,
    /// Canonical tool name.
    pub tool: String,
    /// Digest of the exact call arguments the answer binds to.
    pub args_digest: String,
    /// Digest of the whole call (tool, action and arguments) the answer binds to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_digest: Option<String>,
    /// The call's action, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// What the call would do: its match text, at most 512 characters, with
    /// secret-looking values masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Agent run the call belongs to.
    pub run_id: String,
    /// Policy version that escalated the call.
    pub policy_version: String,
    /// Profile that escalated the call (the prefix of the policy version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Who asked (the sidecar's identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Why the call was escalated, from the decision log (absent when the
    /// escalating decision's record was not found in time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
}

/// A standing grant for one profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StandingGrant {
    /// Name of the PolicyProfile (same namespace) whose bundle includes the grant.
    pub profile: String,
    /// Canonical tool name the grant covers.
    pub tool: String,
    /// Glob on the tool's match text (fnmatch-style; `*` also matches `/`).
    pub glob: String,
    /// Subjects (tenants) the grant applies to; `"*"` means every subject.
    #[schemars(length(min = 1))]
    pub subjects: Vec<String>,
    /// RFC 3339 instant after which the grant no longer applies.
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
}

impl StandingGrant {
    /// The grant as the policy crate compiles it.
    pub fn to_policy_grant(&self) -> Grant {
        Grant {
            tool: self.tool.clone(),
            glob: self.glob.clone(),
            subjects: self.subjects.clone(),
            expires_at: self.expires_at.clone(),
        }
    }
}

/// Lifecycle of an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Waiting for a human (requests) or for a decision (grants).
    Pending,
    /// Approved: the call may proceed once, or the grant is active.
    Approved,
    /// Denied.
    Denied,
    /// Nobody answered in time, or the grant's `expiresAt` passed.
    Expired,
    /// The request's run was cancelled before anyone answered.
    Cancelled,
}

impl Phase {
    /// Every phase, in lifecycle order (the `phase` label values of
    /// `toolgate_approvals`).
    pub const ALL: [Phase; 5] = [
        Phase::Pending,
        Phase::Approved,
        Phase::Denied,
        Phase::Expired,
        Phase::Cancelled,
    ];

    /// Wire name, also the `phase` label of `toolgate_approvals`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Approved => "Approved",
            Phase::Denied => "Denied",
            Phase::Expired => "Expired",
            Phase::Cancelled => "Cancelled",
        }
    }
}

/// The phase of an approval is its status, spelled as Kubernetes spells
/// phases: one set, the contract's, with one mapping, here.
impl From<toolgate_contract::ApprovalStatus> for Phase {
    fn from(status: toolgate_contract::ApprovalStatus) -> Self {
        use toolgate_contract::ApprovalStatus as S;
        match status {
            S::Pending => Phase::Pending,
            S::Approved => Phase::Approved,
            S::Denied => Phase::Denied,
            S::Expired => Phase::Expired,
            S::Cancelled => Phase::Cancelled,
        }
    }
}

/// Where an approval stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStatus {
    /// `Pending`, `Approved`, `Denied`, `Expired` or `Cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Tool the approval is for (copied from the request or grant for display).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Who asked (requests) or which profile the grant is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Profile the approval belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// When the request stops being answerable, or the grant stops applying (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the approval left `Pending` (RFC 3339); the object is deleted a
    /// retention period later (`spec.approvals.retentionSeconds` of its profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// What the controller did last, in words (e.g. why a decision was not recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[cfg(test)]
mod phase_tests {
    use super::Phase;

    #[test]
    fn phases_are_the_contracts_statuses() {
        for status in toolgate_contract::ApprovalStatus::ALL {
            let phase = Phase::from(status);
            assert_eq!(phase.as_str().to_ascii_lowercase(), status.as_str());
        }
        assert_eq!(
            Phase::ALL.len(),
            toolgate_contract::ApprovalStatus::ALL.len()
        );
    }
}
