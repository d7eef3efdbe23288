//! Flow rules: verdicts that depend on what a run has already touched.
//!
//! A profile names *labels* and the calls that set them (`private` when a
//! secret is read, `untrusted` when a web page is fetched); a run carries
//! every label an allowed call of it has set, and labels never come off.
//! *Rules* deny or escalate calls of a run that carries all of their
//! `when` labels: "after a run read a secret and untrusted text, it may not
//! send anything out". Everything here is pure: the run's labels come in
//! through [`crate::Context`], and the gate stores what a call sets.
//!
//! Where flow rules sit in the decision order (see [`crate::CompiledPolicy::evaluate`]):
//! after the hardline and egress checks, a flow `deny` wins over the mode,
//! shell control, the tiers and grants; a flow `escalate` turns what would
//! otherwise be allowed (by `allowAll`, an allow rule or a standing grant)
//! into an escalation and leaves a denial or an escalation as it is. So a
//! label can only make a verdict stricter.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::compile::OrderedGlobs;
use crate::error::PolicyError;
use crate::model::SideEffect;

/// Most labels one profile may declare (a run's labels are one `u64`).
pub const MAX_FLOW_LABELS: usize = 64;
/// Longest label or flow rule name.
pub const MAX_FLOW_NAME: usize = 63;

/// `spec.flows`: labels a run picks up and the rules they trigger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Flows {
    /// What carries the labels: each `run` (the default), or the whole
    /// `pod`, for agents whose run ids cannot be trusted to stay the same.
    #[serde(default)]
    pub scope: FlowScope,
    /// Each label and the calls that set it.
    pub labels: BTreeMap<String, FlowSelector>,
    /// Rules checked against the labels a run carries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<FlowRule>,
}

crate::wire_enum! {
    /// What a run's flow labels belong to.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum FlowScope {
        /// One run (one `run_id`).
        #[default]
        Run = "run",
        /// Every call of one pod, whatever its run ids.
        Pod = "pod",
    }
}

crate::wire_enum! {
    /// Where a workspace file's content came from, as far as the sidecar can
    /// prove it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum Provenance {
        /// Written through the governed workspace by this sidecar and unchanged since.
        InternalTool = "INTERNAL_TOOL",
        /// Anything else: pre-existing, changed by someone else, or from before a restart.
        ExternalUntrusted = "EXTERNAL_UNTRUSTED",
    }
}

/// Which calls a label or a rule is about. A call is selected when its
/// canonical tool name matches one of `tools` *or* its side effect is one
/// of `sideEffects` (neither given: every call), *and*, when `match` is
/// given, its match text matches one of those globs. Independently, a
/// workspace read of a file whose provenance is listed in `provenance` is
/// selected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowSelector {
    /// Globs over canonical tool names (`browser.*`, `github.create_issue`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Side-effect classes (`NETWORK_READ`, `EXTERNAL_WRITE`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_effects: Vec<SideEffect>,
    /// Globs over the call's match text, as the rules see it.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub match_text: Vec<String>,
    /// Provenances of a workspace file being read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<Provenance>,
}

/// One flow rule: once a run carries every label of `when`, the calls
/// `deny` selects are denied, or those `escalate` selects need a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowRule {
    /// A name for `matched_rule`, metrics and the docs (default `rules[i]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Labels the run must carry, all of them.
    pub when: Vec<String>,
    /// Calls denied once the labels are there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<FlowSelector>,
    /// Calls that need approval once the labels are there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate: Option<FlowSelector>,
}

/// A set of a profile's labels, by their index in name order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LabelSet(u64);

impl LabelSet {
    /// No labels.
    pub const EMPTY: Self = Self(0);

    /// Whether no label is in the set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Every label of either set.
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    /// The labels of `self` not in `other`.
    pub fn minus(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
    /// Whether every label of `self` is in `other`.
    pub fn is_subset(self, other: Self) -> bool {
        self.0 & !other.0 == 0
    }
    fn with(self, index: usize) -> Self {
        Self(self.0 | (1 << index))
    }
    fn contains(self, index: usize) -> bool {
        self.0 & (1 << index) != 0
    }
    /// The raw bits, for property tests and compact storage in memory.
    pub fn bits(self) -> u64 {
        self.0
    }
    /// The set with these raw bits (bits past the profile's labels mean nothing).
    pub fn from_bits(bits: u64) -> Self {
        Self(bits)
    }
}

/// What a call looks like to a selector.
pub(crate) struct Seen<'a> {
    pub(crate) tool: &'a str,
    pub(crate) side_effect: SideEffect,
    /// The call's match texts ([`crate::args`]): a glob matching any of
    /// them selects the call.
    pub(crate) texts: &'a [String],
    pub(crate) provenance: Option<Provenance>,
}

