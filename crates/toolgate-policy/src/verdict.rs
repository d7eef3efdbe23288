//! Typed verdicts: what was decided, why, and under which policy.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{Enforcement, Risk};

crate::wire_enum! {
    /// The three possible answers to a tool call.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum Decision {
        /// The call may run.
        Allow = "allow",
        /// The call must not run.
        Deny = "deny",
        /// The call may run only after a human approves it.
        Escalate = "escalate",
    }
}

// The one set of answers a human gives to an escalation or a grant: the
// store's rows, the Approval CRD's `spec.decision` (its schema is derived
// from this type), the webhook and the controller all read it. The doc line
// below is the CRD field's description.
crate::wire_enum! {
    /// Why a verdict was reached. Closed: dashboards and tests can rely on it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum Reason {
        /// No `spec.effects` entry for the tool after alias resolution.
        UnknownTool = "unknown_tool",
        /// A hardline command glob matched.
        HardlineCommand = "hardline_command",
        /// A hardline path glob matched.
        HardlinePath = "hardline_path",
        /// A path argument climbs above where it starts (`../x`, `/..`)
        /// once normalized (see [`crate::paths`]).
        PathEscapes = "path_escapes",
        /// A path argument holds a NUL character, or a value that is no
        /// path (a number, an object).
        PathInvalid = "path_invalid",
        /// A literal-IP network target fell inside a hardline CIDR.
        HardlineCidr = "hardline_cidr",
        /// A network target named a hostname outside `egress.allowHosts`.
        EgressHostNotAllowed = "egress_host_not_allowed",
        /// A network tool gave no usable `url` or `host` argument.
        NetworkTargetInvalid = "network_target_invalid",
        /// A URL or host argument can be read as more than one target
        /// (userinfo, a backslash, whitespace, percent-encoding, a non-canonical
        /// address or name; see [`crate::network`]).
        UrlAmbiguous = "url_ambiguous",
        /// A URL's scheme is neither `http`, `https` nor one of
        /// `egress.allowSchemes`.
        UrlSchemeNotAllowed = "url_scheme_not_allowed",
        /// The call's array arguments expand to more match texts than
        /// [`crate::args::MAX_MATCH_TEXTS`].
        TooManyValues = "too_many_values",
        /// The profile allows every remaining call.
        ModeAllowAll = "mode_allow_all",
        /// The profile denies every call.
        ModeDenyAll = "mode_deny_all",
        /// A command contained shell-control syntax in rules mode.
        ShellControl = "shell_control",
        /// A deny-tier glob matched.
        DenyRule = "deny_rule",
        /// An allow-tier glob matched.
        AllowRule = "allow_rule",
        /// An escalate-tier glob matched.
        EscalateRule = "escalate_rule",
        /// No glob matched: default deny.
        NoMatchingRule = "no_matching_rule",
        /// A standing grant allowed a call that would otherwise escalate.
        ApprovedByGrant = "approved_by_grant",
        /// A human approved this exact call (issued by the sidecar).
        Approved = "approved",
        /// A human denied this exact call (issued by the sidecar).
        ApprovalDenied = "approval_denied",
        /// No valid bundle is loaded (issued by the sidecar).
        NoBundle = "no_bundle",
        /// The held bundle is past its `expiresAt` (issued by the sidecar).
        BundleExpired = "bundle_expired",
        /// The decision could not be durably recorded (issued by the sidecar).
        AuditUnavailable = "audit_unavailable",
        /// The tool's definition is not the one the profile pinned (issued by
        /// the sidecar for gateway calls).
        ToolDefinitionChanged = "tool_definition_changed",
        /// One of the run's budgets is used up (issued by the sidecar).
        BudgetExhausted = "budget_exhausted",
        /// The run was cancelled (issued by the sidecar).
        RunCancelled = "run_cancelled",
        /// A flow rule denied the call: the run carries labels (from what
        /// it touched before) that the rule forbids this call with.
        FlowRule = "flow_rule",
        /// A flow rule asks a human about a call that would otherwise be
        /// allowed, because of the labels the run carries.
        FlowEscalate = "flow_escalate",
        /// An MCP tool the server did not announce in a listing the gateway
        /// read (issued by the gateway).
        ToolNotListed = "tool_not_listed",
        /// An MCP call's arguments do not fit the tool's announced
        /// `inputSchema` (issued by the gateway).
        InvalidArguments = "invalid_arguments",
        /// A message that cannot be decided as sent: a `tools/call` without a
        /// name, routing headers that contradict the body, a cursor the
        /// server never returned (issued by the gateway).
        RequestMalformed = "request_malformed",
        /// The MCP upstream fails the egress rules, or resolves to a
        /// hardline address (issued by the gateway).
        UpstreamNotAllowed = "upstream_not_allowed",
        /// The workspace refused the path or file (an escape, a link swapped
        /// in, a hard link, a FIFO; the check names it) (issued by the
        /// sidecar).
        WorkspaceRefused = "workspace_refused",
        /// The profile or tool runs in `warn` or `dryRun` mode: the call is
        /// allowed and the verdict's `would_*` fields say what enforcement
        /// would have answered.
        NotEnforced = "not_enforced",
    }
}

