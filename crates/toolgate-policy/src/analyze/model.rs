//! One tool's verdict as a function of its match text, in the terms of
//! [`super::glob_lang`]: which globs decide, in which order.
//!
//! For a call whose match text is one string `s` (no arrays), made by a
//! run that carries no flow labels, with no standing grants, the evaluator
//! answers: a hardline command (PROCESS_EXEC tools) or hardline path
//! (workspace tools and tools with `pathArgs`) matching `s` denies; then
//! the mode (`allowAll` allows, `denyAll` denies); then shell control in a
//! PROCESS_EXEC command denies; then the first matching rule of
//! deny(tool), deny(*), allow(tool), allow(*), escalate(tool), escalate(*)
//! decides, and no match denies. A `warn`/`dryRun` tool then allows what
//! is not always enforced. Every one of those tests is a glob, so the
//! verdict depends only on which globs match `s` — each as the evaluator's
//! glob lists match, `s` or its lowercase copy when `s` has an uppercase
//! letter (lowercasing neither adds nor removes a shell-control
//! character, so that test is matched the same way).

use serde::Serialize;

use crate::compile::{ANY_TOOL, CompiledPolicy};
use crate::model::{Enforcement, Mode, SideEffect};
use crate::verdict::{Decision, Reason};

/// The shell-control test of the evaluator (`has_shell_control`) as globs:
/// a command holding any of these is denied before the allow rules.
pub(crate) const SHELL_CONTROL: [&str; 9] = [
    "*;*", "*&*", "*|*", "*`*", "*>*", "*<*", "*\n*", "*\r*", "*$(*",
];

/// A rule tier, in evaluation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// `deny` globs.
    Deny,
    /// `allow` globs.
    Allow,
    /// `escalate` globs.
    Escalate,
}

impl Tier {
    pub(crate) const ALL: [Tier; 3] = [Tier::Deny, Tier::Allow, Tier::Escalate];

    /// The field name in a profile.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deny => "deny",
            Self::Allow => "allow",
            Self::Escalate => "escalate",
        }
    }

    fn globs(self, tiers: &crate::model::RuleTiers) -> &[String] {
        match self {
            Self::Deny => &tiers.deny,
            Self::Allow => &tiers.allow,
            Self::Escalate => &tiers.escalate,
        }
    }
}

/// What one glob of a [`ToolModel`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    HardlineCommand,
    HardlinePath,
    Shell,
    Rule { tier: Tier },
}

/// One glob a tool's verdict reads, with the profile field it comes from.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) role: Role,
    pub(crate) glob: String,
    pub(crate) field: String,
    /// The globs whose union the entry matches (just `glob`, but for
    /// shell control).
    pub(crate) union: Vec<String>,
}

/// A tool's verdict over its match text.
#[derive(Debug, Clone)]
pub(crate) struct ToolModel {
    pub(crate) mode: Mode,
    /// `None`: the profile does not declare the tool (unknown_tool).
    pub(crate) declared: bool,
    pub(crate) enforced: bool,
    /// Hardlines, then shell control, then rules in evaluation order.
    pub(crate) entries: Vec<Entry>,
}

impl ToolModel {
    /// The model of `tool` (a canonical name) under `policy`.
    pub(crate) fn new(policy: &CompiledPolicy, tool: &str) -> Self {
        let Some(compiled) = policy.tools.get(tool) else {
            return Self {
                mode: policy.mode,
                declared: false,
                enforced: true,
                entries: Vec::new(),
            };
        };
        let spec = &policy.spec;
        let mut entries = Vec::new();
        let exec = compiled.effect.side_effect == SideEffect::ProcessExec;
        let hardline = spec.hardline.clone().unwrap_or_default();
        let push = |entries: &mut Vec<Entry>, role: Role, globs: &[String], field: &str| {
            for (i, glob) in globs.iter().enumerate() {
                entries.push(Entry {
                    role: role.clone(),
                    glob: glob.clone(),
                    field: format!("{field}[{i}]"),
                    union: vec![glob.clone()],
                });
            }
        };
        if exec {
            push(
                &mut entries,
                Role::HardlineCommand,
                &hardline.commands,
                "spec.hardline.commands",
            );
        }
        if compiled.hardline_paths {
            push(
                &mut entries,
                Role::HardlinePath,
                &hardline.paths,
                "spec.hardline.paths",
            );
        }
        if exec && policy.mode == Mode::Rules {
            entries.push(Entry {
                role: Role::Shell,
                glob: "shell control".into(),
                field: "shell control".into(),
                union: SHELL_CONTROL.iter().map(|g| (*g).to_owned()).collect(),
            });
        }
        let own = spec
            .rules
            .iter()
            .find(|(key, _)| *key != ANY_TOOL && policy.canonical_tool(key) == tool);
        let any = spec.rules.get_key_value(ANY_TOOL);
        for tier in Tier::ALL {
            for (key, tiers) in own.into_iter().chain(any) {
                let field = format!("spec.rules.{key}.{}", tier.as_str());
                push(&mut entries, Role::Rule { tier }, tier.globs(tiers), &field);
            }
        }
        Self {
            mode: policy.mode,
            declared: true,
            enforced: policy.enforcement(tool) == Enforcement::Enforce,
            entries,
        }
    }