#[derive(Debug, Clone)]
struct CompiledSelector {
    tools: OrderedGlobs,
    side_effects: Vec<SideEffect>,
    match_text: OrderedGlobs,
    provenance: Vec<Provenance>,
}

impl CompiledSelector {
    /// `aliases` maps an alias to its tool: a selector naming an alias
    /// means the tool, as a rule key does.
    fn compile(
        field: &str,
        s: &FlowSelector,
        aliases: &HashMap<String, String>,
    ) -> Result<Self, PolicyError> {
        if s.tools.is_empty()
            && s.side_effects.is_empty()
            && s.match_text.is_empty()
            && s.provenance.is_empty()
        {
            return Err(PolicyError::InvalidValue {
                field: field.to_owned(),
                message: "a selector needs at least one of tools, sideEffects, match, provenance"
                    .into(),
            });
        }
        let globs = |name: &str, globs: &[String]| {
            OrderedGlobs::build(
                globs
                    .iter()
                    .enumerate()
                    .map(|(i, g)| (format!("{field}.{name}[{i}]"), g.clone(), g.clone()))
                    .collect(),
            )
        };
        let tools: Vec<String> = s
            .tools
            .iter()
            .map(|t| aliases.get(t).cloned().unwrap_or_else(|| t.clone()))
            .collect();
        Ok(Self {
            tools: globs("tools", &tools)?,
            side_effects: s.side_effects.clone(),
            match_text: globs("match", &s.match_text)?,
            provenance: s.provenance.clone(),
        })
    }

    /// Whether the selector picks the call by tool or side effect alone
    /// (what a message to a server is judged by: its text is matched too
    /// when the selector has `match` globs, by [`Self::selects`]).
    fn selects_kind(&self, call: &Seen<'_>) -> bool {
        (self.tools.is_empty() && self.side_effects.is_empty() && !self.match_text.is_empty())
            || self.tools.first_match(call.tool).is_some()
            || self.side_effects.contains(&call.side_effect)
    }

    fn selects(&self, call: &Seen<'_>) -> bool {
        let by_kind =
            !(self.tools.is_empty() && self.side_effects.is_empty() && self.match_text.is_empty())
                && ((self.tools.is_empty() && self.side_effects.is_empty())
                    || self.tools.first_match(call.tool).is_some()
                    || self.side_effects.contains(&call.side_effect))
                && (self.match_text.is_empty()
                    || call
                        .texts
                        .iter()
                        .any(|t| self.match_text.first_match(t).is_some()));
        by_kind
            || call
                .provenance
                .is_some_and(|p| self.provenance.contains(&p))
    }
}

/// The `matched_rule` of a flow verdict: `flow:NAME when a+b`.
const RULE_PREFIX: &str = "flow:";
const RULE_WHEN: &str = " when ";

/// The flow rule a `matched_rule` names (`no-exfiltration` of
/// `flow:no-exfiltration when private+untrusted`); `None` for any other rule.
pub fn rule_name(matched_rule: &str) -> Option<&str> {
    let rest = matched_rule.strip_prefix(RULE_PREFIX)?;
    Some(rest.split_once(RULE_WHEN).map_or(rest, |(name, _)| name))
}

#[derive(Debug, Clone)]
struct CompiledRule {
    /// The rule's name (`rules[i]` when it has none).
    name: String,
    /// `flow:NAME when a+b`, for `matched_rule`.
    label: String,
    when: LabelSet,
    deny: bool,
    selector: CompiledSelector,
}

/// `spec.flows`, compiled.
#[derive(Debug, Clone)]
pub(crate) struct CompiledFlows {
    pub(crate) scope: FlowScope,
    /// Label names in index order.
    names: Vec<String>,
    setters: Vec<CompiledSelector>,
    rules: Vec<CompiledRule>,
    /// Every label some rule reads.
    watched: LabelSet,
    /// Whether some selector looks at a read file's provenance.
    uses_provenance: bool,
}

fn check_name(field: &str, name: &str) -> Result<(), PolicyError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_FLOW_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(PolicyError::InvalidValue {
            field: field.to_owned(),
            message: format!(
                "`{name}`: a flow name is 1-{MAX_FLOW_NAME} lowercase letters, digits, `-` or `_`, \
                 starting and ending with a letter or digit"
            ),
        })
    }
}