impl Reason {
    /// Reasons of refusals made at an edge (the MCP gateway, the
    /// workspace) rather than by the policy: each is recorded as a denial
    /// with the check that refused (`Gate::refuse`).
    pub const EDGE: [Reason; 6] = [
        Self::ToolNotListed,
        Self::InvalidArguments,
        Self::RequestMalformed,
        Self::UpstreamNotAllowed,
        Self::WorkspaceRefused,
        Self::ToolDefinitionChanged,
    ];

    /// The verdict this reason comes with: each reason belongs to exactly one.
    pub fn decision(self) -> Decision {
        match self {
            Self::ModeAllowAll
            | Self::AllowRule
            | Self::ApprovedByGrant
            | Self::Approved
            | Self::NotEnforced => Decision::Allow,
            Self::EscalateRule | Self::FlowEscalate => Decision::Escalate,
            _ => Decision::Deny,
        }
    }

    /// The policy's own verdict for an answer `given` with this reason: an
    /// escalation a person or a standing grant answered (`approved`,
    /// `approval_denied`, `approved_by_grant`) is the escalation it was.
    /// What replay and shadow mode compare.
    pub fn judged_decision(self, given: Decision) -> Decision {
        match self {
            Self::Approved | Self::ApprovalDenied | Self::ApprovedByGrant => Decision::Escalate,
            _ => given,
        }
    }
}

impl Reason {
    /// Reasons that bind in every enforcement mode: hardline rules, paths
    /// that cannot be normalized, unknown tools, a changed tool definition, a human's denial, a cancelled run,
    /// and the sidecar's own fail-closed answers (no bundle, expired
    /// bundle, audit unavailable). `warn` and `dryRun` never soften them.
    pub fn always_enforced(self) -> bool {
        matches!(
            self,
            Self::UnknownTool
                | Self::HardlineCommand
                | Self::HardlinePath
                | Self::PathEscapes
                | Self::PathInvalid
                | Self::HardlineCidr
                | Self::UrlAmbiguous
                | Self::UrlSchemeNotAllowed
                | Self::TooManyValues
                | Self::ToolDefinitionChanged
                | Self::ToolNotListed
                | Self::InvalidArguments
                | Self::RequestMalformed
                | Self::UpstreamNotAllowed
                | Self::WorkspaceRefused
                | Self::ApprovalDenied
                | Self::RunCancelled
                | Self::NoBundle
                | Self::BundleExpired
                | Self::AuditUnavailable
        )
    }
}

/// The one rule for intents: an allowed high-risk call must have its intent
/// durably recorded before it runs. Every verdict, whoever issues or
/// changes it (evaluator, enforcement mode, the sidecar's approvals and
/// refusals), sets `intent_required` through here.
pub fn intent_required(decision: Decision, risk: Risk) -> bool {
    decision == Decision::Allow && risk == Risk::High
}

fn enforced_default() -> bool {
    true
}

