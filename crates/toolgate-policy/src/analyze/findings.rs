//! `toolgate analyze --profile`: rules that can never decide, and profile
//! settings worth a second look, each with a stable code.

use serde::Serialize;

use super::bounded::{
    Class, Stop, evaluator_matches, explore_evaluated, incomplete, tells_sigmas_apart,
};
use super::model::{Entry, Role, Tier, ToolModel};
use crate::compile::CompiledPolicy;
use crate::flows::FlowSelector;
use crate::model::{Enforcement, Mode, Risk, SideEffect};
use crate::verdict::Decision;

/// How much a finding matters: an error fails `toolgate analyze` (exit 3)
/// and admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Probably not what the author meant.
    Warning,
    /// The profile does something its author did not ask for.
    Error,
}

/// One finding. `code` is stable; `message` is for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable code (docs/policy.md, "Analyzing a profile").
    pub code: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// The canonical tool, when the finding is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The profile field at fault (`spec.rules.bash.escalate[0]`).
    pub field: String,
    /// The glob at fault, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// A match text showing the problem, if one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub witness: Option<String>,
    /// What is wrong, in a sentence.
    pub message: String,
}

/// Everything `analyze` found in one profile, tools in name order.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// The profile's name.
    pub profile: String,
    /// The findings, most severe first within each tool.
    pub findings: Vec<Finding>,
}

