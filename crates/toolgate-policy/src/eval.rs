//! Evaluation of one call against a compiled policy. Total: every input
//! yields a verdict, and every path that is not an explicit allow denies.

use std::net::IpAddr;

use jiff::Timestamp;
use serde_json::{Map, Value};

use crate::args::CallView;
use crate::compile::{CompiledPolicy, CompiledTool, Tier};
use crate::digest::call_digests;
use crate::flows::{LabelSet, Provenance, Seen};
use crate::model::{Mode, Risk, SideEffect};
use crate::network::{Target, reached_addresses, url_target};
use crate::paths::path_values;
use crate::verdict::{Decision, Reason, Verdict};

/// One tool call as the agent proposes it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// Tool name as the agent calls it (aliases are resolved).
    pub tool: &'a str,
    /// Optional action (sub-command) of the tool.
    pub action: Option<&'a str>,
    /// The exact arguments; the verdict is bound to their digest.
    pub arguments: &'a Map<String, Value>,
}

/// What evaluation needs from outside, passed in so evaluation stays pure.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The current time, for grant expiry.
    pub now: Timestamp,
    /// Who is calling (the tenant); standing grants are scoped by it.
    pub subject: Option<&'a str>,
    /// The flow labels the run (or pod) carries before this call.
    pub labels: LabelSet,
    /// For a workspace read: the provenance of the file read.
    pub provenance: Option<Provenance>,
}

impl Context<'_> {
    /// A context at `now` with no subject, no labels and no provenance.
    pub fn at(now: Timestamp) -> Self {
        Self {
            now,
            subject: None,
            labels: LabelSet::EMPTY,
            provenance: None,
        }
    }
}

/// Characters and sequences that let one command line run more than one command.
fn has_shell_control(command: &str) -> bool {
    command
        .bytes()
        .any(|b| matches!(b, b';' | b'&' | b'|' | b'`' | b'>' | b'<' | b'\n' | b'\r'))
        || command.contains("$(")
}

impl CompiledPolicy {
    /// Why a connection to `url` is refused, as a NETWORK_* tool naming it
    /// would be (one unambiguous reading, an allowed scheme, hardline CIDRs
    /// for IP literals, `egress.allowHosts` for names); `None` when it may
    /// be made. Gateways check their upstream with it.
    pub fn egress_refusal(&self, url: &str) -> Option<Reason> {
        match url_target(url, &self.egress_schemes) {
            Ok(target) => self.target_refusal(&target).map(|(reason, _)| reason),
            Err(reason) => Some(reason),
        }
    }

    /// Why a connection to `target` is refused, with the rule that refuses
    /// it: a hardline CIDR holding any address it reaches, or a name
    /// outside `egress.allowHosts`.
    fn target_refusal(&self, target: &Target) -> Option<(Reason, Option<&str>)> {
        match target {
            Target::Ip(ip) => self
                .blocked_cidr(*ip)
                .map(|rule| (Reason::HardlineCidr, Some(rule))),
            Target::Host(host) => self
                .egress_hosts
                .first_match(host)
                .is_none()
                .then_some((Reason::EgressHostNotAllowed, None)),
        }
    }

    /// Whether a connection to `ip` falls in a hardline CIDR: what a
    /// gateway checks of each address a name resolves to, so a name that
    /// resolves (or is re-bound) to a hardline range is refused as the
    /// literal address would be.
    pub fn refuses_address(&self, ip: IpAddr) -> bool {
        self.blocked_cidr(ip).is_some()
    }

    /// What an approver is shown of `call`: its match text (the text the
    /// rules saw) through [`crate::preview::preview`]; `None` for a tool
    /// the profile does not declare.
    pub fn preview(&self, call: &Call<'_>) -> Option<String> {
        let tool = self.tools.get(self.canonical_tool(call.tool))?;
        // A call that cannot be read is denied, never escalated; show its
        // arguments as written.
        let shown = match tool.read(call.action, call.arguments) {
            Ok(view) => view.shown(),
            Err(_) => {
                String::from_utf8_lossy(&crate::digest::canonical_json(call.arguments)).into_owned()
            }
        };
        Some(crate::preview::preview(&shown))
    }

    /// Decides one call. Never fails: unknown tools and malformed arguments
    /// are denied with a typed reason. Under a `warn` or `dryRun` tool the
    /// verdict only reports (see [`Verdict::under`]).
    ///
    /// The order: (0) path normalization, (1) hardline rules and egress,
    /// (2) flow denials, (3) the mode, (4) shell control, (5) the tiers and
    /// standing grants, (6) flow escalations of what would be allowed.
    pub fn evaluate(&self, call: &Call<'_>, ctx: &Context<'_>) -> Verdict {
        let verdict = self.evaluate_enforced(call, ctx);
        verdict.under(self.enforcement(call.tool))
    }

