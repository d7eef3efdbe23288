//! Replaying the decision log against a candidate policy
//! (`toolgate replay`): what the candidate would have decided for every
//! recorded call that has an input, with each run's history as it was.
//!
//! The log is read page by page in its own order ([`Decisions::query`])
//! and each page's inputs are fetched in one lookup, so memory holds one
//! page, the flow labels of each run seen, and the report: a million
//! decisions stream through in bounded space.
//!
//! What "as it was" means here:
//! - each call is evaluated at the instant it was decided, as its tenant;
//! - a run's flow labels are rebuilt in log order under the candidate's
//!   flow rules, and only from calls that actually ran (recorded `allow`):
//!   a call the old policy refused never ran, so it labelled nothing;
//! - flow labels are kept per run, or per pod when the candidate's flows
//!   have `scope: pod` (the pod is the first part of the decision's
//!   stream); labels set before `--since` are not seen (the report says
//!   where its history starts);
//! - budgets, cancellations and approvals are not enforced again: a
//!   recorded `approved` (or `approval_denied`, or `approved_by_grant`)
//!   call is compared as the escalation it was, and a grant the candidate
//!   holds counts as the escalation it answers; a call refused by a budget,
//!   by the run's or by the sidecar's state (cancelled, no bundle, ...) is
//!   reported as not replayable, since no policy decided it;
//! - both sides are compared by what the policy judged: a call recorded
//!   under `warn` or `dryRun` by the verdict enforcement would have given
//!   (`would_verdict`), and a candidate in such a mode likewise.
//!
//! [`Decisions::query`]: crate::Decisions::query

mod report;

use std::collections::HashMap;

use jiff::Timestamp;
use toolgate_policy::audit::RecordedCall;
use toolgate_policy::{CompiledPolicy, Context, Decision, FlowScope, LabelSet, Reason};

use crate::decision_inputs::{InputStanding, standing};
use crate::decisions::{DecisionFilter, LogCursor, LoggedDecision};
use crate::{DecisionMessage, Result, Store};

pub use report::{
    ChangedDecision, MAX_LISTED, Outcome, ReplayReport, Transition, Unreplayable, Why,
};

/// Decisions read per page.
const PAGE: u32 = 5_000;

/// Replays the decisions `filter` selects against `candidate`.
pub async fn replay(
    store: &Store,
    candidate: &CompiledPolicy,
    filter: &DecisionFilter,
) -> Result<ReplayReport> {
    let mut replayer = Replayer::new(candidate, filter.since);
    let mut after: Option<LogCursor> = None;
    loop {
        let page = store
            .decisions()
            .query(filter, after.as_ref(), PAGE)
            .await?;
        replayer.page(store, &page.rows).await?;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    Ok(replayer.finish())
}

/// The replay's state: the candidate, each run's labels, and the report.
struct Replayer<'p> {
    candidate: &'p CompiledPolicy,
    labels: HashMap<(String, String), LabelSet>,
    report: ReplayReport,
}

impl<'p> Replayer<'p> {
    fn new(candidate: &'p CompiledPolicy, history_from: Option<Timestamp>) -> Self {
        let mut report = ReplayReport::new(candidate.version().version.clone());
        report.history_from = history_from;
        Self {
            candidate,
            labels: HashMap::new(),
            report,
        }
    }

    /// Whose labels a decision reads and adds to: its run's, or its pod's
    /// under `scope: pod` (the pod names the first part of the stream).
    fn label_key(&self, row: &LoggedDecision) -> (String, String) {
        let tenant = row.decision.tenant.clone();
        match self.candidate.flow_scope() {
            Some(FlowScope::Pod) => {
                let stream = &row.decision.stream;
                let pod = stream.split_once('/').map_or(stream.as_str(), |(p, _)| p);
                (tenant, format!("pod:{pod}"))
            }
            _ => (tenant, format!("run:{}", row.decision.record.run_id)),
        }
    }

