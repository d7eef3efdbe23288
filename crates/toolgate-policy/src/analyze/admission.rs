//! The cheap subset of [`analyze`](super::analyze) that admission runs on
//! every PolicyProfile write: a `shadowed_escalate` refuses the profile,
//! and duplicate globs come back as warnings.
//!
//! The full analysis explores all of a tool's globs at once, which can take
//! seconds on a large profile in a debug build, past a webhook's timeout.
//! Here each escalate glob is asked one small question instead (is it
//! covered by the tool's allow globs, `*` included, net of what is denied
//! before them?), with a small state budget past which that glob is not
//! judged (`analysis_incomplete`, never a refusal).

use std::collections::{BTreeMap, BTreeSet};

use super::findings::{Finding, Severity};
use super::glob_lang::{Class, explore_unions_budget, explore_unions_within};
use super::model::{Role, Tier, ToolModel};

use crate::compile::{ANY_TOOL, CompiledPolicy};
use crate::error::PolicyError;
use crate::model::Mode;

/// Most DFA states one admission question may build: a few milliseconds
/// in a release build, well under a webhook timeout in a debug one.
pub const ADMISSION_MAX_STATES: usize = 4_000;

/// Glob characters (about NFA positions, which each state's step walks)
/// of a question that still gets the whole state budget; a larger question
/// gets proportionally fewer states, so its time stays bounded too.
const REFERENCE_SIZE: usize = 600;

/// How many full questions' worth of work one whole profile may do, so
/// that many intricate escalate globs cannot add up past the webhook's
/// timeout either; once spent, the remaining globs are not judged.
const QUESTIONS_PER_PROFILE: usize = 4;

/// Checks a compiled profile for admission: the first escalate glob that
/// never asks a human is an error ([`PolicyError::ShadowedEscalate`]);
/// otherwise the warnings (`duplicate_glob`, `analysis_incomplete`), each
/// field reported once.
pub fn admission_check(policy: &CompiledPolicy) -> Result<Vec<Finding>, PolicyError> {
    admission_check_within(policy, ADMISSION_MAX_STATES)
}

