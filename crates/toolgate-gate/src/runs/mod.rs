//! Run governance in the sidecar: budgets charged in the shared database
//! and durable cancellation. `RunBook` owns this sidecar's memory of
//! stopped runs and asks the store about them; [`read_run`] reads a run's
//! status for the sidecar and `toolgate runs status` alike.
//!
//! Under a profile with budgets every allowed call is checked and charged in
//! the database (a high-risk one in the transaction that records its
//! decision), an approved call when it passes; an escalation is checked
//! without being charged before any approval is asked for or used, so no
//! one is asked about a call the budget would refuse. Without budgets
//! nothing is counted, and an allowed high-risk call (or an escalation)
//! reads the run's cancellation first. Other
//! calls consult [`CancelledRuns`], which this sidecar fills at once for its own
//! cancellations and by reading those made elsewhere (the CLI, the
//! controller, another sidecar) as [`crate::stops`] says.
//!
//! A run id is the agent's to choose, so two stops do not depend on it: a
//! cancelled scope (this pod, its profile, the namespace) refuses every run
//! id, and `spec.budgets.perPod` counts every call of the pod together.
//! Both are read and charged in the same places as the run's own.

mod book;
mod status;

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{Decision, Enforcement, Reason, RunId, Scope, Verdict};
use toolgate_store::{Admission, PodLimits, RunLimits};

pub use crate::decisions::batch::{BatchCall, BatchRequest, BatchResponse, MAX_BATCH_CALLS};
pub(crate) use book::RunBook;
pub use status::{BudgetUse, RunBudgets, RunReading, RunStatus, read_run};

/// Cancelled run ids remembered, oldest forgotten first.
const MAX_REMEMBERED: usize = 100_000;

/// Run ids and scopes of this tenant known to be cancelled.
#[derive(Debug, Default)]
pub struct CancelledRuns {
    inner: Mutex<(HashSet<String>, VecDeque<String>)>,
    scopes: Mutex<Vec<Scope>>,
}

impl CancelledRuns {
    /// True when `run_id` is known to be cancelled.
    pub fn contains(&self, run_id: &RunId) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .contains(run_id.as_str())
    }

    /// True when `run_id` of `pod` under `profile` is known to be stopped:
    /// the run itself, or a scope holding it.
    pub fn holds(&self, run_id: &RunId, pod: &str, profile: Option<&str>) -> bool {
        let scoped = self
            .scopes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|s| s.covers(Some(pod), profile));
        scoped || self.contains(run_id)
    }

    /// Remembers a cancelled scope.
    pub fn insert_scope(&self, scope: Scope) {
        let mut scopes = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }

    /// Remembers a cancelled run, as the database spells it (rows written
    /// before run ids were canonical may spell it otherwise; they match
    /// nothing canonical, as in the database).
    pub fn insert(&self, run_id: &str) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *guard;
        if set.contains(run_id) {
            return;
        }
        if order.len() >= MAX_REMEMBERED
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        set.insert(run_id.to_owned());
        order.push_back(run_id.to_owned());
    }
}

/// The budgets of a profile as the store counts them.
pub fn limits(policy: &toolgate_policy::CompiledPolicy) -> RunLimits {
    let b = policy.budgets();
    RunLimits {
        max_calls: b.max_calls_per_run,
        max_high_risk_calls: b.max_high_risk_calls_per_run,
        max_run_seconds: b.max_run_seconds,
        per_pod: b
            .per_pod
            .map(|p| PodLimits {
                max_calls: p.max_calls,
                max_high_risk_calls: p.max_high_risk_calls,
            })
            .unwrap_or_default(),
    }
}

/// Whether answering `verdict` needs the run charged in the database:
/// every allowed call when the profile sets a budget. (Without budgets
/// nothing is counted; a high-risk call only reads the run's cancellation.)
pub(crate) fn needs_admission(verdict: &Verdict, limits: &RunLimits) -> bool {
    verdict.verdict == Decision::Allow && *limits != RunLimits::default()
}

/// Turns `verdict` into a sidecar refusal with `reason` (keeping its digests
/// and risk), as `enforce` answers it.
pub(crate) fn refuse(verdict: &mut Verdict, reason: Reason, rule: Option<String>) {
    verdict.set_reason(reason);
    verdict.matched_rule = rule;
    verdict.enforced = true;
    verdict.would_verdict = None;
    verdict.would_reason = None;
    verdict.would_rule = None;
    verdict.warning = None;
}

/// Turns `verdict` into an `audit_unavailable` refusal: what a call gets
/// when its decision cannot be recorded or its run cannot be read.
pub(crate) fn deny_audit(verdict: &mut Verdict) {
    refuse(verdict, Reason::AuditUnavailable, None);
}

/// Applies the run's answer to an allowed call. A cancelled run is refused
/// in every mode; a used-up budget is refused as `mode` says (reported only,
/// under `warn` and `dryRun`).
pub(crate) fn apply_admission(verdict: &mut Verdict, admission: &Admission, mode: Enforcement) {
    match admission {
        Admission::Admitted { .. } => {}
        Admission::Cancelled { .. } => refuse(verdict, Reason::RunCancelled, None),
        Admission::Exhausted { budget, limit } => {
            refuse(
                verdict,
                Reason::BudgetExhausted,
                Some(format!("budget:{}={limit}", budget.as_str())),
            );
            *verdict = verdict.clone().under(mode);
        }
    }
}

/// Body of `POST /v1/runs/{run_id}/cancel` and `POST /v1/pod/cancel`
/// (either may be empty).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why the run stops.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Answer of a cancellation.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
// The schema says no other member is ever written (serde writes exactly these).
#[schemars(deny_unknown_fields)]
pub struct CancelResponse {
    /// The run, in its canonical spelling.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// When its cancellation was first requested.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub cancel_requested_at: Timestamp,
    /// False when it was already cancelled.
    pub newly_cancelled: bool,
    /// Pending approvals of the run this request cancelled.
    pub approvals_cancelled: u64,
}

/// Answer of `POST /v1/pod/cancel`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
// The schema says no other member is ever written (serde writes exactly these).
#[schemars(deny_unknown_fields)]
pub struct PodCancelResponse {
    /// What was stopped: `pod NAME`.
    pub scope: String,
    /// When the pod's cancellation was first requested.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub cancel_requested_at: Timestamp,
    /// False when it was already cancelled.
    pub newly_cancelled: bool,
    /// Pending approvals this sidecar asked for that this request cancelled.
    pub approvals_cancelled: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancelled_runs_are_bounded_and_remembered() {
        let runs = CancelledRuns::default();
        runs.insert("a");
        runs.insert("a");
        assert!(runs.contains(&RunId::parse("a").unwrap()));
        assert!(runs.contains(&RunId::parse("A").unwrap()));
        assert!(!runs.contains(&RunId::parse("b").unwrap()));
        assert_eq!(runs.inner.lock().unwrap().1.len(), 1);
    }
}
