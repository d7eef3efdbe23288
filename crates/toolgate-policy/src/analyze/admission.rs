//! The cheap subset of [`analyze`](super::analyze) that the validating
//! webhook runs on every PolicyProfile write: a `shadowed_escalate`
//! refuses the profile; a deny glob wholly under the hardline entries, a
//! duplicate glob, a tool no rule names, and a check that was skipped come
//! back as warnings.
//!
//! Admission runs in the process that also injects pods (failurePolicy
//! Fail), so the work is bounded before it starts: per tool, the globs the
//! question reads are capped in number, length and distinct characters
//! ([`AdmissionLimits`]), which sizes every allocation made before the
//! automaton walk; the walk itself draws on a work budget shared by the
//! whole profile, a cap on the states it stores, and a deadline. The
//! deadline is also checked before each tool and each rule, and the
//! passes outside the walk (duplicates, `*` globs, findings) are linear,
//! so a profile of many tools sharing thousands of `*` globs stops on
//! time too.
//!
//! Past any cap the shadow check is skipped and the profile is admitted
//! with a warning saying so (`analysis_skipped`). Failing open is right
//! for this one check only: it is advisory (it catches a loosening the
//! author did not mean; it does not guard a boundary), every other rule of
//! the profile is still validated and refuses as before, and refusing
//! whatever is too large to analyse would let one large glob block every
//! profile write. `toolgate analyze` runs the full analysis without these
//! caps.
//!
//! The globs are matched as the evaluator matches them, as in `toolgate
//! analyze`: the text, or its lowercase copy when the text has an
//! uppercase letter (see [`super::bounded`]); so an allow glob can shadow
//! an uppercase escalate glob, and a deny glob can catch, by its lowercase
//! copy, calls an allow glob would otherwise let through.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::bounded::{self, Budget, Class, Matching, Stop, evaluator_matches, tells_sigmas_apart};
use super::findings::{Finding, Severity};
use super::model::{Role, Tier, ToolModel};
use crate::compile::{ANY_TOOL, CompiledPolicy};
use crate::error::PolicyError;
use crate::model::Mode;

/// The caps of one admission analysis.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionLimits {
    /// Longest glob (bytes) a question may read.
    pub max_glob_bytes: usize,
    /// Most globs (hardline and rule globs, own and `*`) of one tool.
    pub max_globs_per_tool: usize,
    /// Most bytes of all those globs together.
    pub max_bytes_per_tool: usize,
    /// Most distinct characters in those globs.
    pub max_distinct_chars: usize,
    /// Work units for the whole profile (automaton steps, plus the
    /// tables each question builds).
    pub max_work: u64,
    /// Most `u32`s the stored states of one question hold (4 bytes each).
    pub max_stored: usize,
}

/// The caps the webhook uses. At the worst inputs they let through
/// (`worst_profiles` in `tests/it/analyze.rs`) the whole budget is spent
/// in ~0.3 s in a release build (~10 s in a debug one, where the deadline
/// stops it first) at a peak of ~16 MiB resident for the whole process.
pub const ADMISSION_LIMITS: AdmissionLimits = AdmissionLimits {
    max_glob_bytes: 512,
    max_globs_per_tool: 256,
    max_bytes_per_tool: 8 * 1024,
    max_distinct_chars: 256,
    max_work: 40_000_000,
    max_stored: 2_000_000,
};

/// Checks a compiled profile for admission: the first escalate glob that
/// never asks a human is an error ([`PolicyError::ShadowedEscalate`]);
/// otherwise the warnings, each field once. Stops at `deadline` (what is
/// left unjudged is an `analysis_skipped` warning).
pub fn admission_check(
    policy: &CompiledPolicy,
    deadline: Instant,
) -> Result<Vec<Finding>, PolicyError> {
    admission_check_with(policy, &ADMISSION_LIMITS, deadline)
}

