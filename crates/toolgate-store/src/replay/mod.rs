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
//! - budgets, cancellations and approvals are not enforced again: a
//!   recorded `approved` (or `approval_denied`) call is compared as the
//!   escalation it was, a `budget_exhausted` one as the allow the policy
//!   gave before the budget refused it, and a call refused by the run's
//!   or the sidecar's state (cancelled, no bundle, ...) is reported as not
//!   replayable, since no policy decided it;
//! - a call recorded under `warn` or `dryRun` is compared with the verdict
//!   the policy would have enforced (its `would_verdict`).
//!
//! [`Decisions::query`]: crate::Decisions::query

mod report;

use std::collections::HashMap;

use toolgate_policy::audit::RecordedCall;
use toolgate_policy::{CompiledPolicy, Context, Decision, LabelSet, Reason};

use crate::decision_inputs::{InputStanding, standing};
use crate::decisions::{DecisionFilter, LogCursor, LoggedDecision};
use crate::{Result, Store};

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
    let mut replayer = Replayer::new(candidate);
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
    fn new(candidate: &'p CompiledPolicy) -> Self {
        Self {
            candidate,
            labels: HashMap::new(),
            report: ReplayReport::new(candidate.version().version.clone()),
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
        let run = (row.decision.tenant.clone(), record.run_id.clone());
        let ran = record.verdict == Decision::Allow.as_str();
        let call = match input.map(|i| (i, standing(i, &record.tool, &record.args_digest))) {
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
        let new = Outcome {
            verdict: verdict.verdict,
            reason: verdict.reason.as_str().to_owned(),
            rule: verdict.matched_rule.clone(),
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
    let reason = Reason::from_wire(&record.reason)?;
    let outcome = |verdict: Decision| Outcome {
        verdict,
        reason: record.reason.clone(),
        rule: record.matched_rule.clone(),
    };
    match reason {
        Reason::Approved | Reason::ApprovalDenied => Some(outcome(Decision::Escalate)),
        Reason::BudgetExhausted => Some(outcome(Decision::Allow)),
        Reason::NotEnforced => {
            let message: serde_json::Value =
                serde_json::from_str(record.message.as_deref()?).ok()?;
            let verdict = Decision::from_wire(message["would_verdict"].as_str()?)?;
            Some(Outcome {
                verdict,
                reason: message["would_reason"].as_str()?.to_owned(),
                rule: message["would_rule"].as_str().map(str::to_owned),
            })
        }
        Reason::RunCancelled
        | Reason::AuditUnavailable
        | Reason::NoBundle
        | Reason::BundleExpired
        | Reason::ToolNotListed
        | Reason::RequestMalformed
        | Reason::UpstreamNotAllowed
        | Reason::WorkspaceRefused
        | Reason::ToolDefinitionChanged
        | Reason::InvalidArguments => None,
        _ => Some(outcome(Decision::from_wire(&record.verdict)?)),
    }
}