impl Analysis {
    /// Whether any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

/// Analyzes a compiled profile.
pub fn analyze(policy: &CompiledPolicy) -> Analysis {
    let spec = &policy.spec;
    let mut findings = Vec::new();
    let mut tools: Vec<&String> = spec.effects.keys().collect();
    tools.sort();
    let high_risk = spec.effects.values().any(|e| e.risk == Risk::High);
    let risk_severity = |high: bool| {
        if high {
            Severity::Warning
        } else {
            Severity::Info
        }
    };
    if spec.mode == Mode::AllowAll {
        findings.push(Finding {
            code: "allow_all_profile",
            severity: risk_severity(high_risk),
            tool: None,
            field: "spec.mode".into(),
            glob: None,
            witness: None,
            message: "mode allowAll: every call that passes the hardline and egress checks is \
                      allowed, and the rules are not consulted"
                .into(),
        });
    }
    if let Some(mode) = spec.enforcement.filter(|e| *e != Enforcement::Enforce) {
        findings.push(not_enforced(None, "spec.enforcement", mode, high_risk));
    }
    for tool in tools {
        let effect = &spec.effects[tool];
        if let Some(mode) = effect.enforcement.filter(|e| *e != Enforcement::Enforce) {
            let field = format!("spec.effects.{tool}.enforcement");
            let high = effect.risk == Risk::High;
            findings.push(not_enforced(Some(tool), &field, mode, high));
        }
        let model = ToolModel::new(policy, tool);
        let has_rules = model
            .entries
            .iter()
            .any(|e| matches!(e.role, Role::Rule { .. }));
        if spec.mode != Mode::Rules {
            continue;
        }
        if !has_rules {
            findings.push(Finding {
                code: "effect_unused",
                severity: Severity::Warning,
                tool: Some(tool.clone()),
                field: format!("spec.effects.{tool}"),
                glob: None,
                witness: None,
                message: "no rule names this tool (nor `*`): every call of it is denied \
                          (no_matching_rule)"
                    .into(),
            });
            continue;
        }
        let mut own = Vec::new();
        tool_findings(tool, &model, &mut own);
        own.sort_by_key(|f| std::cmp::Reverse(f.severity));
        findings.extend(own);
    }
    findings.extend(flow_findings(policy));
    Analysis {
        profile: policy.name.clone(),
        findings,
    }
}

fn not_enforced(tool: Option<&String>, field: &str, mode: Enforcement, high: bool) -> Finding {
    Finding {
        code: "dry_run_profile",
        severity: if high {
            Severity::Warning
        } else {
            Severity::Info
        },
        tool: tool.cloned(),
        field: field.into(),
        glob: None,
        witness: None,
        message: format!(
            "enforcement {}: verdicts are only reported (hardline rules still bind){}",
            mode.as_str(),
            if high {
                "; high-risk tools run unchecked"
            } else {
                ""
            }
        ),
    }
}

/// The rule findings of one tool, from one exploration of all its globs
/// matched as the evaluator matches them (a text, or its lowercase copy).
fn tool_findings(tool: &str, model: &ToolModel, out: &mut Vec<Finding>) {
    let finding = |code, severity, i: usize, witness: Option<String>, message: String| Finding {
        code,
        severity,
        tool: Some(tool.to_owned()),
        field: model.entries[i].field.clone(),
        glob: Some(model.entries[i].glob.clone()),
        witness,
        message,
    };
    let classes = match explore_evaluated(&model.languages()) {
        Ok(classes) => classes,
        Err(stop) => {
            // Final sigma: name the glob at fault, which may be a
            // hardline entry shared by every exec or workspace tool.
            let at = (stop == Stop::FinalSigma)
                .then(|| sigma_entry(model))
                .flatten();
            out.push(Finding {
                code: "analysis_incomplete",
                severity: Severity::Warning,
                tool: Some(tool.to_owned()),
                field: at.map_or_else(|| format!("spec.rules.{tool}"), |e| e.field.clone()),
                glob: at.map(|e| e.glob.clone()),
                witness: None,
                message: incomplete(stop).into(),
            });
            return;
        }
    };
    let entries = &model.entries;
    let rules: Vec<usize> = (0..entries.len())
        .filter(|&i| matches!(entries[i].role, Role::Rule { .. }))
        .collect();
    let tier_of = |i: usize| match entries[i].role {
        Role::Rule { tier } => tier,
        _ => Tier::Deny,
    };
    let matching = |i: usize| classes.iter().filter(move |c| c.accepts[i]);
    let mut match_all: Option<usize> = None;
    for (k, &i) in rules.iter().enumerate() {
        let earlier = &rules[..k];
        let later = rules.len() > k + 1;
        let glob = &entries[i].glob;
        if let Some(&j) = earlier.iter().find(|&&j| entries[j].glob == *glob) {
            let message = format!("the same glob as {}, which decides first", entries[j].field);
            out.push(finding(
                "duplicate_glob",
                Severity::Warning,
                i,
                None,
                message,
            ));
            continue;
        }
        if matching(i).next().is_none() {
            let message = "matches no string at all (an empty set or range)".to_owned();
            out.push(finding(
                "glob_matches_nothing",
                Severity::Warning,
                i,
                None,
                message,
            ));
            continue;
        }
        let decided_before = |c: &Class| (0..i).any(|j| c.accepts[j]);
        let reaching: Option<&Class> = matching(i).find(|c| !decided_before(c));
        let allowed_instead = || {
            matching(i).find(|c| {
                model
                    .verdict_entry(&c.accepts)
                    .is_some_and(|d| tier_of(d) == Tier::Allow)
            })
        };
        if tier_of(i) == Tier::Escalate {
            let leaked = allowed_instead();
            match (reaching, leaked) {
                (None, Some(c)) => {
                    let message = format!(
                        "never asks a human: every call it matches is decided first, and \
                         `{}` is allowed without approval (the tiers run deny → allow → escalate)",
                        c.witness
                    );
                    out.push(finding(
                        "shadowed_escalate",
                        Severity::Error,
                        i,
                        Some(c.witness.clone()),
                        message,
                    ));
                    continue;
                }
                // A catch-all escalate after the allow list is the usual
                // "everything else asks": nothing to report.
                (Some(_), Some(c)) if !classes.iter().all(|c| c.accepts[i]) => {
                    let message = format!(
                        "some calls it matches are allowed by an allow rule first, e.g. `{}`",
                        c.witness
                    );
                    out.push(finding(
                        "escalate_partly_allowed",
                        Severity::Warning,
                        i,
                        Some(c.witness.clone()),
                        message,
                    ));
                }
                _ => {}
            }
        }
        if reaching.is_none() {
            let hardline = |c: &Class| {
                (0..i).any(|j| {
                    c.accepts[j]
                        && matches!(entries[j].role, Role::HardlineCommand | Role::HardlinePath)
                })
            };
            let same_tier = |c: &Class| {
                earlier
                    .iter()
                    .any(|&j| c.accepts[j] && tier_of(j) == tier_of(i))
            };
            let (code, message) = if matching(i).all(hardline) {
                (
                    "shadowed_by_hardline",
                    "every call it matches is denied by a hardline entry first",
                )
            } else if matching(i).all(same_tier) {
                (
                    "shadowed_in_tier",
                    "every string it matches is matched by an earlier glob of the same tier",
                )
            } else {
                (
                    "shadowed",
                    "every call it matches is decided by an earlier glob or by shell control",
                )
            };
            // After a match-all glob, match_all_first already says why.
            if match_all.is_none() || code == "shadowed_by_hardline" {
                out.push(finding(code, Severity::Warning, i, None, message.into()));
            }
        }
        let universal = classes.iter().all(|c| c.accepts[i]);
        if universal && later && match_all.is_none() {
            match_all = Some(i);
            // Only globs of the same key count as "others": `*` rules
            // after a tool's own match-all are expected.
            let key = |j: usize| entries[j].field.rsplit_once('.').map(|(k, _)| k.to_owned());
            if !rules[k + 1..].iter().any(|&j| key(j) == key(i)) {
                continue;
            }
            let message = "matches every string, so no glob after it (in this tier or a later \
                           one) ever decides"
                .to_owned();
            out.push(finding(
                "match_all_first",
                Severity::Warning,
                i,
                None,
                message,
            ));
        }
    }
}

impl ToolModel {
    /// The entry deciding a text matched by `accepts`, if a rule decides it.
    fn verdict_entry(&self, accepts: &[bool]) -> Option<usize> {
        let (_, _, entry) = self.enforced_verdict(accepts);
        entry.filter(|&i| matches!(self.entries[i].role, Role::Rule { .. }))
    }
}

/// The first entry of `model` telling `σ` from `ς`.
fn sigma_entry(model: &ToolModel) -> Option<&Entry> {
    model
        .entries
        .iter()
        .find(|e| e.union.iter().any(|g| tells_sigmas_apart(g)))
}

/// `flow_label_unsettable`: a flow rule one of whose `when` labels no
/// call the profile can allow (or escalate) sets, so it never fires; or,
/// when that cannot be decided, `analysis_incomplete` on the flow rule.
fn flow_findings(policy: &CompiledPolicy) -> Vec<Finding> {
    let Some(flows) = &policy.spec.flows else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, rule) in flows.rules.iter().enumerate() {
        for label in &rule.when {
            let Some(selector) = flows.labels.get(label) else {
                continue;
            };
            let field = format!("spec.flows.rules[{i}]");
            match settable(policy, selector) {
                Ok(true) => {}
                Ok(false) => out.push(Finding {
                    code: "flow_label_unsettable",
                    severity: Severity::Warning,
                    tool: None,
                    field,
                    glob: None,
                    witness: None,
                    message: format!(
                        "label `{label}` is set by no call this profile can allow, so this \
                         rule never applies"
                    ),
                }),
                Err(unknown) => {
                    let why = match unknown.stop {
                        Stop::FinalSigma => {
                            "a glob tells σ from ς, which the evaluator's \
                                             lowercase copy picks by context (final sigma)"
                        }
                        Stop::Budget | Stop::Deadline => "its globs are too intricate",
                    };
                    out.push(Finding {
                        code: "analysis_incomplete",
                        severity: Severity::Warning,
                        tool: Some(unknown.tool.clone()),
                        field,
                        glob: unknown.glob,
                        witness: None,
                        message: format!(
                            "whether label `{label}` is set by some call this profile can \
                             allow is not known: no call checked sets it, and for tool `{}` \
                             {why}, so flow_label_unsettable is not judged",
                            unknown.tool
                        ),
                    });
                }
            }
        }
    }
    out
}

