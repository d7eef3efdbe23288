//! What a replay found: totals, the transition matrix, each changed
//! decision (loosenings first) and what could not be replayed, and why.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::Timestamp;
use serde::Serialize;
use toolgate_policy::Decision;

use crate::decisions::LoggedDecision;

/// Most changed (and unreplayable) decisions a report lists one by one;
/// the counts cover them all.
pub const MAX_LISTED: usize = 10_000;

/// A verdict with why it was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// `allow`, `deny` or `escalate`.
    pub verdict: Decision,
    /// The reason code.
    pub reason: String,
    /// The rule that matched, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl Outcome {
    /// `deny deny_rule (deny:bash:rm *)`, as the table prints it.
    fn text(&self) -> String {
        match &self.rule {
            Some(rule) => format!(
                "{} {} ({})",
                self.verdict.as_str(),
                self.reason,
                escape(rule)
            ),
            None => format!("{} {}", self.verdict.as_str(), self.reason),
        }
    }
}

/// Agent-chosen text (tool, run id, rule) as a terminal shows it safely.
fn escape(text: &str) -> String {
    text.escape_debug().to_string()
}

/// A verdict pair: what was decided, what the candidate decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Transition {
    /// The recorded verdict.
    pub from: Decision,
    /// The candidate's verdict.
    pub to: Decision,
}

impl Transition {
    /// `allow→deny`, as reports print it.
    pub fn label(self) -> String {
        format!("{}→{}", self.from.as_str(), self.to.as_str())
    }

    /// Whether the candidate lets through what was held back: more
    /// permissive, which reviewers must see first.
    pub fn loosens(self) -> bool {
        rank(self.to) < rank(self.from)
    }

    /// Order of listing: deny→allow, then the other loosenings, then the
    /// tightenings.
    fn priority(self) -> u8 {
        match (self.from, self.to) {
            (Decision::Deny, Decision::Allow) => 0,
            _ if self.loosens() => 1,
            _ => 2,
        }
    }
}

/// How strict a verdict is: allow < escalate < deny.
fn rank(d: Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::Escalate => 1,
        Decision::Deny => 2,
    }
}

/// One decision the candidate decides differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangedDecision {
    /// The recorded decision's id.
    pub decision_id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its run.
    pub run_id: String,
    /// The tool called.
    pub tool: String,
    /// When it was decided.
    pub at: Timestamp,
    /// What the policy decided then.
    pub old: Outcome,
    /// What the candidate decides.
    pub new: Outcome,
}

impl ChangedDecision {
    /// Its verdict pair.
    pub fn transition(&self) -> Transition {
        Transition {
            from: self.old.verdict,
            to: self.new.verdict,
        }
    }
}

/// Why a recorded decision was not replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// No input was recorded (`recordInputs: none`, pruned, or a refusal
    /// made before evaluation).
    NoInput,
    /// The input was recorded masked and masking changed it: deciding the
    /// masked text would judge what the agent never sent.
    Masked,
    /// The stored input contradicts its decision: not the SHA-256 its
    /// chained message holds, another tool, or other arguments than its
    /// `args_digest` names.
    InputMismatch,
    /// The run's or the sidecar's state refused it (cancelled run, no
    /// bundle, audit down, ...): no policy decided it.
    NotDecidedByPolicy,
}

impl Why {
    /// The code reports print.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoInput => "no_input",
            Self::Masked => "masked",
            Self::InputMismatch => "input_mismatch",
            Self::NotDecidedByPolicy => "not_decided_by_policy",
        }
    }
}

/// One decision not replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreplayable {
    /// The recorded decision's id.
    pub decision_id: String,
    /// Its tool.
    pub tool: String,
    /// Its recorded reason.
    pub reason: String,
    /// Why it was not replayed.
    pub why: Why,
}

