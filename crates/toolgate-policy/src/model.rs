//! The PolicyProfile data model, exactly as users write it.
//!
//! Every struct rejects unknown fields and every enum is closed, so a typo in
//! a manifest is an error rather than a silently ignored rule.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group and version every toolgate manifest carries.
pub const API_VERSION: &str = "toolgate.dev/v1alpha1";
/// Kind of a policy manifest.
pub const KIND: &str = "PolicyProfile";

/// A PolicyProfile manifest as read from a file (`kubectl apply` shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyManifest {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Name (and optional namespace) of the profile.
    pub metadata: ManifestMetadata,
    /// The policy itself.
    pub spec: PolicySpec,
}

/// The subset of Kubernetes object metadata a profile file may carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestMetadata {
    /// Profile name; becomes the prefix of the policy version.
    pub name: String,
    /// Namespace the profile lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels, kept for round-tripping manifests; they carry no policy meaning.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations, kept for round-tripping manifests; no policy meaning.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The body of a PolicyProfile: what is allowed, denied or escalated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    /// How calls that pass the hardline and egress checks are decided:
    /// `allowAll`, `denyAll` or `rules` (deny, allow and escalate tiers; default deny).
    pub mode: Mode,
    /// Alternative tool names mapped to their canonical name (e.g. `bash_tool: bash`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aliases: BTreeMap<String, String>,
    /// Per-tool rule tiers (`deny`, `allow`, `escalate` glob lists); the key `"*"` applies to every tool.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<String, RuleTiers>,
    /// Rules nothing overrides, in every mode: command globs, path globs and literal CIDRs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardline: Option<Hardline>,
    /// Hostname globs network tools may name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// Side-effect class and risk of every tool; every tool the rules or aliases name needs an entry.
    #[serde(default)]
    pub effects: BTreeMap<String, ToolEffect>,
    /// How escalations are answered: time to live and who may approve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalSettings>,
    /// `enforce` (default), `warn` or `dryRun`: whether verdicts bind or are
    /// only reported. Hardline rules and unknown tools bind in every mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// Per-run limits (`maxCallsPerRun`, `maxHighRiskCallsPerRun`,
    /// `maxRunSeconds`), counted in the shared database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Budgets>,
    /// Labels a run picks up from what it touches, and rules that deny or
    /// escalate calls of a run carrying them (docs/policy.md, "Flow rules").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<crate::flows::Flows>,
    /// What the decision log keeps of each call besides its digests
    /// (`recordInputs`, `inputRetention`), for `toolgate replay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::audit::AuditSettings>,
    /// Another PolicyProfile of the same namespace to shadow: the controller
    /// signs its spec into this profile's bundle as the candidate, which
    /// sidecars evaluate beside this spec on every call and never enforce.
    /// It does not change this profile's version. Outside Kubernetes (a
    /// profile file) use `toolgate bundle build --candidate FILE` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CandidateRef>,
}

/// The profile a PolicyProfile shadows ([`PolicySpec::candidate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CandidateRef {
    /// Name of the candidate PolicyProfile, in this profile's namespace.
    pub profile: String,
}

crate::wire_enum! {
    /// Whether a profile's verdicts bind. Lets a new or stricter profile run
    /// against real traffic first, as admission policies do (`Audit`, `dryrun`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum Enforcement {
        /// Verdicts bind.
        #[default]
        Enforce = "enforce",
        /// Every call is allowed; what would have been decided is reported, and
        /// a non-allow would-verdict carries a warning clients show.
        Warn = "warn",
        /// Every call is allowed; what would have been decided is only recorded.
        DryRun = "dryRun",
    }
}

/// Limits on one run (one `run_id`) of an agent. Each is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budgets {
    /// Allowed calls a run may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls_per_run: Option<u64>,
    /// Allowed `high`-risk calls a run may make (0 forbids them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_high_risk_calls_per_run: Option<u64>,
    /// Seconds after a run's first allowed call during which it may make more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_seconds: Option<u64>,
    /// Limits on every call of one pod, whatever run ids its agent uses: a
    /// run id is the agent's to choose, so per-run budgets alone can be
    /// stepped around by starting new runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_pod: Option<PodBudgets>,
}

/// Limits on one pod (one sidecar instance, by pod name) across all its runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodBudgets {
    /// Allowed calls the pod may make, over all its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u64>,
    /// Allowed `high`-risk calls the pod may make (0 forbids them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_high_risk_calls: Option<u64>,
}

impl Budgets {
    /// True when no limit is set: runs need no counting.
    pub fn is_unlimited(&self) -> bool {
        self.max_calls_per_run.is_none()
            && self.max_high_risk_calls_per_run.is_none()
            && self.max_run_seconds.is_none()
            && self
                .per_pod
                .is_none_or(|p| p.max_calls.is_none() && p.max_high_risk_calls.is_none())
    }
}

/// Decision mode of a profile. Closed: an unknown mode is a load error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// Allow every call that passes hardline and egress checks.
    AllowAll,
    /// Deny every call.
    DenyAll,
    /// Decide by the deny, allow and escalate tiers; default deny.
    Rules,
}

/// Three tiers of fnmatch-style globs for one tool, checked deny → allow → escalate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleTiers {
    /// Globs that deny.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Globs that allow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Globs that require a human approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalate: Vec<String>,
}

/// Rules that win over everything else, including `allowAll` and grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hardline {
    /// Globs on the command text of `PROCESS_EXEC` tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Globs on the path arguments of `WORKSPACE_*` tools and of tools
    /// that declare `pathArgs`, matched on the normalized path (no repeated
    /// or trailing `/`, no `.` or `..` segments).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// CIDR ranges that literal-IP targets of `NETWORK_*` tools may not reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidrs: Vec<String>,
}