    /// What `enforce` answers, whatever the tool's mode.
    fn evaluate_enforced(&self, call: &Call<'_>, ctx: &Context<'_>) -> Verdict {
        let tool_name = self.canonical_tool(call.tool);
        let digests = call_digests(tool_name, call.action, call.arguments);
        let Some(tool) = self.tools.get(tool_name) else {
            return self.verdict(
                Decision::Deny,
                Reason::UnknownTool,
                None,
                Risk::High,
                digests,
            );
        };
        let risk = tool.effect.risk;
        let decide = |decision, reason, rule: Option<&str>| {
            self.verdict(
                decision,
                reason,
                rule.map(str::to_owned),
                risk,
                digests.clone(),
            )
        };
        // 0. The arguments in their one reading, before any rule sees them.
        let view = match tool.read(call.action, call.arguments) {
            Ok(view) => view,
            Err(reason) => return decide(Decision::Deny, reason, None),
        };
        let side_effect = tool.effect.side_effect;

        // 1. Hardline rules and egress, in every mode.
        if let Some((reason, rule)) = self.hardline(tool, &view) {
            return decide(Decision::Deny, reason, rule);
        }

        // 2. Flow denials: what the run touched before forbids this call.
        let seen = Seen {
            tool: tool_name,
            side_effect,
            texts: &view.texts,
            provenance: ctx.provenance,
        };
        let flows = self.flows.as_ref();
        if let Some(rule) = flows.and_then(|f| f.rule(true, ctx.labels, &seen)) {
            return decide(Decision::Deny, Reason::FlowRule, Some(rule));
        }

        // 3-5. Mode, shell control, tiers and grants: each match text is
        // decided, and the strictest answer (the first of them) stands.
        let mut strictest: Option<(Decision, Reason, Option<&str>)> = None;
        for text in &view.texts {
            let answer = self.by_rules(tool, tool_name, text, ctx);
            if strictest.is_none_or(|s| strictness(answer.0) > strictness(s.0)) {
                strictest = Some(answer);
            }
            if answer.0 == Decision::Deny || self.mode != Mode::Rules {
                break;
            }
        }
        let (decision, reason, rule) =
            strictest.unwrap_or((Decision::Deny, Reason::NoMatchingRule, None));

        // 6. Flow escalations: only an allow becomes one, so a label never
        // loosens a verdict.
        if decision == Decision::Allow
            && let Some(rule) = flows.and_then(|f| f.rule(false, ctx.labels, &seen))
        {
            return decide(Decision::Escalate, Reason::FlowEscalate, Some(rule));
        }
        decide(decision, reason, rule)
    }

    /// Step 1: hardline commands (on every match text of a PROCESS_EXEC
    /// tool), hardline paths (on every match text and path), then the
    /// network targets (one reading each, hardline CIDRs, egress hosts).
    fn hardline(&self, tool: &CompiledTool, view: &CallView<'_>) -> Option<(Reason, Option<&str>)> {
        let side_effect = tool.effect.side_effect;
        if side_effect == SideEffect::ProcessExec {
            for text in view.texts.iter().chain(&view.joined) {
                if let Some(i) = self.hardline_commands.first_match(text) {
                    let rule = self.hardline_commands.label(i);
                    return Some((Reason::HardlineCommand, Some(rule)));
                }
            }
        }
        if tool.hardline_paths {
            let paths = path_values(&tool.path_args, &view.args);
            let candidates = view.texts.iter().map(String::as_str).chain(paths);
            for candidate in candidates {
                if let Some(i) = self.hardline_paths.first_match(candidate) {
                    return Some((Reason::HardlinePath, Some(self.hardline_paths.label(i))));
                }
            }
        }
        if tool.targets.is_empty() {
            return None;
        }
        let targets = match tool.targets.targets(&view.args, &self.egress_schemes) {
            Ok(targets) => targets,
            Err(reason) => return Some((reason, None)),
        };
        if targets.is_empty() && side_effect.is_network() {
            return Some((Reason::NetworkTargetInvalid, None));
        }
        targets.iter().find_map(|t| self.target_refusal(t))
    }