    /// The languages of the entries, in entry order.
    pub(crate) fn languages(&self) -> Vec<Vec<&str>> {
        self.entries
            .iter()
            .map(|e| e.union.iter().map(String::as_str).collect())
            .collect()
    }

    /// What `enforce` answers for a text matched by exactly the globs of
    /// `accepts` (parallel to `entries`), and the deciding entry.
    pub(crate) fn enforced_verdict(&self, accepts: &[bool]) -> (Decision, Reason, Option<usize>) {
        if !self.declared {
            return (Decision::Deny, Reason::UnknownTool, None);
        }
        let first = |pred: &dyn Fn(&Role) -> bool| {
            (0..self.entries.len()).find(|&i| accepts[i] && pred(&self.entries[i].role))
        };
        if let Some(i) = first(&|r| *r == Role::HardlineCommand) {
            return (Decision::Deny, Reason::HardlineCommand, Some(i));
        }
        if let Some(i) = first(&|r| *r == Role::HardlinePath) {
            return (Decision::Deny, Reason::HardlinePath, Some(i));
        }
        match self.mode {
            Mode::AllowAll => return (Decision::Allow, Reason::ModeAllowAll, None),
            Mode::DenyAll => return (Decision::Deny, Reason::ModeDenyAll, None),
            Mode::Rules => {}
        }
        if let Some(i) = first(&|r| *r == Role::Shell) {
            return (Decision::Deny, Reason::ShellControl, Some(i));
        }
        match first(&|r| matches!(r, Role::Rule { .. })) {
            Some(i) => match self.entries[i].role {
                Role::Rule { tier: Tier::Deny } => (Decision::Deny, Reason::DenyRule, Some(i)),
                Role::Rule { tier: Tier::Allow } => (Decision::Allow, Reason::AllowRule, Some(i)),
                _ => (Decision::Escalate, Reason::EscalateRule, Some(i)),
            },
            None => (Decision::Deny, Reason::NoMatchingRule, None),
        }
    }

    /// The binding verdict: under `warn`/`dryRun` whatever is not always
    /// enforced is allowed.
    pub(crate) fn verdict(&self, accepts: &[bool]) -> (Decision, Reason) {
        let (decision, reason, _) = self.enforced_verdict(accepts);
        if !self.enforced && !reason.always_enforced() {
            return (Decision::Allow, Reason::NotEnforced);
        }
        (decision, reason)
    }
}

/// How permissive a decision is: allow > escalate > deny.
pub(crate) fn permissiveness(decision: Decision) -> u8 {
    match decision {
        Decision::Deny => 0,
        Decision::Escalate => 1,
        Decision::Allow => 2,
    }
}

/// A call of `tool` whose one match text is `text`: the first `matchArgs`
/// (or built-in) argument, or a lone `argument` for tools whose text is
/// the action and every value.
pub(crate) fn witness_arguments(
    policy: &CompiledPolicy,
    tool: &str,
    text: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let key = match policy.tools.get(tool).map(|t| &t.match_text) {
        Some(crate::compile::MatchText::Named(names)) if !names.is_empty() => names[0].clone(),
        _ => "argument".to_owned(),
    };
    let mut map = serde_json::Map::new();
    map.insert(key, serde_json::Value::String(text.to_owned()));
    map
}