/// A tool whose calls [`settable`] could not judge: why, and the glob at
/// fault when one glob is.
struct Unknown {
    tool: String,
    stop: Stop,
    glob: Option<String>,
}

/// Whether some call the profile may allow or escalate is selected by
/// `selector` (by tool or side effect and match text, or by provenance);
/// `Err` when none of the tools judged does and some tool could not be
/// judged.
fn settable(policy: &CompiledPolicy, selector: &FlowSelector) -> Result<bool, Unknown> {
    let by_any_kind = selector.tools.is_empty() && selector.side_effects.is_empty();
    let mut unknown = None;
    let mut tools: Vec<(&String, _)> = policy.spec.effects.iter().collect();
    tools.sort_by_key(|(tool, _)| *tool);
    for (tool, effect) in tools {
        let by_provenance =
            !selector.provenance.is_empty() && effect.side_effect == SideEffect::WorkspaceRead;
        let by_kind = (by_any_kind && !selector.match_text.is_empty())
            || selector.side_effects.contains(&effect.side_effect)
            || selector.tools.iter().any(|glob| {
                let glob = policy.canonical_tool(glob);
                evaluator_matches(glob, tool)
            });
        if !by_kind && !by_provenance {
            continue;
        }
        let model = ToolModel::new(policy, tool);
        let mut globs = model.languages();
        let own = globs.len();
        let texts: &[String] = if by_kind && !by_provenance {
            &selector.match_text
        } else {
            &[]
        };
        globs.extend(texts.iter().map(|t| vec![t.as_str()]));
        let classes = match explore_evaluated(&globs) {
            Ok(classes) => classes,
            Err(stop) => {
                let glob = (stop == Stop::FinalSigma)
                    .then(|| {
                        let text = texts.iter().find(|t| tells_sigmas_apart(t));
                        text.or_else(|| sigma_entry(&model).map(|e| &e.glob))
                    })
                    .flatten()
                    .cloned();
                unknown.get_or_insert(Unknown {
                    tool: tool.clone(),
                    stop,
                    glob,
                });
                continue;
            }
        };
        if classes.iter().any(|c| {
            (texts.is_empty() || c.accepts[own..].iter().any(|a| *a))
                && model.verdict(&c.accepts[..own]).0 != Decision::Deny
        }) {
            return Ok(true);
        }
    }
    unknown.map_or(Ok(false), Err)
}
