//! What a replay found: totals, the transition matrix, each changed
//! decision (loosenings first) and what could not be replayed, and why.

use std::collections::{BTreeMap, BTreeSet};

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
