//! A run's status (`GET /v1/runs/{run_id}`, `toolgate runs status`): its
//! cancellation, its own or a scope's, budgets used and left, open intents
//! and flow labels. [`read_run`] reads it from the store, so the sidecar
//! and the CLI read the same rows by the same rules.

use jiff::Timestamp;
pub use toolgate_contract::agent_api::{BudgetUse, RunBudgets};
use toolgate_policy::{CompiledPolicy, RunId, Scope};
use toolgate_store::{Caller, RunLimits, Store, StoreError};

use crate::flows::flow_subject;
use crate::intents::OpenIntent;

/// Answer of `GET /v1/runs/{run_id}`: what an agent checks between steps
/// (the contract's shape, with the gate's run id, open intents and labels).
pub type RunStatus =
    toolgate_contract::agent_api::RunStatus<RunId, OpenIntent, toolgate_store::FlowLabel>;

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
    let mut run_cancelled = false;
    let mut scope = None;
    let status = read_run_noting(store, tenant, run_id, pod, policy, |found| match found {
        StopFound::Run => run_cancelled = true,
        StopFound::Scope(stop) => scope = Some(stop.clone()),
    })
    .await?;
    Ok(RunReading {
        status,
        run_cancelled,
        scope,
    })
}

/// A stop [`read_run_noting`] found holding the run.
pub(crate) enum StopFound<'a> {
    /// The run itself is cancelled.
    Run,
    /// A wider stop holds it.
    Scope(&'a Scope),
}

/// [`read_run`], telling `found` of each stop as soon as it is read, so a
/// sidecar remembers it even when a later read (pod usage, labels) fails.
pub(crate) async fn read_run_noting(
    store: &Store,
    tenant: &str,
    run_id: &RunId,
    pod: Option<&str>,
    policy: Option<&CompiledPolicy>,
    mut found: impl FnMut(StopFound<'_>),
) -> Result<RunStatus, StoreError> {
    let runs = store.runs();
    let state = runs.state(tenant, run_id).await?;
    if state.cancel_requested_at.is_some() {
        found(StopFound::Run);
    }
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
    if let Some(stop) = &scoped {
        found(StopFound::Scope(&stop.scope));
    }
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
    let mut status = status_of(
        run_id.clone(),
        state,
        scoped,
        pod_usage,
        &limits,
        Timestamp::now(),
    );
    status.flow_labels = flow_labels;
    Ok(status)
}

/// A run as the store holds it, with the limits that apply, in the one
/// shape both `GET /v1/runs/{id}` and `toolgate runs status` print.
/// `scoped`: a wider stop that holds the run; `pod`: the calls and
/// high-risk calls of the pod asking, when a pod asks (a run alone has
/// none, and its pod budgets are then left out).
fn status_of(
    run_id: RunId,
    state: toolgate_store::RunState,
    scoped: Option<toolgate_store::ScopeCancellation>,
    pod: Option<(u64, u64)>,
    limits: &RunLimits,
    now: Timestamp,
) -> RunStatus {
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
            .into_iter()
            .map(crate::intents::open_intent)
            .collect(),
        flow_labels: None,
        run_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status shows each open intent as `GET /v1/intents` lists it.
    #[test]
    fn a_status_lists_open_intents_with_their_resume_class() {
        let intent = crate::intents::tests::intent();
        let state = toolgate_store::RunState {
            tenant: "t".into(),
            run_id: "r1".into(),
            started_at: None,
            calls: 0,
            high_risk_calls: 0,
            cancel_requested_at: None,
            cancel_reason: None,
            cancelled_by: None,
            open_intents: vec![toolgate_store::PendingIntent {
                intent,
                class: toolgate_store::ResumeClass::SafeToRetry,
            }],
        };
        let now = Timestamp::now();
        let run = RunId::parse("r1").unwrap();
        let status = status_of(run, state, None, None, &RunLimits::default(), now);
        let json = serde_json::to_value(&status).unwrap();
        let mut open = crate::intents::tests::intent_json();
        open["resume"] = "safe_to_retry".into();
        assert_eq!(json["open_intents"], serde_json::json!([open]));
    }
}
