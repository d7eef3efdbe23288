//! `toolgate analyze --compare OLD NEW`: per tool, whether NEW decides
//! some call more or less permissively than OLD, with a witness call for
//! every change, re-checked with the real evaluator.

use std::collections::BTreeSet;

use serde::Serialize;

use super::bounded::explore_evaluated;
use super::model::{ToolModel, permissiveness, witness_arguments};
use crate::compile::CompiledPolicy;
use crate::eval::{Call, Context};
use crate::verdict::{Decision, Reason};

/// How NEW relates to OLD for one tool (allow > escalate > deny).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// Every call is decided the same.
    Equivalent,
    /// Some call is decided more permissively, none less.
    MorePermissive,
    /// Some call is decided less permissively, none more.
    LessPermissive,
    /// Some calls each way.
    Incomparable,
    /// The same decision everywhere, for another reason somewhere.
    SameDecisions,
    /// Too intricate to decide exactly (or a glob tells `σ` from `ς`,
    /// which the evaluator's lowercase copy picks by context).
    Unknown,
}

/// A call decided differently by the two profiles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Witness {
    /// The canonical tool.
    pub tool: String,
    /// The call's match text.
    pub argument: String,
    /// The call's arguments (the match text in the tool's match argument).
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// OLD's verdict and reason.
    pub old: Decision,
    /// Why OLD decides so.
    pub old_reason: Reason,
    /// NEW's verdict.
    pub new: Decision,
    /// Why NEW decides so.
    pub new_reason: Reason,
    /// Whether evaluating `arguments` with the real evaluator under both
    /// profiles gives exactly these verdicts and reasons.
    pub reproduced: bool,
}

/// One tool's comparison.
#[derive(Debug, Clone, Serialize)]
pub struct ToolComparison {
    /// The canonical tool.
    pub tool: String,
    /// How NEW relates to OLD.
    pub relation: Relation,
    /// A shortest witness per pair of (old, new) answers that differ.
    pub witnesses: Vec<Witness>,
}

/// The comparison of two profiles, tools in name order.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// OLD's name.
    pub old: String,
    /// NEW's name.
    pub new: String,
    /// Every tool either profile declares.
    pub tools: Vec<ToolComparison>,
}

/// Compares every tool OLD or NEW declares, for calls with one match text
/// made by a run carrying no flow labels (see [`super::model`]).
pub fn compare(old: &CompiledPolicy, new: &CompiledPolicy) -> Comparison {
    let names: BTreeSet<&String> = old.tools.keys().chain(new.tools.keys()).collect();
    Comparison {
        old: old.name.clone(),
        new: new.name.clone(),
        tools: names
            .into_iter()
            .map(|t| compare_tool(old, new, t))
            .collect(),
    }
}

fn compare_tool(old: &CompiledPolicy, new: &CompiledPolicy, tool: &str) -> ToolComparison {
    let (a, b) = (ToolModel::new(old, tool), ToolModel::new(new, tool));
    let mut globs = a.languages();
    let split = globs.len();
    globs.extend(b.languages());
    // Classes of texts as the evaluator matches them (lowercase copy too).
    let Ok(classes) = explore_evaluated(&globs) else {
        return ToolComparison {
            tool: tool.to_owned(),
            relation: Relation::Unknown,
            witnesses: Vec::new(),
        };
    };
    let (mut looser, mut stricter, mut reasons) = (false, false, false);
    let mut witnesses: Vec<Witness> = Vec::new();
    for class in &classes {
        let (old_d, old_r) = a.verdict(&class.accepts[..split]);
        let (new_d, new_r) = b.verdict(&class.accepts[split..]);
        if (old_d, old_r) == (new_d, new_r) {
            continue;
        }
        let (po, pn) = (permissiveness(old_d), permissiveness(new_d));
        looser |= pn > po;
        stricter |= pn < po;
        reasons |= pn == po;
        // Classes come shortest witness first: keep the first per pair.
        if witnesses
            .iter()
            .any(|w| (w.old, w.old_reason, w.new, w.new_reason) == (old_d, old_r, new_d, new_r))
        {
            continue;
        }
        let mut arguments = witness_arguments(old, tool, &class.witness);
        for (k, v) in witness_arguments(new, tool, &class.witness) {
            arguments.insert(k, v);
        }
        let reproduced = reproduces(old, tool, &arguments, (old_d, old_r))
            && reproduces(new, tool, &arguments, (new_d, new_r));
        witnesses.push(Witness {
            tool: tool.to_owned(),
            argument: class.witness.clone(),
            arguments,
            old: old_d,
            old_reason: old_r,
            new: new_d,
            new_reason: new_r,
            reproduced,
        });
    }
    let relation = match (looser, stricter, reasons) {
        (true, true, _) => Relation::Incomparable,
        (true, false, _) => Relation::MorePermissive,
        (false, true, _) => Relation::LessPermissive,
        (false, false, true) => Relation::SameDecisions,
        (false, false, false) => Relation::Equivalent,
    };
    ToolComparison {
        tool: tool.to_owned(),
        relation,
        witnesses,
    }
}

/// Whether the real evaluator answers `expected` for the call.
fn reproduces(
    policy: &CompiledPolicy,
    tool: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
    expected: (Decision, Reason),
) -> bool {
    let call = Call {
        tool,
        action: None,
        arguments,
    };
    let verdict = policy.evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH));
    (verdict.verdict, verdict.reason) == expected
}