/// Egress allowlist for network tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Egress {
    /// Hostname globs (e.g. `api.github.com`, `*.example.com`), compared case-insensitively.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// URL schemes network tools may use besides `http` and `https` (e.g.
    /// `wss`); a URL with any other scheme is refused in every mode.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_schemes: Vec<String>,
}

/// What a tool does to the world, and how risky it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolEffect {
    /// The side-effect class; selects which hardline and egress checks apply.
    pub side_effect: SideEffect,
    /// Risk class; `high` calls need a durable intent record before they run.
    pub risk: Risk,
    /// True when the tool never changes anything.
    #[serde(default)]
    pub read_only: bool,
    /// True when the tool may run concurrently with other read-only calls.
    #[serde(default)]
    pub allow_parallel: bool,
    /// Argument names whose values form the text rules match against, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_args: Option<Vec<String>>,
    /// Argument names whose values are paths (a string, or an array of
    /// strings), besides the built-in `path` and `file_path` of workspace
    /// tools: each is normalized before any rule sees it, and
    /// `hardline.paths` applies to it whatever the side effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_args: Option<Vec<String>>,
    /// Argument names whose values are URLs (a string, or an array of
    /// strings), besides the built-in `url` of network tools: each is read
    /// in its one spelling and checked against `hardline.cidrs`,
    /// `egress.allowHosts` and the allowed schemes, whatever the side effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_args: Option<Vec<String>>,
    /// Argument names whose values are hosts (`name`, `name:port`,
    /// `[v6]:port`; a string or an array of strings), besides the built-in
    /// `host` of network tools; checked as `urlArgs` are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_args: Option<Vec<String>>,
    /// For an MCP tool: the `sha256:` digest of its canonical `{name,
    /// description, inputSchema}` as reviewed. A gateway reporting another
    /// definition (a server that changed the tool after review) gets
    /// `tool_definition_changed`, and the tool is not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_digest: Option<String>,
    /// Overrides `spec.enforcement` for this tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
}

/// Side-effect classes of a tool. Closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum SideEffect {
    None,
    WorkspaceRead,
    WorkspaceWrite,
    NetworkRead,
    NetworkWrite,
    ProcessExec,
    ExternalWrite,
}

impl SideEffect {
    /// Tools whose hardline path globs apply.
    pub fn is_workspace(self) -> bool {
        matches!(self, Self::WorkspaceRead | Self::WorkspaceWrite)
    }
    /// Tools whose target is checked against hardline CIDRs and the egress list.
    pub fn is_network(self) -> bool {
        matches!(self, Self::NetworkRead | Self::NetworkWrite)
    }
}

crate::wire_enum! {
    /// Risk classes. Closed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum Risk {
        /// Reads and routine calls: best-effort audit.
        Low = "low",
        /// Reversible writes.
        Write = "write",
        /// Irreversible or destructive: durable intent before execution.
        High = "high",
    }
}

/// How escalations are answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Seconds an approval request stays answerable.
    pub ttl_seconds: u32,
    /// Who may answer escalations and approve standing grants: `user:NAME`
    /// or `group:NAME` entries (a bare name is a user). Empty means anyone
    /// allowed by RBAC to update Approval resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// Seconds a resolved or expired Approval object is kept before the
    /// controller deletes it (default 86400). The database row stays: it is
    /// the audit record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_seconds: Option<u32>,
    /// Where approvers are told about this profile's approvals: every
    /// channel gets every event (requested, decided, expired, cancelled),
    /// at least once, from the controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<NotifyChannel>,
}

/// One place approvers are told about approvals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotifyChannel {
    /// An HTTP(S) endpoint that receives each event as one POST.
    pub webhook: WebhookChannel,
}

/// A webhook channel. Its URL and signing secret are keys of the Secret
/// `toolgate-notify` in the profile's namespace (a Slack incoming-webhook
/// URL is itself a credential): the controller may read that Secret by
/// name and no other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookChannel {
    /// The key of Secret `toolgate-notify` holding the URL.
    pub url_secret_key: String,
    /// `standard` (Standard Webhooks, signed; the default), `slack` or
    /// `cloudevents`.
    #[serde(default)]
    pub format: NotifyFormat,
    /// The key holding the signing secret (`whsec_` + base64, as the
    /// Standard Webhooks libraries make them): required for `standard`,
    /// and signs `cloudevents` too when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret_key: Option<String>,
}

crate::wire_enum! {
    /// How a webhook channel's messages are shaped.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum NotifyFormat {
        /// JSON signed per the Standard Webhooks specification
        /// (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
        #[default]
        Standard = "standard",
        /// A Slack incoming-webhook message (blocks).
        Slack = "slack",
        /// A CloudEvent in structured mode (`application/cloudevents+json`).
        Cloudevents = "cloudevents",
    }
}

impl ApprovalSettings {
    /// Default for [`ApprovalSettings::retention_seconds`].
    pub const DEFAULT_RETENTION_SECONDS: u32 = 86_400;
}

/// A standing grant: lets calls the profile would escalate through without asking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// Canonical tool name the grant covers.
    pub tool: String,
    /// Glob on the tool's match text.
    pub glob: String,
    /// Subjects (tenants) the grant applies to; `"*"` means every subject.
    pub subjects: Vec<String>,
    /// RFC 3339 instant after which the grant no longer applies.
    pub expires_at: String,
}