/// [`admission_check`] under explicit caps.
pub fn admission_check_with(
    policy: &CompiledPolicy,
    limits: &AdmissionLimits,
    deadline: Instant,
) -> Result<Vec<Finding>, PolicyError> {
    let mut out = Out::default();
    if policy.spec.mode != Mode::Rules {
        return Ok(out.findings);
    }
    let mut budget = Budget {
        work: limits.max_work,
        stored: limits.max_stored,
        states: usize::MAX,
        deadline: Some(deadline),
    };
    let late = || Instant::now() >= deadline;
    let mut tools: Vec<&String> = policy.spec.effects.keys().collect();
    tools.sort();
    // `*` escalate globs in entry order, and where each is by field:
    // (reached or unjudged in some tool, the first tool's shadowing error).
    let mut any: Vec<(bool, Option<PolicyError>)> = Vec::new();
    let mut any_slot: HashMap<String, usize> = HashMap::new();
    let any_prefix = format!("spec.rules.{ANY_TOOL}.");
    // Some tool was left (partly) unjudged for lack of time: no `*`
    // escalate glob is known to be shadowed in every tool.
    let mut unjudged = false;
    for tool in tools {
        // Checked before the tool's model is built: a profile of many
        // tools sharing many `*` globs stops here once time is up.
        if late() {
            out.push(skip(tool, &stopped(Stop::Deadline, None)));
            unjudged = true;
            continue;
        }
        let model = ToolModel::new(policy, tool);
        let entries = &model.entries;
        let rule = |j: usize| matches!(entries[j].role, Role::Rule { .. });
        if !(0..entries.len()).any(rule) {
            out.push(unused(tool));
            continue;
        }
        let skipped = over_caps(&model, limits);
        duplicates(tool, &model, &mut out);
        if let Some(why) = &skipped {
            out.push(skip(tool, why));
        }
        for i in (0..entries.len()).filter(|&i| rule(i)) {
            if late() {
                out.push(skip(tool, &stopped(Stop::Deadline, None)));
                unjudged = true;
                break;
            }
            let entry = &entries[i];
            let slot = entry.field.starts_with(&any_prefix).then(|| {
                *any_slot.entry(entry.field.clone()).or_insert_with(|| {
                    any.push((false, None));
                    any.len() - 1
                })
            });
            if entry.role
                != (Role::Rule {
                    tier: Tier::Escalate,
                })
            {
                let deny = entry.role == (Role::Rule { tier: Tier::Deny });
                if deny
                    && slot.is_none()
                    && skipped.is_none()
                    && let Some(message) = under_hardline(&model, i, &mut budget, &mut out, tool)
                {
                    let found = finding(tool, &model, i, "shadowed_by_hardline", message);
                    out.push(found);
                }
                continue;
            }
            let verdict = match &skipped {
                Some(_) => Err(()),
                None => shadowed(tool, &model, i, &mut budget).map_err(|stop| {
                    out.push(skip(tool, &stopped(stop, Some(&model))));
                }),
            };
            match (verdict, slot) {
                (Ok(Some(error)), None) => return Err(error),
                (Ok(Some(error)), Some(k)) => {
                    any[k].1.get_or_insert(error);
                }
                // Reached, not leaking, or not judged: asks someone.
                (_, Some(k)) => any[k].0 = true,
                (_, None) => {}
            }
        }
    }
    // A `*` escalate glob still asks for every tool it is not shadowed in
    // (a tool allowed wholesale beside a catch-all escalate is the usual
    // shape): refused only when it is shadowed in every tool.
    match any.into_iter().find_map(|(asks, e)| e.filter(|_| !asks)) {
        Some(error) if !unjudged => Err(error),
        _ => Ok(out.findings),
    }
}

/// `duplicate_glob`: a rule glob the same as an earlier one of its tier
/// (a tier only: `*` escalating what a tool allows wholesale is the usual
/// "everything else asks", not a slip). One pass with a map, so a tool
/// with thousands of globs costs no more than reading them.
fn duplicates(tool: &str, model: &ToolModel, out: &mut Out) {
    let mut first: HashMap<(Tier, &str), usize> = HashMap::new();
    for (i, entry) in model.entries.iter().enumerate() {
        let Role::Rule { tier } = entry.role else {
            continue;
        };
        let j = *first.entry((tier, entry.glob.as_str())).or_insert(i);
        if j != i {
            let message = format!(
                "`{}` is the same glob as {}, which decides first",
                entry.glob, model.entries[j].field
            );
            out.push(finding(tool, model, i, "duplicate_glob", message));
        }
    }
}

