//! Typed verdicts: what was decided, why, and under which policy.

use serde::{Deserialize, Serialize};

use crate::model::Risk;

/// The three possible answers to a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call may run.
    Allow,
    /// The call must not run.
    Deny,
    /// The call may run only after a human approves it.
    Escalate,
}

impl Decision {
    /// Lowercase wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Escalate => "escalate",
        }
    }
}

/// Why a verdict was reached. Closed: dashboards and tests can rely on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No `spec.effects` entry for the tool after alias resolution.
    UnknownTool,
    /// A hardline command glob matched.
    HardlineCommand,
    /// A hardline path glob matched.
    HardlinePath,
    /// A literal-IP network target fell inside a hardline CIDR.
    HardlineCidr,
    /// A network target named a hostname outside `egress.allowHosts`.
    EgressHostNotAllowed,
    /// A network tool gave no usable `url` or `host` argument.
    NetworkTargetInvalid,
    /// The profile allows every remaining call.
    ModeAllowAll,
    /// The profile denies every call.
    ModeDenyAll,
    /// A command contained shell-control syntax in rules mode.
    ShellControl,
    /// A deny-tier glob matched.
    DenyRule,
    /// An allow-tier glob matched.
    AllowRule,
    /// An escalate-tier glob matched.
    EscalateRule,
    /// No glob matched: default deny.
    NoMatchingRule,
    /// A standing grant allowed a call that would otherwise escalate.
    ApprovedByGrant,
    /// A human approved this exact call (issued by the sidecar).
    Approved,
    /// A human denied this exact call (issued by the sidecar).
    ApprovalDenied,
    /// No valid bundle is loaded (issued by the sidecar).
    NoBundle,
    /// The held bundle is past its `expiresAt` (issued by the sidecar).
    BundleExpired,
    /// The decision could not be durably recorded (issued by the sidecar).
    AuditUnavailable,
    /// The tool's definition is not the one the profile pinned (issued by
    /// the sidecar for gateway calls).
    ToolDefinitionChanged,
}

impl Reason {
    /// snake_case wire name, also used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::HardlineCommand => "hardline_command",
            Self::HardlinePath => "hardline_path",
            Self::HardlineCidr => "hardline_cidr",
            Self::EgressHostNotAllowed => "egress_host_not_allowed",
            Self::NetworkTargetInvalid => "network_target_invalid",
            Self::ModeAllowAll => "mode_allow_all",
            Self::ModeDenyAll => "mode_deny_all",
            Self::ShellControl => "shell_control",
            Self::DenyRule => "deny_rule",
            Self::AllowRule => "allow_rule",
            Self::EscalateRule => "escalate_rule",
            Self::NoMatchingRule => "no_matching_rule",
            Self::ApprovedByGrant => "approved_by_grant",
            Self::Approved => "approved",
            Self::ApprovalDenied => "approval_denied",
            Self::NoBundle => "no_bundle",
            Self::BundleExpired => "bundle_expired",
            Self::AuditUnavailable => "audit_unavailable",
            Self::ToolDefinitionChanged => "tool_definition_changed",
        }
    }

    /// Every reason, in declaration order (for pre-creating metric series).
    pub const ALL: [Reason; 20] = [
        Self::UnknownTool,
        Self::HardlineCommand,
        Self::HardlinePath,
        Self::HardlineCidr,
        Self::EgressHostNotAllowed,
        Self::NetworkTargetInvalid,
        Self::ModeAllowAll,
        Self::ModeDenyAll,
        Self::ShellControl,
        Self::DenyRule,
        Self::AllowRule,
        Self::EscalateRule,
        Self::NoMatchingRule,
        Self::ApprovedByGrant,
        Self::Approved,
        Self::ApprovalDenied,
        Self::NoBundle,
        Self::BundleExpired,
        Self::AuditUnavailable,
        Self::ToolDefinitionChanged,
    ];

    /// The verdict this reason comes with: each reason belongs to exactly one.
    pub fn decision(self) -> Decision {
        match self {
            Self::ModeAllowAll | Self::AllowRule | Self::ApprovedByGrant | Self::Approved => {
                Decision::Allow
            }
            Self::EscalateRule => Decision::Escalate,
            _ => Decision::Deny,
        }
    }
}

/// The answer to one call, bound to the exact arguments it was asked about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

    #[test]
    fn each_reason_has_its_verdict() {
        assert_eq!(Reason::Approved.decision(), Decision::Allow);
        assert_eq!(Reason::EscalateRule.decision(), Decision::Escalate);
        assert_eq!(Reason::HardlinePath.decision(), Decision::Deny);
        assert_eq!(Reason::AuditUnavailable.decision(), Decision::Deny);
    }
}