impl CompiledFlows {
    pub(crate) fn compile(
        flows: &Flows,
        aliases: &HashMap<String, String>,
    ) -> Result<Self, PolicyError> {
        if flows.labels.len() > MAX_FLOW_LABELS {
            return Err(PolicyError::InvalidValue {
                field: "spec.flows.labels".into(),
                message: format!("at most {MAX_FLOW_LABELS} labels"),
            });
        }
        let mut names = Vec::with_capacity(flows.labels.len());
        let mut setters = Vec::with_capacity(flows.labels.len());
        for (name, selector) in &flows.labels {
            let field = format!("spec.flows.labels.{name}");
            check_name(&field, name)?;
            names.push(name.clone());
            setters.push(CompiledSelector::compile(&field, selector, aliases)?);
        }
        let mut rules = Vec::with_capacity(flows.rules.len());
        let mut watched = LabelSet::EMPTY;
        let mut rule_names = std::collections::HashSet::new();
        for (i, rule) in flows.rules.iter().enumerate() {
            let field = format!("spec.flows.rules[{i}]");
            let name = match &rule.name {
                Some(n) => {
                    check_name(&format!("{field}.name"), n)?;
                    if !rule_names.insert(n.as_str()) {
                        return Err(PolicyError::InvalidValue {
                            field: format!("{field}.name"),
                            message: format!("`{n}` names two flow rules"),
                        });
                    }
                    n.clone()
                }
                None => format!("rules[{i}]"),
            };
            if rule.when.is_empty() {
                return Err(PolicyError::InvalidValue {
                    field: format!("{field}.when"),
                    message: "a flow rule needs at least one label".into(),
                });
            }
            let mut when = LabelSet::EMPTY;
            for (j, label) in rule.when.iter().enumerate() {
                let Some(index) = names.iter().position(|n| n == label) else {
                    return Err(PolicyError::InvalidValue {
                        field: format!("{field}.when[{j}]"),
                        message: format!("`{label}` is not a label of spec.flows.labels"),
                    });
                };
                when = when.with(index);
            }
            let (deny, selector) = match (&rule.deny, &rule.escalate) {
                (Some(s), None) => (
                    true,
                    CompiledSelector::compile(&format!("{field}.deny"), s, aliases)?,
                ),
                (None, Some(s)) => (
                    false,
                    CompiledSelector::compile(&format!("{field}.escalate"), s, aliases)?,
                ),
                _ => {
                    return Err(PolicyError::InvalidValue {
                        field,
                        message: "a flow rule has exactly one of deny, escalate".into(),
                    });
                }
            };
            let mut label = format!("{RULE_PREFIX}{name}{RULE_WHEN}");
            for (k, index) in (0..names.len()).filter(|&k| when.contains(k)).enumerate() {
                let _ = write!(label, "{}{}", if k > 0 { "+" } else { "" }, names[index]);
            }
            watched = watched.union(when);
            rules.push(CompiledRule {
                name,
                label,
                when,
                deny,
                selector,
            });
        }
        let uses_provenance = flows.labels.values().any(|l| !l.provenance.is_empty())
            || flows.rules.iter().any(|r| {
                [&r.deny, &r.escalate]
                    .into_iter()
                    .flatten()
                    .any(|s| !s.provenance.is_empty())
            });
        Ok(Self {
            uses_provenance,
            scope: flows.scope,
            names,
            setters,
            rules,
            watched,
        })
    }

    /// The first rule of this kind (deny or escalate) whose labels `labels`
    /// holds and that selects the call.
    pub(crate) fn rule(&self, deny: bool, labels: LabelSet, call: &Seen<'_>) -> Option<&str> {
        if labels.is_empty() {
            return None;
        }
        self.rules
            .iter()
            .find(|r| r.deny == deny && r.when.is_subset(labels) && r.selector.selects(call))
            .map(|r| r.label.as_str())
    }

    /// Whether some rule selects the call (for some labels).
    pub(crate) fn selects(&self, call: &Seen<'_>) -> bool {
        self.rules.iter().any(|r| r.selector.selects(call))
    }

    /// The labels this call sets when it is allowed.
    pub(crate) fn set_by(&self, call: &Seen<'_>) -> LabelSet {
        self.setters
            .iter()
            .enumerate()
            .filter(|(_, s)| s.selects(call))
            .fold(LabelSet::EMPTY, |set, (i, _)| set.with(i))
    }

    pub(crate) fn watched(&self) -> LabelSet {
        self.watched
    }

    /// The set of these label names; names the profile does not declare
    /// (set under an older version of it) are left out.
    pub(crate) fn set_of<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> LabelSet {
        names.into_iter().fold(LabelSet::EMPTY, |set, name| {
            match self.names.iter().position(|n| n == name) {
                Some(i) => set.with(i),
                None => set,
            }
        })
    }

    /// The names of the labels in `set`, in name order.
    pub(crate) fn names_of(&self, set: LabelSet) -> Vec<&str> {
        (0..self.names.len())
            .filter(|&i| set.contains(i))
            .map(|i| self.names[i].as_str())
            .collect()
    }
}

impl crate::CompiledPolicy {
    /// What carries this profile's flow labels; `None` when it declares no
    /// flows (then no call needs the run's labels).
    pub fn flow_scope(&self) -> Option<FlowScope> {
        self.flows.as_ref().map(|f| f.scope)
    }