/// [`admission_check`] with an explicit state budget per question (and
/// [`QUESTIONS_PER_PROFILE`] times that for the profile).
pub fn admission_check_within(
    policy: &CompiledPolicy,
    max_states: usize,
) -> Result<Vec<Finding>, PolicyError> {
    let mut warnings: Vec<Finding> = Vec::new();
    // Work in states × question size.
    let mut total = max_states
        .saturating_mul(REFERENCE_SIZE)
        .saturating_mul(QUESTIONS_PER_PROFILE);
    if policy.spec.mode != Mode::Rules {
        return Ok(warnings);
    }
    let mut tools: Vec<&String> = policy.spec.effects.keys().collect();
    tools.sort();
    let any_prefix = format!("spec.rules.{ANY_TOOL}.");
    // `*` escalate globs: the first tool each is shadowed in, and those
    // some tool still reaches.
    let mut any_shadowed: BTreeMap<String, PolicyError> = BTreeMap::new();
    let mut any_asks: BTreeSet<String> = BTreeSet::new();
    for tool in tools {
        let model = ToolModel::new(policy, tool);
        let entries = &model.entries;
        let is_rule = |j: usize| matches!(entries[j].role, Role::Rule { .. });
        let allow: Vec<usize> = (0..entries.len())
            .filter(|&j| entries[j].role == (Role::Rule { tier: Tier::Allow }))
            .collect();
        let mut shadowed_here = BTreeSet::new();
        for i in (0..entries.len()).filter(|&i| is_rule(i)) {
            let entry = &entries[i];
            let duplicate = (0..i).find(|&j| is_rule(j) && entries[j].glob == entry.glob);
            if let Some(j) = duplicate {
                let message = format!("the same glob as {}, which decides first", entries[j].field);
                push(
                    &mut warnings,
                    finding(tool, "duplicate_glob", i, &model, message),
                );
                continue;
            }
            if entry.role
                != (Role::Rule {
                    tier: Tier::Escalate,
                })
                || allow.is_empty()
            {
                continue;
            }
            // Everything that denies before the allow tier: hardlines,
            // shell control, deny rules.
            let prior: Vec<&str> = (0..i)
                .filter(|&j| !matches!(entries[j].role, Role::Rule { tier } if tier != Tier::Deny))
                .flat_map(|j| entries[j].union.iter().map(String::as_str))
                .collect();
            let allowed: Vec<&str> = allow.iter().map(|&j| entries[j].glob.as_str()).collect();
            let question = [prior.clone(), allowed, vec![entry.glob.as_str()]];
            let size: usize = question.iter().flatten().map(|g| g.len() + 1).sum();
            let states = max_states
                .min(max_states.saturating_mul(REFERENCE_SIZE) / size)
                .min(total / size);
            let mut budget = states;
            let explored = (states > 0)
                .then(|| explore_unions_budget(&question, &mut budget))
                .flatten();
            total -= (states - budget) * size;
            let Some(classes) = explored else {
                let message = "too intricate to compare with the allow globs within the \
                               admission budget; run `toolgate analyze` for the full check"
                    .to_owned();
                push(
                    &mut warnings,
                    finding(tool, "analysis_incomplete", i, &model, message),
                );
                continue;
            };
            let mut matched = classes.iter().filter(|c| c.accepts[2]);
            if !matched.clone().all(|c| c.accepts[0] || c.accepts[1]) {
                continue;
            }
            let Some(leak) = matched.find(|c| c.accepts[1] && !c.accepts[0]) else {
                continue;
            };
            // A `*` glob may be shadowed in many tools: name the allow
            // globs by the witness alone, without another exploration.
            let any = entry.field.starts_with(&any_prefix);
            let error = PolicyError::ShadowedEscalate {
                field: entry.field.clone(),
                tool: tool.clone(),
                glob: entry.glob.clone(),
                allowed_by: covering(
                    &model,
                    &prior,
                    &allow,
                    i,
                    leak,
                    if any { 0 } else { states },
                ),
                witness: leak.witness.clone(),
            };
            if !any {
                return Err(error);
            }
            shadowed_here.insert(entry.field.clone());
            any_shadowed.entry(entry.field.clone()).or_insert(error);
        }
        // A `*` escalate glob still asks for the tools it is not shadowed
        // in (a tool allowed wholesale next to a catch-all escalate is the
        // usual shape): refused only when no tool is left to ask for.
        any_asks.extend(
            (0..entries.len())
                .filter(|&i| entries[i].field.starts_with(&any_prefix))
                .filter(|&i| {
                    entries[i].role
                        == (Role::Rule {
                            tier: Tier::Escalate,
                        })
                })
                .map(|i| entries[i].field.clone())
                .filter(|field| !shadowed_here.contains(field)),
        );
    }
    match any_shadowed
        .into_iter()
        .find(|(field, _)| !any_asks.contains(field))
    {
        Some((_, error)) => Err(error),
        None => Ok(warnings),
    }
}

/// The allow globs (as "`glob` (field)") that allow some call escalate
/// entry `i` matches; past the budget (or with none), those allowing the
/// witness.
fn covering(
    model: &ToolModel,
    prior: &[&str],
    allow: &[usize],
    i: usize,
    leak: &Class,
    max_states: usize,
) -> Vec<String> {
    let entries = &model.entries;
    let mut question = vec![prior.to_vec(), vec![entries[i].glob.as_str()]];
    question.extend(allow.iter().map(|&j| vec![entries[j].glob.as_str()]));
    let classes = explore_unions_within(&question, max_states);
    let by = |k: usize| match &classes {
        Some(classes) => classes
            .iter()
            .any(|c| c.accepts[1] && !c.accepts[0] && c.accepts[2 + k]),
        None => crate::fnmatch::Matcher::new(&entries[allow[k]].glob)
            .is_ok_and(|m| m.is_match(&leak.witness)),
    };
    (0..allow.len())
        .filter(|&k| by(k))
        .map(|k| format!("`{}` ({})", entries[allow[k]].glob, entries[allow[k]].field))
        .collect()
}

fn finding(
    tool: &str,
    code: &'static str,
    i: usize,
    model: &ToolModel,
    message: String,
) -> Finding {
    Finding {
        code,
        severity: Severity::Warning,
        tool: Some(tool.to_owned()),
        field: model.entries[i].field.clone(),
        glob: Some(model.entries[i].glob.clone()),
        witness: None,
        message,
    }
}

/// Adds `finding` unless its field already has one of its code (a `*`
/// rule is read once per tool).
fn push(out: &mut Vec<Finding>, finding: Finding) {
    if !out
        .iter()
        .any(|f| f.code == finding.code && f.field == finding.field)
    {
        out.push(finding);
    }
}