    /// Steps 3-5 of the decision order for one match text: the mode, shell
    /// control in commands (before any allow rule), then the tiers (first
    /// match wins) with standing grants for escalations.
    fn by_rules<'a>(
        &'a self,
        tool: &'a CompiledTool,
        tool_name: &str,
        text: &str,
        ctx: &Context<'_>,
    ) -> (Decision, Reason, Option<&'a str>) {
        match self.mode {
            Mode::AllowAll => return (Decision::Allow, Reason::ModeAllowAll, None),
            Mode::DenyAll => return (Decision::Deny, Reason::ModeDenyAll, None),
            Mode::Rules => {}
        }
        if tool.effect.side_effect == SideEffect::ProcessExec && has_shell_control(text) {
            return (Decision::Deny, Reason::ShellControl, None);
        }
        let Some(i) = tool.rules.first_match(text) else {
            return (Decision::Deny, Reason::NoMatchingRule, None);
        };
        let rule = tool.rules.label(i);
        match tool.tiers[i] {
            Tier::Deny => (Decision::Deny, Reason::DenyRule, Some(rule)),
            Tier::Allow => (Decision::Allow, Reason::AllowRule, Some(rule)),
            Tier::Escalate => match self.matching_grant(tool_name, text, ctx) {
                Some(grant) => (Decision::Allow, Reason::ApprovedByGrant, Some(grant)),
                None => (Decision::Escalate, Reason::EscalateRule, Some(rule)),
            },
        }
    }

    /// The flow labels `call` sets when it is allowed (none for a profile
    /// without flows or a tool it does not declare); `provenance` is the
    /// file's, for a workspace read.
    pub fn flow_labels_set_by(&self, call: &Call<'_>, provenance: Option<Provenance>) -> LabelSet {
        self.with_seen(call, provenance, |flows, seen| flows.set_by(seen))
            .unwrap_or(LabelSet::EMPTY)
    }

    /// Whether any flow rule could deny or escalate `call`, whatever labels
    /// its run carries: when none can, its verdict does not depend on them
    /// and the sidecar need not read them.
    pub fn flow_rules_select(&self, call: &Call<'_>, provenance: Option<Provenance>) -> bool {
        self.with_seen(call, provenance, |flows, seen| flows.selects(seen))
            .unwrap_or(false)
    }

    /// Runs `f` on the profile's flows and the call as their selectors see
    /// it; `None` without flows, for an undeclared tool or a call that
    /// cannot be read (those are denied whatever the labels).
    fn with_seen<T>(
        &self,
        call: &Call<'_>,
        provenance: Option<Provenance>,
        f: impl FnOnce(&crate::flows::CompiledFlows, &Seen<'_>) -> T,
    ) -> Option<T> {
        let flows = self.flows.as_ref()?;
        let tool_name = self.canonical_tool(call.tool);
        let tool = self.tools.get(tool_name)?;
        let view = tool.read(call.action, call.arguments).ok()?;
        Some(f(
            flows,
            &Seen {
                tool: tool_name,
                side_effect: tool.effect.side_effect,
                texts: &view.texts,
                provenance,
            },
        ))
    }

    fn verdict(
        &self,
        verdict: Decision,
        reason: Reason,
        matched_rule: Option<String>,
        risk: Risk,
        (args_digest, call_digest): (String, String),
    ) -> Verdict {
        Verdict {
            verdict,
            reason,
            matched_rule,
            policy_version: self.version.version.clone(),
            risk,
            intent_required: crate::verdict::intent_required(verdict, risk),
            args_digest,
            call_digest,
            enforced: true,
            would_verdict: None,
            would_reason: None,
            would_rule: None,
            warning: None,
        }
    }

    /// The first hardline CIDR holding any address a connection to `ip`
    /// reaches ([`reached_addresses`]).
    fn blocked_cidr(&self, ip: IpAddr) -> Option<&str> {
        self.hardline_cidrs.first_holding(&reached_addresses(ip))
    }

    fn matching_grant(&self, tool: &str, text: &str, ctx: &Context<'_>) -> Option<&str> {
        self.grants
            .iter()
            .filter(|g| g.tool == tool && ctx.now < g.expires_at)
            .filter(|g| {
                g.subjects
                    .iter()
                    .any(|s| s == "*" || Some(s.as_str()) == ctx.subject)
            })
            .find(|g| g.globs.first_match(text).is_some())
            .map(|g| g.globs.label(0))
    }
}

/// How strict a decision is: a call expanded to several match texts gets
/// the strictest of their answers.
fn strictness(decision: Decision) -> u8 {
    match decision {
        Decision::Allow => 0,
        Decision::Escalate => 1,
        Decision::Deny => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_control_detection() {
        for bad in [
            "ls; rm x", "a && b", "a || b", "a | b", "a & b", "`id`", "$(id)", "a > f", "a < f",
            "a\nb",
        ] {
            assert!(has_shell_control(bad), "{bad:?}");
        }
        for ok in ["ls -la", "git status", "echo $HOME", "grep -n foo bar.txt"] {
            assert!(!has_shell_control(ok), "{ok:?}");
        }
    }
}
