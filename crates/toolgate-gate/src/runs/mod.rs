//! Run governance in the sidecar: budgets charged in the shared database,
//! durable cancellation, a run's heartbeat, and parallel admission of a
//! batch of calls.
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

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{Decision, Enforcement, Id, Reason, RunId, Scope, SideEffect, Verdict};
use toolgate_store::{Admission, PodLimits, RunLimits};

use crate::{AuthorizeRequest, AuthorizeResponse, Gate, GateError};

/// Cancelled run ids remembered, oldest forgotten first.
const MAX_REMEMBERED: usize = 100_000;
/// Most calls one batch may hold.
pub const MAX_BATCH_CALLS: usize = 64;

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

// ---- GET /v1/runs/{run_id} and POST /v1/runs/{run_id}/cancel ----

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

impl Gate {
    /// The run's cancellation (its own or a scope's), budgets and open
    /// intents: what an agent checks between steps.
    pub async fn run_status(&self, run_id: &RunId) -> Result<RunStatus, GateError> {
        let run_id = run_id.clone();
        let runs = self.store.runs();
        let state = runs.state(&self.tenant, &run_id).await?;
        if state.cancel_requested_at.is_some() {
            self.cancelled.insert(run_id.as_str());
        }
        let enforced = self.policy.current();
        let scoped = runs
            .scope_cancellation(self.caller(enforced.as_deref()))
            .await?;
        let pod = runs.pod_usage(&self.tenant, &self.pod).await?;
        let limits = enforced
            .as_ref()
            .map(|e| limits(&e.policy))
            .unwrap_or_default();
        if let Some(stop) = &scoped {
            self.cancelled.insert_scope(stop.scope.clone());
        }
        let flow_scope = enforced.as_ref().and_then(|e| e.policy.flow_scope());
        let flow_labels = match flow_scope {
            Some(scope) => Some(
                self.store
                    .flow_labels()
                    .of(&self.tenant, scope, &self.flow_subject(scope, &run_id))
                    .await?,
            ),
            None => None,
        };
        let mut status = RunStatus::of(run_id, state, scoped, Some(pod), &limits, Timestamp::now());
        status.flow_labels = flow_labels;
        Ok(status)
    }
}

/// Body of `POST /v1/runs/{run_id}/cancel` (may be empty).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why the run stops.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Answer of a cancellation.
#[derive(Debug, Serialize, Deserialize)]
pub struct CancelResponse {
    /// The run, in its canonical spelling.
    pub run_id: RunId,
    /// When its cancellation was first requested.
    pub cancel_requested_at: Timestamp,
    /// False when it was already cancelled.
    pub newly_cancelled: bool,
    /// Pending approvals of the run this request cancelled.
    pub approvals_cancelled: u64,
}

/// Answer of `POST /v1/pod/cancel`.
#[derive(Debug, Serialize, Deserialize)]
pub struct PodCancelResponse {
    /// What was stopped: `pod NAME`.
    pub scope: String,
    /// When the pod's cancellation was first requested.
    pub cancel_requested_at: Timestamp,
    /// False when it was already cancelled.
    pub newly_cancelled: bool,
    /// Pending approvals this sidecar asked for that this request cancelled.
    pub approvals_cancelled: u64,
}

/// Stops every run of this pod, whatever run id it uses: the stop an
/// agent (or its supervisor) asks of its own sidecar. Wider scopes (a
/// profile, the namespace) are not the agent's to stop: they are asked
/// through the CLI or a `RunCancellation`.
impl Gate {
    /// Cancels the run durably (idempotent): every later call of it is
    /// refused, by every sidecar.
    pub async fn cancel_run(
        &self,
        run_id: &RunId,
        req: &CancelRequest,
    ) -> Result<CancelResponse, GateError> {
        let run_id = run_id.clone();
        let done = self
            .store
            .runs()
            .cancel(
                &self.tenant,
                &run_id,
                req.reason.as_deref(),
                &self.identity,
                Timestamp::now(),
            )
            .await?;
        self.cancelled.insert(run_id.as_str());
        tracing::info!(
            run_id = run_id.as_str(),
            newly = done.newly_cancelled,
            "run cancelled"
        );
        Ok(CancelResponse {
            run_id,
            cancel_requested_at: done.requested_at,
            newly_cancelled: done.newly_cancelled,
            approvals_cancelled: done.approvals_cancelled,
        })
    }

    pub async fn cancel_pod(&self, req: &CancelRequest) -> Result<PodCancelResponse, GateError> {
        let scope = Scope::parse("pod", Some(&self.pod))
            .map_err(|e| GateError::InvalidRequest(e.to_string()))?;
        let done = self
            .store
            .runs()
            .cancel_scope(
                &self.tenant,
                &scope,
                req.reason.as_deref(),
                &self.identity,
                Timestamp::now(),
            )
            .await?;
        self.cancelled.insert_scope(scope.clone());
        tracing::info!(scope = %scope, newly = done.newly_cancelled, "pod cancelled");
        Ok(PodCancelResponse {
            scope: scope.to_string(),
            cancel_requested_at: done.requested_at,
            newly_cancelled: done.newly_cancelled,
            approvals_cancelled: done.approvals_cancelled,
        })
    }
}

