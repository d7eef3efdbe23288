//! Evaluation of one call against a compiled policy. Total: every input
//! yields a verdict, and every path that is not an explicit allow denies.

use std::net::IpAddr;

use jiff::Timestamp;
use serde_json::{Map, Value};

use crate::compile::{CompiledPolicy, CompiledTool, MatchText, Tier};
use crate::digest::{call_digests, canonical_json};
use crate::flows::{LabelSet, Provenance, Seen};
use crate::model::{Mode, Risk, SideEffect};
use crate::paths::{normalize_args, path_values};
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
    /// would be (hardline CIDRs for IP literals, `egress.allowHosts` for
    /// names, an unusable URL); `None` when it may be made. Gateways check
    /// their upstream with it.
    pub fn egress_refusal(&self, url: &str) -> Option<Reason> {
        let mut args = Map::new();
        args.insert("url".into(), Value::String(url.to_owned()));
        let targets = network_targets(&args);
        if targets.is_empty() {
            return Some(Reason::NetworkTargetInvalid);
        }
        targets.iter().find_map(|target| match target {
            Target::Ip(ip) => self.blocked_cidr(*ip).map(|_| Reason::HardlineCidr),
            Target::Host(host) => self
                .egress_hosts
                .first_match(host)
                .is_none()
                .then_some(Reason::EgressHostNotAllowed),
            Target::Invalid => Some(Reason::NetworkTargetInvalid),
        })
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
        // A path that cannot be normalized is denied, never escalated; show
        // it as written.
        let args = normalize_args(&tool.path_args, call.arguments)
            .unwrap_or(std::borrow::Cow::Borrowed(call.arguments));
        Some(crate::preview::preview(&match_text(
            tool,
            call.action,
            &args,
        )))
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
        // 0. Paths in their one spelling, before any rule sees them.
        let args = match normalize_args(&tool.path_args, call.arguments) {
            Ok(args) => args,
            Err(reason) => return decide(Decision::Deny, reason, None),
        };
        let text = match_text(tool, call.action, &args);
        let side_effect = tool.effect.side_effect;

        // 1. Hardline rules, in every mode.
        if side_effect == SideEffect::ProcessExec
            && let Some(i) = self.hardline_commands.first_match(&text)
        {
            return decide(
                Decision::Deny,
                Reason::HardlineCommand,
                Some(self.hardline_commands.label(i)),
            );
        }
        if tool.hardline_paths {
            let candidates =
                std::iter::once(text.as_str()).chain(path_values(&tool.path_args, &args));
            for candidate in candidates {
                if let Some(i) = self.hardline_paths.first_match(candidate) {
                    return decide(
                        Decision::Deny,
                        Reason::HardlinePath,
                        Some(self.hardline_paths.label(i)),
                    );
                }
            }
        }
        if side_effect.is_network() {
            let targets = network_targets(call.arguments);
            if targets.is_empty() {
                return decide(Decision::Deny, Reason::NetworkTargetInvalid, None);
            }
            for target in &targets {
                match target {
                    Target::Ip(ip) => {
                        if let Some(rule) = self.blocked_cidr(*ip) {
                            return decide(Decision::Deny, Reason::HardlineCidr, Some(rule));
                        }
                    }
                    Target::Host(host) => {
                        if self.egress_hosts.first_match(host).is_none() {
                            return decide(Decision::Deny, Reason::EgressHostNotAllowed, None);
                        }
                    }
                    Target::Invalid => {
                        return decide(Decision::Deny, Reason::NetworkTargetInvalid, None);
                    }
                }
            }
        }

        // 2. Flow denials: what the run touched before forbids this call.
        let seen = Seen {
            tool: tool_name,
            side_effect,
            text: &text,
            provenance: ctx.provenance,
        };
        let flows = self.flows.as_ref();
        if let Some(rule) = flows.and_then(|f| f.rule(true, ctx.labels, &seen)) {
            return decide(Decision::Deny, Reason::FlowRule, Some(rule));
        }

        // 3-5. Mode, shell control, tiers and grants.
        let (decision, reason, rule) = self.by_rules(tool, tool_name, &text, ctx);

        // 6. Flow escalations: only an allow becomes one, so a label never
        // loosens a verdict.
        if decision == Decision::Allow
            && let Some(rule) = flows.and_then(|f| f.rule(false, ctx.labels, &seen))
        {
            return decide(Decision::Escalate, Reason::FlowEscalate, Some(rule));
        }
        decide(decision, reason, rule)
    }

    /// Steps 3-5 of the decision order: the mode, shell control in
    /// commands (before any allow rule), then the tiers (first match wins)
    /// with standing grants for escalations.
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
    /// it; `None` without flows, for an undeclared tool or a path that
    /// cannot be normalized (those are denied whatever the labels).
    fn with_seen<T>(
        &self,
        call: &Call<'_>,
        provenance: Option<Provenance>,
        f: impl FnOnce(&crate::flows::CompiledFlows, &Seen<'_>) -> T,
    ) -> Option<T> {
        let flows = self.flows.as_ref()?;
        let tool_name = self.canonical_tool(call.tool);
        let tool = self.tools.get(tool_name)?;
        let args = normalize_args(&tool.path_args, call.arguments).ok()?;
        let text = match_text(tool, call.action, &args);
        Some(f(
            flows,
            &Seen {
                tool: tool_name,
                side_effect: tool.effect.side_effect,
                text: &text,
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

    fn blocked_cidr(&self, ip: IpAddr) -> Option<&str> {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.hardline_cidrs
            .iter()
            .find(|(net, _)| net.contains(&ip) || mapped.is_some_and(|m| net.contains(&m)))
            .map(|(_, label)| label.as_str())
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

/// The text rules match for this call (`arguments` with its paths
/// normalized).
fn match_text(tool: &CompiledTool, action: Option<&str>, arguments: &Map<String, Value>) -> String {
    let mut out = String::new();
    let mut push = |piece: &str| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(piece);
    };
    match &tool.match_text {
        MatchText::Named(names) => {
            for name in names {
                match arguments.get(name) {
                    Some(Value::String(s)) => push(s),
                    Some(Value::Null) | None => {}
                    Some(other) => push(&String::from_utf8_lossy(&canonical_json(other))),
                }
            }
        }
        MatchText::ActionAndValues => {
            if let Some(action) = action {
                push(action);
            }
            // serde_json's Map iterates in key order unless a dependency
            // turns on `preserve_order`; sort then, so the text never
            // depends on how the caller built the map.
            let mut entries: Vec<(&String, &Value)> = arguments.iter().collect();
            if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            for (_, value) in entries {
                match value {
                    Value::String(s) => push(s),
                    other => push(&String::from_utf8_lossy(&canonical_json(other))),
                }
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Ip(IpAddr),
    Host(String),
    Invalid,
}

/// Network targets named by `url` and `host` arguments. IP literals in any
/// WHATWG-accepted spelling (`2130706433`, `0x7f.1`) are normalized, so a
/// rewritten address cannot slip past a CIDR rule.
fn network_targets(args: &Map<String, Value>) -> Vec<Target> {
    let mut targets = Vec::with_capacity(2);
    if let Some(value) = args.get("url") {
        targets.push(match value.as_str().map(url::Url::parse) {
            Some(Ok(u)) => match u.host() {
                Some(host) => host_target(host),
                None => Target::Invalid,
            },
            _ => Target::Invalid,
        });
    }
    if let Some(value) = args.get("host") {
        targets.push(match value.as_str() {
            Some(h) => host_arg_target(h),
            None => Target::Invalid,
        });
    }
    targets
}

fn host_target<S: AsRef<str>>(host: url::Host<S>) -> Target {
    match host {
        url::Host::Ipv4(a) => Target::Ip(IpAddr::V4(a)),
        url::Host::Ipv6(a) => Target::Ip(IpAddr::V6(a)),
        url::Host::Domain(d) => {
            let d = d.as_ref().trim_end_matches('.').to_ascii_lowercase();
            if d.is_empty() {
                Target::Invalid
            } else {
                Target::Host(d)
            }
        }
    }
}

fn host_arg_target(raw: &str) -> Target {
    let raw = raw.trim();
    if let Ok(ip) = raw.parse::<IpAddr>() {
        return Target::Ip(ip);
    }
    if let Ok(sock) = raw.parse::<std::net::SocketAddr>() {
        return Target::Ip(sock.ip());
    }
    let host = match raw.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => raw,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match url::Host::parse(host) {
        Ok(h) => host_target(h),
        Err(_) => Target::Invalid,
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

    #[test]
    fn ip_spellings_are_normalized() {
        let args = |k: &str, v: &str| {
            let mut m = Map::new();
            m.insert(k.into(), Value::String(v.into()));
            m
        };
        let loopback = Target::Ip("127.0.0.1".parse().unwrap());
        assert_eq!(
            network_targets(&args("url", "http://2130706433/x")),
            vec![loopback.clone()]
        );
        assert_eq!(
            network_targets(&args("url", "http://0x7f.1/")),
            vec![loopback.clone()]
        );
        assert_eq!(
            network_targets(&args("host", "127.0.0.1:8080")),
            vec![loopback.clone()]
        );
        assert_eq!(network_targets(&args("host", "2130706433")), vec![loopback]);
        assert_eq!(
            network_targets(&args("host", "[::1]:443")),
            vec![Target::Ip("::1".parse().unwrap())]
        );
        assert_eq!(
            network_targets(&args("url", "https://API.GitHub.com./repos")),
            vec![Target::Host("api.github.com".into())]
        );
        assert_eq!(
            network_targets(&args("url", "not a url")),
            vec![Target::Invalid]
        );
    }
}