    /// The set of these label names (names this profile does not declare
    /// are left out: they were set under an older version of it).
    pub fn flow_labels<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> LabelSet {
        self.flows
            .as_ref()
            .map_or(LabelSet::EMPTY, |f| f.set_of(names))
    }

    /// The names of the labels in `set`, in name order.
    pub fn flow_label_names(&self, set: LabelSet) -> Vec<&str> {
        self.flows
            .as_ref()
            .map_or_else(Vec::new, |f| f.names_of(set))
    }

    /// Each flow rule's name and the verdict it gives, in order.
    pub fn flow_rules(&self) -> Vec<(&str, crate::Decision)> {
        self.flows.as_ref().map_or_else(Vec::new, |f| {
            f.rules
                .iter()
                .map(|r| {
                    let verdict = if r.deny {
                        crate::Decision::Deny
                    } else {
                        crate::Decision::Escalate
                    };
                    (r.name.as_str(), verdict)
                })
                .collect()
        })
    }

    /// Whether a workspace read must know its file's provenance before it is
    /// decided (some flow selector names a provenance).
    pub fn flows_use_provenance(&self) -> bool {
        self.flows.as_ref().is_some_and(|f| f.uses_provenance)
    }

    /// Every label some flow rule reads: once a run is known to carry all
    /// of them, reading its labels again cannot change a verdict.
    pub fn flow_watched(&self) -> LabelSet {
        self.flows
            .as_ref()
            .map_or(LabelSet::EMPTY, CompiledFlows::watched)
    }

    /// The tools this profile declares for MCP server `server`
    /// (`SERVER.TOOL`, resources and prompts included) with a flow deny rule
    /// that could select them: a message to that server carries data out
    /// as a call of them would. Empty without flows.
    fn server_tools_under_flows(&self, server: &str) -> Vec<(&str, crate::SideEffect)> {
        let Some(flows) = self.flows.as_ref() else {
            return Vec::new();
        };
        let prefix = format!("{server}.");
        self.tools
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .filter(|(name, tool)| {
                let seen = Seen {
                    tool: name,
                    side_effect: tool.effect.side_effect,
                    texts: &[],
                    provenance: None,
                };
                flows
                    .rules
                    .iter()
                    .any(|r| r.deny && r.selector.selects_kind(&seen))
            })
            .map(|(name, tool)| (name.as_str(), tool.effect.side_effect))
            .collect()
    }

    /// Whether some flow deny rule could refuse a message to MCP server
    /// `server` (see [`Self::server_flow_denial`]): when none can, the run's
    /// labels need not be read.
    pub fn server_under_flows(&self, server: &str) -> bool {
        !self.server_tools_under_flows(server).is_empty()
    }

    /// The flow deny rule that, with the run's `labels`, refuses a message
    /// (other than a `tools/call`) to MCP server `server` whose free text is
    /// `texts`: the first rule that would deny a call of one of the
    /// server's declared tools carrying that text. A server that can carry
    /// data out is a channel whatever the method.
    pub fn server_flow_denial(
        &self,
        server: &str,
        labels: LabelSet,
        texts: &[String],
    ) -> Option<&str> {
        let flows = self.flows.as_ref()?;
        self.server_tools_under_flows(server)
            .into_iter()
            .find_map(|(tool, side_effect)| {
                let seen = Seen {
                    tool,
                    side_effect,
                    texts,
                    provenance: None,
                };
                flows.rule(true, labels, &seen)
            })
    }
}

/// One earlier call of a run, for replaying what labels it carries
/// (`toolgate test` cases' `history`, `toolgate check --history`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PastCall {
    /// Tool as the agent called it.
    pub tool: String,
    /// Optional action.
    #[serde(default)]
    pub action: Option<String>,
    /// The call's arguments.
    #[serde(default)]
    pub args: serde_json::Map<String, serde_json::Value>,
    /// For a workspace read: the provenance of the file read.
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

impl crate::CompiledPolicy {
    /// The labels a run carries after `history`, decided in order as the
    /// sidecar decides them: each call sees the labels before it, and only
    /// a call that is allowed sets its labels.
    pub fn labels_after(&self, history: &[PastCall], ctx: &crate::Context<'_>) -> LabelSet {
        history.iter().fold(LabelSet::EMPTY, |labels, past| {
            let call = crate::Call {
                tool: &past.tool,
                action: past.action.as_deref(),
                arguments: &past.args,
            };
            let ctx = crate::Context {
                labels,
                provenance: past.provenance,
                ..*ctx
            };
            if self.evaluate(&call, &ctx).verdict == crate::Decision::Allow {
                labels.union(self.flow_labels_set_by(&call, past.provenance))
            } else {
                labels
            }
        })
    }
}
