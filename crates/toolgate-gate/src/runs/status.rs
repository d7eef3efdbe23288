//! A run's status (`GET /v1/runs/{run_id}`, `toolgate runs status`): its
//! cancellation, its own or a scope's, budgets used and left, open intents
//! and flow labels. [`read_run`] reads it from the store, so the sidecar
//! and the CLI read the same rows by the same rules.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{CompiledPolicy, RunId, Scope};
use toolgate_store::{Caller, RunLimits, Store, StoreError};

use crate::flows::flow_subject;

/// A run read from the store: its status, and the stops found holding it
/// (for a sidecar to remember).
#[derive(Debug)]
pub struct RunReading {
    /// The status as the agent and the CLI are shown it.
    pub status: RunStatus,
    /// The run itself is cancelled (whatever scope also holds it).
    pub run_cancelled: bool,
    /// The wider stop that holds the run, if one does.
    pub scope: Option<Scope>,
}

/// Reads run `run_id` of `tenant` now, under `policy` (its budgets,
/// its profile's stops and its flow labels; none without one). With
/// `pod`, as that pod's sidecar sees the run: the stops that hold the pod
/// and the pod's budgets; without one, the namespace's and the profile's
/// stops, no pod budgets, and no labels for a profile whose flows have
/// `scope: pod`.
pub async fn read_run(
    store: &Store,
    tenant: &str,
    run_id: &RunId,
    pod: Option<&str>,
    policy: Option<&CompiledPolicy>,
) -> Result<RunReading, StoreError> {
    let runs = store.runs();
    let state = runs.state(tenant, run_id).await?;
    let profile = policy.map(CompiledPolicy::name);
    let scoped = match pod {
        Some(pod) => {
            runs.scope_cancellation(Caller::new(tenant, pod, profile))
                .await?
        }
        None => runs
            .scope_cancellations(tenant)
            .await?
            .into_iter()
            .find(|stop| stop.scope.covers(None, profile)),
    };
    let pod_usage = match pod {
        Some(pod) => Some(runs.pod_usage(tenant, pod).await?),
        None => None,
    };
    let subject = policy
        .and_then(CompiledPolicy::flow_scope)
        .and_then(|scope| Some((scope, flow_subject(scope, run_id, pod)?)));
    let flow_labels = match subject {
        Some((scope, subject)) => Some(store.flow_labels().of(tenant, scope, subject).await?),
        None => None,
    };
    let limits = policy.map(super::limits).unwrap_or_default();
    let run_cancelled = state.cancel_requested_at.is_some();
    let scope = scoped.as_ref().map(|stop| stop.scope.clone());
    let mut status = RunStatus::of(
        run_id.clone(),
        state,
        scoped,
        pod_usage,
        &limits,
        Timestamp::now(),
    );
    status.flow_labels = flow_labels;
    Ok(RunReading {
        status,
        run_cancelled,
        scope,
    })
}

/// One budget as the agent sees it.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BudgetUse {
    /// Used so far.
    pub used: u64,
    /// The profile's limit; `null` when none is set.
    pub limit: Option<u64>,
    /// What remains; `null` when unlimited.
    pub left: Option<u64>,
}

impl RunStatus {
    /// A run as the store holds it, with the limits that apply, in the one
    /// shape both `GET /v1/runs/{id}` and `toolgate runs status` print.
    /// `scoped`: a wider stop that holds the run; `pod`: the calls and
    /// high-risk calls of the pod asking, when a pod asks (a run alone has
    /// none, and its pod budgets are then left out).
    pub fn of(
        run_id: RunId,
        state: toolgate_store::RunState,
        scoped: Option<toolgate_store::ScopeCancellation>,
        pod: Option<(u64, u64)>,
        limits: &RunLimits,
        now: Timestamp,
    ) -> Self {
        let (cancel_at, cancel_reason, cancelled_by, cancelled_scope) = match scoped {
            Some(stop) => (
                Some(stop.requested_at),
                stop.reason,
                Some(stop.cancelled_by),
                Some(stop.scope.to_string()),
            ),
            None => (
                state.cancel_requested_at,
                state.cancel_reason,
                state.cancelled_by,
                None,
            ),
        };
        let elapsed = state
            .started_at
            .map(|s| u64::try_from((now - s).get_seconds()).unwrap_or(0))
            .unwrap_or(0);
        RunStatus {
            cancel_requested: cancel_at.is_some(),
            cancel_requested_at: cancel_at,
            cancel_reason,
            cancelled_by,
            cancelled_scope,
            budgets: RunBudgets {
                calls: BudgetUse::new(state.calls, limits.max_calls),
                high_risk_calls: BudgetUse::new(state.high_risk_calls, limits.max_high_risk_calls),
                run_seconds: BudgetUse::new(elapsed, limits.max_run_seconds),
                pod_calls: pod.map(|(calls, _)| BudgetUse::new(calls, limits.per_pod.max_calls)),
                pod_high_risk_calls: pod
                    .map(|(_, high)| BudgetUse::new(high, limits.per_pod.max_high_risk_calls)),
            },
            open_intents: state
                .open_intents
                .iter()
                .map(crate::intents::pending_json)
                .collect(),
            flow_labels: None,
            run_id,
        }
    }
}

impl BudgetUse {
    fn new(used: u64, limit: Option<u64>) -> Self {
        Self {
            used,
            limit,
            left: limit.map(|l| l.saturating_sub(used)),
        }
    }
}

/// Answer of `GET /v1/runs/{run_id}`: what an agent checks between steps.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunStatus {
    /// The run, in its canonical spelling.
    pub run_id: RunId,
    /// True once anyone cancelled the run: stop, and make no more calls.
    pub cancel_requested: bool,
    /// When, and why.
    pub cancel_requested_at: Option<Timestamp>,
    /// The reason given.
    pub cancel_reason: Option<String>,
    /// Who stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// When a wider stop holds the run: `pod NAME`, `profile NAME` or
    /// `namespace` (its time and reason are then the ones above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_scope: Option<String>,
    /// Calls, high-risk calls and seconds, each used / limit / left.
    pub budgets: RunBudgets,
    /// Intents of the run still open, as `GET /v1/intents` lists them
    /// (each with its `resume` class).
    pub open_intents: Vec<serde_json::Value>,
    /// Flow labels the run carries (its pod's, for a profile whose flows
    /// have `scope: pod`), oldest first, each with the decision that set
    /// it; absent for a profile without flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_labels: Option<Vec<toolgate_store::FlowLabel>>,
}

/// The three budgets of a run.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunBudgets {
    /// `maxCallsPerRun`.
    pub calls: BudgetUse,
    /// `maxHighRiskCallsPerRun`.
    pub high_risk_calls: BudgetUse,
    /// `maxRunSeconds`, from the run's first counted call.
    pub run_seconds: BudgetUse,
    /// `perPod.maxCalls`: every call of this pod, over all its runs
    /// (absent when no pod asked: `toolgate runs status` without `--pod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_calls: Option<BudgetUse>,
    /// `perPod.maxHighRiskCalls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_high_risk_calls: Option<BudgetUse>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_use_reports_what_is_left() {
        assert_eq!(
            BudgetUse::new(3, Some(5)),
            BudgetUse {
                used: 3,
                limit: Some(5),
                left: Some(2)
            }
        );
        assert_eq!(BudgetUse::new(7, Some(5)).left, Some(0));
        assert_eq!(BudgetUse::new(7, None).left, None);
    }
}