/// The result of a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// The candidate's policy version.
    pub candidate_version: String,
    /// Decisions read from the log.
    pub decisions: u64,
    /// Decisions replayed (compared).
    pub replayed: u64,
    /// Replayed decisions whose verdict the candidate keeps.
    pub unchanged: u64,
    /// Replayed decisions whose verdict the candidate changes.
    pub changed: u64,
    /// Of the changed, how many the candidate loosens.
    pub loosened: u64,
    /// Count of every verdict pair among replayed decisions, unchanged
    /// ones included (`allow→allow`).
    pub transitions: BTreeMap<String, u64>,
    /// Changed decisions, deny→allow first, then other loosenings, then
    /// tightenings (each in log order); at most [`MAX_LISTED`].
    pub changes: Vec<ChangedDecision>,
    /// Changed decisions not listed.
    pub changes_not_listed: u64,
    /// Decisions not replayed, by why.
    pub not_replayed: BTreeMap<String, u64>,
    /// Decisions not replayed, one by one (at most [`MAX_LISTED`]).
    pub not_replayed_list: Vec<Unreplayable>,
    /// Runs whose history lacks a call that ran without a replayable
    /// input: their flow labels may be short of what they were.
    pub runs_with_gaps: u64,
    /// Where the replayed history starts (`--since`): labels set before it
    /// are not seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_from: Option<Timestamp>,
    #[serde(skip)]
    pub(super) gaps: BTreeSet<(String, String)>,
}

impl ReplayReport {
    pub(super) fn new(candidate_version: String) -> Self {
        Self {
            candidate_version,
            decisions: 0,
            replayed: 0,
            unchanged: 0,
            changed: 0,
            loosened: 0,
            transitions: BTreeMap::new(),
            changes: Vec::new(),
            changes_not_listed: 0,
            not_replayed: BTreeMap::new(),
            not_replayed_list: Vec::new(),
            runs_with_gaps: 0,
            history_from: None,
            gaps: BTreeSet::new(),
        }
    }

    /// Whether the candidate changes any replayed verdict.
    pub fn differs(&self) -> bool {
        self.changed > 0
    }

    /// Exit status of a replay command whose candidate changes a replayed
    /// verdict (0 when none changes, 1 when the replay cannot be made): a
    /// CI gate tells "review this" from "broken".
    pub const EXIT_CHANGED: u8 = 3;

    /// The exit status this report gives: 0, or [`Self::EXIT_CHANGED`].
    pub fn exit_code(&self) -> u8 {
        if self.differs() {
            Self::EXIT_CHANGED
        } else {
            0
        }
    }

    /// Why the report proves too little when fewer than `min_replayed`
    /// decisions were replayed (`--min-replayed`): a gate on a log that
    /// recorded no inputs must not pass by checking nothing.
    pub fn shortfall(&self, min_replayed: u64) -> Option<String> {
        (self.replayed < min_replayed).then(|| {
            format!(
                "only {} of {} decisions could be replayed, fewer than --min-replayed {} \
                 (record inputs with spec.audit.recordInputs)",
                self.replayed, self.decisions, min_replayed
            )
        })
    }