/// Why the tool's globs are past the caps, checked before anything is
/// parsed or allocated for them.
fn over_caps(model: &ToolModel, limits: &AdmissionLimits) -> Option<String> {
    let globs = || model.entries.iter().flat_map(|e| e.union.iter());
    let count = globs().count();
    if count > limits.max_globs_per_tool {
        return Some(format!(
            "{count} globs, more than the {} the admission check reads",
            limits.max_globs_per_tool
        ));
    }
    if let Some(e) = model
        .entries
        .iter()
        .find(|e| e.glob.len() > limits.max_glob_bytes)
    {
        return Some(format!(
            "{} is {} bytes long, more than {}",
            e.field,
            e.glob.len(),
            limits.max_glob_bytes
        ));
    }
    let bytes: usize = globs().map(String::len).sum();
    if bytes > limits.max_bytes_per_tool {
        return Some(format!(
            "its globs hold {bytes} bytes, more than {}",
            limits.max_bytes_per_tool
        ));
    }
    // At most `max_bytes_per_tool` characters: a bounded vector.
    let mut chars: Vec<char> = globs().flat_map(|g| g.chars()).collect();
    chars.sort_unstable();
    chars.dedup();
    if chars.len() > limits.max_distinct_chars {
        return Some(format!(
            "its globs use {} distinct characters, more than {}",
            chars.len(),
            limits.max_distinct_chars
        ));
    }
    None
}

/// Explores `unions` after charging the tables it builds (sets times
/// intervals) to the budget.
fn explore(
    unions: &[Vec<&str>],
    focus: usize,
    enough: &dyn Fn(&[bool]) -> bool,
    budget: &mut Budget,
) -> Result<Vec<Class>, Stop> {
    let bytes: u64 = unions.iter().flatten().map(|g| g.len() as u64 + 1).sum();
    let mut chars: Vec<char> = unions.iter().flatten().flat_map(|g| g.chars()).collect();
    chars.sort_unstable();
    chars.dedup();
    // Plus the per-question pass over the ~1,500 cased characters.
    let tables = bytes * (2 * chars.len() as u64 + 2) + 32_768;
    budget.work = budget.work.checked_sub(tables).ok_or(Stop::Budget)?;
    bounded::explore(unions, Matching::Evaluator, Some(focus), enough, budget)
}

/// Whether escalate entry `i` is shadowed: every call it matches is
/// decided before the escalate tier (hardline, shell control, deny, allow;
/// earlier escalate globs do not count), and some is allowed. The error
/// names the allow globs that allow the witness.
fn shadowed(
    tool: &str,
    model: &ToolModel,
    i: usize,
    budget: &mut Budget,
) -> Result<Option<PolicyError>, Stop> {
    let entries = &model.entries;
    let allow: Vec<usize> = (0..i)
        .filter(|&j| entries[j].role == (Role::Rule { tier: Tier::Allow }))
        .collect();
    if allow.is_empty() {
        return Ok(None);
    }
    let prior: Vec<&str> = (0..i)
        .filter(|&j| !matches!(entries[j].role, Role::Rule { tier } if tier != Tier::Deny))
        .flat_map(|j| entries[j].union.iter().map(String::as_str))
        .collect();
    let allowed: Vec<&str> = allow.iter().map(|&j| entries[j].glob.as_str()).collect();
    let question = [prior, allowed, vec![entries[i].glob.as_str()]];
    // A text the escalate glob matches and nothing before it does: it
    // asks, and the question is answered.
    let classes = explore(&question, 2, &|a| a[2] && !a[0] && !a[1], budget)?;
    let mut matched = classes.iter().filter(|c| c.accepts[2]);
    if !matched.clone().all(|c| c.accepts[0] || c.accepts[1]) {
        return Ok(None);
    }
    let Some(leak) = matched.find(|c| c.accepts[1] && !c.accepts[0]) else {
        return Ok(None);
    };
    let by = allow
        .iter()
        .filter(|&&j| evaluator_matches(&entries[j].glob, &leak.witness))
        .map(|&j| format!("`{}` ({})", clean(&entries[j].glob, 120), entries[j].field))
        .take(3)
        .collect();
    Ok(Some(PolicyError::ShadowedEscalate {
        field: entries[i].field.clone(),
        tool: tool.to_owned(),
        glob: clean(&entries[i].glob, 120),
        allowed_by: by,
        witness: clean(&leak.witness, 80),
    }))
}

/// `Some(message)` when every call deny entry `i` matches is denied by a
/// hardline entry first.
fn under_hardline(
    model: &ToolModel,
    i: usize,
    budget: &mut Budget,
    out: &mut Out,
    tool: &str,
) -> Option<String> {
    let entries = &model.entries;
    let hardline: Vec<&str> = entries
        .iter()
        .filter(|e| matches!(e.role, Role::HardlineCommand | Role::HardlinePath))
        .map(|e| e.glob.as_str())
        .collect();
    if hardline.is_empty() {
        return None;
    }
    let question = [hardline, vec![entries[i].glob.as_str()]];
    let classes = match explore(&question, 1, &|a| a[1] && !a[0], budget) {
        Ok(classes) => classes,
        Err(stop) => {
            out.push(skip(tool, &stopped(stop, Some(model))));
            return None;
        }
    };
    let matched = || classes.iter().filter(|c| c.accepts[1]);
    (matched().next().is_some() && matched().all(|c| c.accepts[0])).then(|| {
        "every call it matches is denied by a hardline entry first; the deny glob never decides"
            .to_owned()
    })
}