    /// Replays one page of the log: its inputs in one lookup per tenant.
    async fn page(&mut self, store: &Store, rows: &[LoggedDecision]) -> Result<()> {
        let mut by_tenant: HashMap<&str, Vec<&str>> = HashMap::new();
        for row in rows {
            by_tenant
                .entry(row.decision.tenant.as_str())
                .or_default()
                .push(row.decision.record.decision_id.as_str());
        }
        let mut inputs = HashMap::new();
        for (tenant, ids) in by_tenant {
            for (id, input) in store.decision_inputs().get_many(tenant, &ids).await? {
                inputs.insert((tenant.to_owned(), id), input);
            }
        }
        for row in rows {
            let key = (
                row.decision.tenant.clone(),
                row.decision.record.decision_id.clone(),
            );
            self.one(row, inputs.get(&key));
        }
        Ok(())
    }

    /// Replays one recorded decision.
    fn one(&mut self, row: &LoggedDecision, input: Option<&crate::DecisionInput>) {
        let record = &row.decision.record;
        self.report.decisions += 1;
        let run = self.label_key(row);
        let ran = record.verdict == Decision::Allow.as_str();
        let message = record.message.as_deref();
        let call = match input.map(|i| (i, standing(i, &record.tool, &record.args_digest, message)))
        {
            None => Err(Why::NoInput),
            Some((_, InputStanding::Masked)) => Err(Why::Masked),
            Some((_, InputStanding::Mismatched)) => Err(Why::InputMismatch),
            Some((i, InputStanding::Matching)) => {
                RecordedCall::parse(&i.call).map_err(|_| Why::InputMismatch)
            }
        };
        let call = match call {
            Ok(call) => call,
            Err(why) => {
                if ran {
                    // What this call labelled is unknown from here on.
                    self.report.gap(run);
                }
                self.report.unreplayable(row, why);
                return;
            }
        };
        let Some(old) = recorded_policy_outcome(row) else {
            self.report.unreplayable(row, Why::NotDecidedByPolicy);
            self.add_labels(run, &call, ran);
            return;
        };
        let labels = self.labels.get(&run).copied().unwrap_or(LabelSet::EMPTY);
        let ctx = Context {
            now: record.created_at,
            subject: Some(&row.decision.tenant),
            labels,
            provenance: call.provenance,
        };
        let verdict = self.candidate.evaluate(&call.call(), &ctx);
        let (decision, reason, rule) = verdict.judged();
        let new = Outcome {
            verdict: decision,
            reason: reason.as_str().to_owned(),
            rule: rule.map(str::to_owned),
        };
        self.report.compared(row, old, new);
        self.add_labels(run, &call, ran);
    }

    /// Labels the run with what a call that ran sets under the candidate.
    fn add_labels(&mut self, run: (String, String), call: &RecordedCall, ran: bool) {
        if !ran {
            return;
        }
        let set = self
            .candidate
            .flow_labels_set_by(&call.call(), call.provenance);
        if !set.is_empty() {
            let labels = self.labels.entry(run).or_insert(LabelSet::EMPTY);
            *labels = labels.union(set);
        }
    }

    fn finish(mut self) -> ReplayReport {
        self.report.sort();
        self.report
    }
}

/// The verdict the policy gave a recorded call, before anything else
/// (budgets, approvals, trial modes) changed the answer; `None` when no
/// policy decided it.
fn recorded_policy_outcome(row: &LoggedDecision) -> Option<Outcome> {
    let record = &row.decision.record;
    let (verdict, reason, rule) = match Reason::from_wire(&record.reason)? {
        Reason::NotEnforced => {
            let would = DecisionMessage::parse(record.message.as_deref()).would?;
            (would.verdict?, would.reason?, would.rule)
        }
        reason => (
            Decision::from_wire(&record.verdict)?,
            reason,
            record.matched_rule.clone(),
        ),
    };
    if !decided_by_policy(reason) {
        return None;
    }
    Some(Outcome {
        verdict: reason.judged_decision(verdict),
        reason: reason.as_str().to_owned(),
        rule,
    })
}

/// Whether a verdict with `reason` came from a policy, not from a budget,
/// the run's state or the sidecar's.
fn decided_by_policy(reason: Reason) -> bool {
    !matches!(
        reason,
        Reason::BudgetExhausted
            | Reason::RunCancelled
            | Reason::AuditUnavailable
            | Reason::NoBundle
            | Reason::BundleExpired
            | Reason::ToolNotListed
            | Reason::RequestMalformed
            | Reason::UpstreamNotAllowed
            | Reason::WorkspaceRefused
            | Reason::ToolDefinitionChanged
            | Reason::InvalidArguments
    )
}