    /// The whole report as pretty JSON (`--format json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The report for people: totals, transitions, what was not replayed
    /// and the first `show` changed decisions, one line each. Agent-chosen
    /// text (tool, run id, rule) is escaped so a terminal shows it safely.
    pub fn render_table(&self, show: usize) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_table(&mut out, show);
        out
    }

    fn write_table(&self, out: &mut String, show: usize) -> std::fmt::Result {
        writeln!(out, "candidate {}", self.candidate_version)?;
        writeln!(
            out,
            "decisions read {}, replayed {}, unchanged {}, changed {} ({} loosened), not replayed {}",
            self.decisions,
            self.replayed,
            self.unchanged,
            self.changed,
            self.loosened,
            self.decisions - self.replayed
        )?;
        if self.replayed == 0 {
            writeln!(
                out,
                "nothing was replayed: no decision had a replayable input"
            )?;
        }
        if let Some(from) = self.history_from {
            writeln!(
                out,
                "history from {from}: flow labels set before it are not seen"
            )?;
        }
        if self.runs_with_gaps > 0 {
            writeln!(
                out,
                "{} run(s) had a call that ran without a replayable input: their flow labels may be incomplete",
                self.runs_with_gaps
            )?;
        }
        writeln!(out, "\ntransitions (recorded→candidate):")?;
        for (transition, count) in &self.transitions {
            writeln!(out, "  {transition:<20} {count}")?;
        }
        if !self.not_replayed.is_empty() {
            writeln!(out, "\nnot replayed:")?;
            for (why, count) in &self.not_replayed {
                writeln!(out, "  {why:<22} {count}")?;
            }
        }
        if self.changes.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nchanged decisions (loosenings first):")?;
        writeln!(
            out,
            "{:<14} {:<36} {:<24} {:<20} {:<40} IS",
            "CHANGE", "DECISION", "TOOL", "RUN", "WAS"
        )?;
        for c in self.changes.iter().take(show) {
            writeln!(
                out,
                "{:<14} {:<36} {:<24} {:<20} {:<40} {}",
                c.transition().label(),
                c.decision_id,
                escape(&c.tool),
                escape(&c.run_id),
                c.old.text(),
                c.new.text()
            )?;
        }
        let more = self.changes.len().saturating_sub(show) as u64 + self.changes_not_listed;
        if more > 0 {
            writeln!(out, "… and {more} more (--show N, or --format json)")?;
        }
        Ok(())
    }

    pub(super) fn unreplayable(&mut self, row: &LoggedDecision, why: Why) {
        *self
            .not_replayed
            .entry(why.as_str().to_owned())
            .or_default() += 1;
        if self.not_replayed_list.len() < MAX_LISTED {
            let record = &row.decision.record;
            self.not_replayed_list.push(Unreplayable {
                decision_id: record.decision_id.clone(),
                tool: record.tool.clone(),
                reason: record.reason.clone(),
                why,
            });
        }
    }

    pub(super) fn gap(&mut self, run: (String, String)) {
        self.gaps.insert(run);
    }

    pub(super) fn compared(&mut self, row: &LoggedDecision, old: Outcome, new: Outcome) {
        self.replayed += 1;
        let transition = Transition {
            from: old.verdict,
            to: new.verdict,
        };
        *self.transitions.entry(transition.label()).or_default() += 1;
        if old.verdict == new.verdict {
            self.unchanged += 1;
            return;
        }
        self.changed += 1;
        if transition.loosens() {
            self.loosened += 1;
        }
        let record = &row.decision.record;
        let change = ChangedDecision {
            decision_id: record.decision_id.clone(),
            tenant: row.decision.tenant.clone(),
            run_id: record.run_id.clone(),
            tool: record.tool.clone(),
            at: record.created_at,
            old,
            new,
        };
        if self.changes.len() < MAX_LISTED {
            self.changes.push(change);
        } else if change.transition().loosens() {
            // Keep every loosening listed while there is a tightening to
            // drop for it.
            match self
                .changes
                .iter()
                .rposition(|c| c.transition().priority() == 2)
            {
                Some(i) => {
                    self.changes.remove(i);
                    self.changes.push(change);
                    self.changes_not_listed += 1;
                }
                None => self.changes_not_listed += 1,
            }
        } else {
            self.changes_not_listed += 1;
        }
    }

    /// Orders the listed changes (stable: log order within a priority).
    pub(super) fn sort(&mut self) {
        self.changes.sort_by_key(|c| c.transition().priority());
        self.runs_with_gaps = self.gaps.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table both replay commands print: totals, the matrix, the
    /// shortfall and exit status, a changed decision with agent-chosen text
    /// escaped, and how many more there are.
    #[test]
    fn the_table_lists_the_matrix_and_escapes_agent_text() {
        let mut report = ReplayReport::new("p@1".into());
        (
            report.decisions,
            report.replayed,
            report.changed,
            report.loosened,
        ) = (3, 2, 2, 1);
        report.transitions.insert("deny→allow".into(), 1);
        report.transitions.insert("allow→deny".into(), 1);
        let outcome = |verdict, rule: Option<&str>| Outcome {
            verdict,
            reason: "deny_rule".into(),
            rule: rule.map(str::to_owned),
        };
        report.changes.push(ChangedDecision {
            decision_id: "d1".into(),
            tenant: "t".into(),
            run_id: "r\u{1b}[31m".into(),
            tool: "bash".into(),
            at: Timestamp::UNIX_EPOCH,
            old: outcome(Decision::Deny, Some("deny:bash:rm *")),
            new: outcome(Decision::Allow, None),
        });
        report.changes_not_listed = 1;
        let table = report.render_table(50);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "candidate p@1");
        assert!(lines.contains(&"  deny→allow           1"), "{table}");
        let row = lines.iter().find(|l| l.starts_with("deny→allow ")).unwrap();
        assert!(
            row.contains("r\\u{1b}[31m") && !row.contains('\u{1b}'),
            "{row}"
        );
        assert!(row.contains("deny deny_rule (deny:bash:rm *)"), "{row}");
        assert_eq!(
            *lines.last().unwrap(),
            "… and 1 more (--show N, or --format json)"
        );
        assert_eq!(report.exit_code(), ReplayReport::EXIT_CHANGED);
        assert!(report.shortfall(2).is_none());
        assert!(report.shortfall(3).unwrap().contains("only 2 of 3"));
    }
}