/// The answer to one call, bound to the exact arguments it was asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// allow, deny or escalate.
    pub verdict: Decision,
    /// Why.
    pub reason: Reason,
    /// `{tier}:{tool}:{glob}` of the deciding rule, when a rule decided.
    pub matched_rule: Option<String>,
    /// Content address of the policy that decided.
    pub policy_version: String,
    /// Risk class of the tool (`high` for unknown tools).
    pub risk: Risk,
    /// True when the call is allowed and high risk: an intent must be recorded first.
    pub intent_required: bool,
    /// `sha256:` digest of the canonical arguments the verdict applies to.
    pub args_digest: String,
    /// `sha256:` digest of the canonical `{tool, action, arguments}` (see
    /// [`crate::call_digest`]): what approvals and intents are bound to.
    pub call_digest: String,
    /// False when the verdict only reports: the tool's enforcement mode is
    /// `warn` or `dryRun`, so the call is allowed and `would_*` say what
    /// `enforce` would have answered.
    #[serde(default = "enforced_default")]
    pub enforced: bool,
    /// What enforcement would have answered (when `enforced` is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_verdict: Option<Decision>,
    /// Why (when `enforced` is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_reason: Option<Reason>,
    /// The rule that would have decided (when `enforced` is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_rule: Option<String>,
    /// In `warn` mode, a one-line notice for the agent's operator when
    /// enforcement would not have allowed the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl Verdict {
    /// This verdict as `mode` answers it. Under `warn` and `dryRun` a
    /// verdict whose reason is not [`Reason::always_enforced`] becomes an
    /// allow (`not_enforced`) that carries the original as `would_*`; an
    /// allowed high-risk call still needs its intent. `enforce` changes
    /// nothing, and neither does applying a mode twice.
    pub fn under(mut self, mode: Enforcement) -> Self {
        if mode == Enforcement::Enforce || !self.enforced || self.reason.always_enforced() {
            return self;
        }
        let (verdict, reason, rule) = (self.verdict, self.reason, self.matched_rule.take());
        if mode == Enforcement::Warn && verdict != Decision::Allow {
            self.warning = Some(match &rule {
                Some(rule) => format!(
                    "not enforced (warn): would {} ({}, rule {rule})",
                    verdict.as_str(),
                    reason.as_str()
                ),
                None => format!(
                    "not enforced (warn): would {} ({})",
                    verdict.as_str(),
                    reason.as_str()
                ),
            });
        }
        self.enforced = false;
        self.would_verdict = Some(verdict);
        self.would_reason = Some(reason);
        self.would_rule = rule;
        self.set_reason(Reason::NotEnforced);
        self
    }

    /// What the policy judged, whatever the enforcement mode: for a call
    /// only reported (`warn`, `dryRun`) the verdict, reason and rule
    /// enforcement would have answered, else the verdict itself; an
    /// answered escalation as the escalation ([`Reason::judged_decision`]).
    /// What replay and shadow mode compare.
    pub fn judged(&self) -> (Decision, Reason, Option<&str>) {
        let (verdict, reason, rule) = match (self.enforced, self.would_verdict, self.would_reason) {
            (false, Some(verdict), Some(reason)) => (verdict, reason, self.would_rule.as_deref()),
            _ => (self.verdict, self.reason, self.matched_rule.as_deref()),
        };
        (reason.judged_decision(verdict), reason, rule)
    }

    /// Answers with `reason` and the verdict it belongs to (see
    /// [`Reason::decision`]), re-deriving `intent_required` from the
    /// [`intent_required`] rule. Rule, digests and risk are left as they are.
    pub fn set_reason(&mut self, reason: Reason) {
        self.verdict = reason.decision();
        self.reason = reason;
        self.intent_required = intent_required(self.verdict, self.risk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_reasons_are_distinct_and_round_trip() {
        let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        for r in Reason::ALL {
            let back: Reason = serde_json::from_value(serde_json::json!(r.as_str())).unwrap();
            assert_eq!(back, r);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len());
    }

    /// Serde's name of every variant is its `as_str` (both come from one
    /// table, see [`crate::wire_enum`]); this guards the macro itself.
    #[test]
    fn serde_names_are_the_wire_names() {
        for d in Decision::ALL {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
            assert_eq!(Decision::from_wire(d.as_str()), Some(d));
        }
        for r in Reason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }

    #[test]
    fn intent_is_required_only_for_allowed_high_risk_calls() {
        for d in Decision::ALL {
            for r in Risk::ALL {
                assert_eq!(
                    intent_required(d, r),
                    d == Decision::Allow && r == Risk::High
                );
            }
        }
    }

    #[test]
    fn each_reason_has_its_verdict() {
        assert_eq!(Reason::Approved.decision(), Decision::Allow);
        assert_eq!(Reason::EscalateRule.decision(), Decision::Escalate);
        assert_eq!(Reason::HardlinePath.decision(), Decision::Deny);
        assert_eq!(Reason::AuditUnavailable.decision(), Decision::Deny);
        assert_eq!(Reason::NotEnforced.decision(), Decision::Allow);
        assert_eq!(Reason::BudgetExhausted.decision(), Decision::Deny);
        assert_eq!(Reason::RunCancelled.decision(), Decision::Deny);
    }
}