// ---- POST /v1/authorize/batch ----

/// One call of a batch: an authorize request without the run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchCall {
    /// Tool as the agent calls it.
    pub tool: Id,
    /// Optional action.
    #[serde(default)]
    pub action: Option<Id>,
    /// Exact arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Step within the run (`""` is none).
    #[serde(default, deserialize_with = "toolgate_policy::ids::empty_as_none")]
    pub step_id: Option<Id>,
    /// For MCP gateways: the tool's definition digest.
    #[serde(default)]
    pub definition_digest: Option<Id>,
}

/// Body of `POST /v1/authorize/batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// Run every call belongs to, in its canonical spelling.
    pub run_id: RunId,
    /// Must equal the sidecar's tenant when given.
    #[serde(default)]
    pub tenant: Option<String>,
    /// 1 to [`MAX_BATCH_CALLS`] calls the agent would like to run at once.
    pub calls: Vec<BatchCall>,
}

/// Answer of `POST /v1/authorize/batch`.
#[derive(Debug, Serialize, Deserialize)]
pub struct BatchResponse {
    /// True only when every call may run concurrently with the others.
    pub parallel: bool,
    /// Why not (the first call that keeps the batch sequential), or
    /// `batch_parallel`.
    pub reason: String,
    /// Index of that call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_index: Option<usize>,
    /// Each call's own verdict, exactly as `/v1/authorize` answers it.
    pub verdicts: Vec<AuthorizeResponse>,
}

/// Why a call keeps its batch sequential, if it does. A closed allowlist:
/// only an allowed, enforced, read-only, parallel-safe, low-or-write-risk
/// call of a read class qualifies.
pub(crate) fn sequential_reason(
    verdict: &Verdict,
    effect: Option<&toolgate_policy::ToolEffect>,
) -> Option<&'static str> {
    if verdict.reason == Reason::BudgetExhausted
        || verdict.would_reason == Some(Reason::BudgetExhausted)
    {
        return Some("batch_budget");
    }
    if verdict.verdict != Decision::Allow {
        return Some(match verdict.verdict {
            Decision::Escalate => "batch_escalated",
            _ => "batch_denied",
        });
    }
    if !verdict.enforced {
        return Some("batch_not_enforced");
    }
    // A tool the profile allows always has an effect (the profile is
    // refused without one); none would not be known to be read-only.
    let Some(effect) = effect else {
        return Some("batch_not_read_only");
    };
    let read_class = matches!(
        effect.side_effect,
        SideEffect::None | SideEffect::WorkspaceRead | SideEffect::NetworkRead
    );
    if !(effect.read_only && effect.allow_parallel && read_class) || verdict.intent_required {
        return Some("batch_not_read_only");
    }
    None
}

impl Gate {
    /// Decides each call of a batch as [`Gate::authorize`] would (each is
    /// recorded and charged) and says whether they may all run at once.
    pub async fn authorize_batch(&self, req: BatchRequest) -> Result<BatchResponse, GateError> {
        if req.calls.is_empty() || req.calls.len() > MAX_BATCH_CALLS {
            return Err(GateError::InvalidRequest(format!(
                "a batch holds 1-{MAX_BATCH_CALLS} calls"
            )));
        }
        let mut verdicts = Vec::with_capacity(req.calls.len());
        let mut first_refusal: Option<(usize, &'static str)> = None;
        let requests: Vec<AuthorizeRequest> = req
            .calls
            .into_iter()
            .map(|c| AuthorizeRequest {
                tool: c.tool,
                action: c.action,
                arguments: c.arguments,
                run_id: req.run_id.clone(),
                step_id: c.step_id,
                tenant: req.tenant.clone(),
                definition_digest: c.definition_digest,
            })
            .collect();
        // Every call is checked before any is decided, so a malformed call
        // rejects the batch without recording half of it.
        for call in &requests {
            self.validate_call(call)?;
        }
        for (i, call) in requests.iter().enumerate() {
            let answer = self.authorize(call).await?;
            let effect = self
                .policy
                .current()
                .and_then(|e| e.policy.effect(&call.tool).cloned());
            if first_refusal.is_none()
                && let Some(reason) = sequential_reason(&answer.verdict, effect.as_ref())
            {
                first_refusal = Some((i, reason));
            }
            verdicts.push(answer);
        }
        let (parallel, reason, call_index) = match first_refusal {
            None => (true, "batch_parallel", None),
            Some((i, reason)) => (false, reason, Some(i)),
        };
        Ok(BatchResponse {
            parallel,
            reason: reason.to_owned(),
            call_index,
            verdicts,
        })
    }
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