/// Why a question stopped; for final sigma, naming the tool's first glob
/// at fault when the model is at hand.
fn stopped(stop: Stop, model: Option<&ToolModel>) -> String {
    match stop {
        Stop::Budget => "the profile's analysis budget is spent".into(),
        Stop::Deadline => "the analysis ran out of time".into(),
        Stop::FinalSigma => {
            let at = model
                .and_then(|m| {
                    m.entries
                        .iter()
                        .find(|e| e.union.iter().any(|g| tells_sigmas_apart(g)))
                })
                .map(|e| format!(" ({})", e.field))
                .unwrap_or_default();
            format!("a glob{at} tells σ from ς, which lowercasing picks by context (final sigma)")
        }
    }
}

fn finding(
    tool: &str,
    model: &ToolModel,
    i: usize,
    code: &'static str,
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

fn unused(tool: &str) -> Finding {
    Finding {
        code: "effect_unused",
        severity: Severity::Warning,
        tool: Some(tool.to_owned()),
        field: format!("spec.effects.{tool}"),
        glob: None,
        witness: None,
        message: "no rule names this tool (nor `*`): every call of it is denied".into(),
    }
}

fn skip(tool: &str, why: &str) -> Finding {
    Finding {
        code: "analysis_skipped",
        severity: Severity::Warning,
        tool: Some(tool.to_owned()),
        field: format!("spec.rules.{tool}"),
        glob: None,
        witness: None,
        message: format!(
            "the shadowed-escalate check was skipped for this tool ({why}); the profile is \
             admitted unchecked on this point, run `toolgate analyze` for the full check"
        ),
    }
}

/// The findings so far, each (code, field) once (a `*` rule is read once
/// per tool), kept with a set so thousands of them cost a pass.
#[derive(Default)]
struct Out {
    findings: Vec<Finding>,
    seen: HashSet<(&'static str, String)>,
}

impl Out {
    fn push(&mut self, finding: Finding) {
        if self.seen.insert((finding.code, finding.field.clone())) {
            self.findings.push(finding);
        }
    }
}

/// Most admission warnings returned (the last says how many were left
/// out), and most characters in each.
pub const MAX_WARNINGS: usize = 10;
/// See [`MAX_WARNINGS`].
pub const MAX_WARNING_CHARS: usize = 240;

/// The findings as admission warnings: `field: message [code]`, escaped
/// ([`clean`]), at most [`MAX_WARNING_CHARS`] characters each and
/// [`MAX_WARNINGS`] in all.
pub fn admission_warnings(findings: &[Finding]) -> Vec<String> {
    let line = |f: &Finding| {
        let code = format!(" [{}]", f.code);
        let text = clean(
            &format!("{}: {}", f.field, f.message),
            MAX_WARNING_CHARS - code.len(),
        );
        text + &code
    };
    if findings.len() <= MAX_WARNINGS {
        return findings.iter().map(line).collect();
    }
    let mut out: Vec<String> = findings[..MAX_WARNINGS - 1].iter().map(line).collect();
    out.push(format!(
        "{} more findings not shown; run `toolgate analyze` for all of them",
        findings.len() - (MAX_WARNINGS - 1)
    ));
    out
}

/// `text` as printable ASCII of at most `max` characters: every other
/// character (control characters, newlines, bidirectional overrides,
/// non-ASCII letters) becomes `\u{…}`, and a longer text is cut with `...`.
/// Kubernetes sends warnings as HTTP `Warning` headers and prints them on
/// terminals, so nothing a profile author wrote may reach either raw.
pub fn clean(text: &str, max: usize) -> String {
    let mut out = String::new();
    // Where to cut if the text turns out too long: the last piece
    // boundary leaving room for the `...`.
    let mut cut = 0;
    for c in text.chars() {
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
        if out.len() + 3 <= max {
            cut = out.len();
        }
        if out.len() > max {
            out.truncate(cut);
            out.push_str("...");
            return out;
        }
    }
    out
}
