//! The run book: what this sidecar knows of stopped runs, and the store's
//! answer about a run (its cancellation, whether its budget could pay for
//! a call), its status, and the stops this sidecar asks for.

use std::sync::Arc;

use jiff::Timestamp;
use toolgate_policy::{Enforcement, Reason, Risk, RunId, Scope, Verdict};
use toolgate_store::{Admission, RunLimits, StoreError};

use super::status::{StopFound, read_run_noting};
use super::{
    CancelRequest, CancelResponse, CancelledRuns, PodCancelResponse, RunStatus, apply_admission,
    deny_audit, refuse,
};
use crate::shared::Shared;
use crate::{Enforced, GateError};

/// Runs and stops as this sidecar knows and asks for them.
pub(crate) struct RunBook {
    shared: Arc<Shared>,
    /// Runs and scopes of this tenant known to be cancelled.
    cancelled: CancelledRuns,
}

impl RunBook {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            cancelled: CancelledRuns::default(),
        }
    }

    /// True when `run_id` of this pod under `profile` is known to be
    /// stopped: the run itself, or a scope holding it.
    pub(crate) fn known_stopped(&self, run_id: &RunId, profile: Option<&str>) -> bool {
        self.cancelled.holds(run_id, &self.shared.pod, profile)
    }

    /// Applies the run's answer to `verdict`, remembering the run as
    /// cancelled when the run itself was: a stopped scope is learned by the
    /// poll (the run id alone says nothing about it).
    pub(crate) fn apply_answer(
        &self,
        run_id: &RunId,
        admission: &Admission,
        verdict: &mut Verdict,
        mode: Enforcement,
    ) {
        if matches!(admission, Admission::Cancelled { scoped: false, .. }) {
            self.cancelled.insert(run_id.as_str());
        }
        apply_admission(verdict, admission, mode);
    }

    /// Reads the run's cancellation from the database (a cancellation made
    /// anywhere) and refuses `verdict` when there is one; an unreadable run
    /// state denies `audit_unavailable`.
    pub(crate) async fn refuse_if_cancelled(
        &self,
        enforced: Option<&Enforced>,
        run_id: &RunId,
        verdict: &mut Verdict,
    ) {
        let caller = self.shared.caller(enforced);
        match self.shared.store.runs().cancelled_at(caller, run_id).await {
            Ok(None) => {}
            // The run itself is remembered as cancelled; a stopped scope is
            // learned by the poll (the run id alone says nothing about it).
            Ok(Some(stopped)) => {
                if !stopped.scoped {
                    self.cancelled.insert(run_id.as_str());
                }
                refuse(verdict, Reason::RunCancelled, None);
            }
            Err(err) => {
                tracing::error!(error = %err, "run state unreadable; denying");
                deny_audit(verdict);
            }
        }
    }

    /// Refuses an escalation its run could not pay for: cancelled, or (under
    /// budgets) a budget the call would need is used up, read without
    /// charging. Without budgets only the cancellation is read.
    pub(crate) async fn refuse_if_unpayable(
        &self,
        enforced: Option<&Enforced>,
        run_id: &RunId,
        limits: &RunLimits,
        mode: Enforcement,
        verdict: &mut Verdict,
        now: Timestamp,
    ) {
        if *limits == RunLimits::default() {
            return self.refuse_if_cancelled(enforced, run_id, verdict).await;
        }
        let high_risk = verdict.risk == Risk::High;
        let caller = self.shared.caller(enforced);
        match self
            .shared
            .store
            .runs()
            .would_refuse(caller, run_id, high_risk, limits, now)
            .await
        {
            Ok(None) => {}
            Ok(Some(refusal)) => self.apply_answer(run_id, &refusal, verdict, mode),
            Err(err) => {
                tracing::error!(error = %err, "run state unreadable; denying");
                deny_audit(verdict);
            }
        }
    }

    /// The run's cancellation (its own or a scope's), budgets and open
    /// intents under `enforced`, as this pod sees them; the stops found are
    /// remembered.
    pub(crate) async fn status(
        &self,
        run_id: &RunId,
        enforced: Option<&Enforced>,
    ) -> Result<RunStatus, GateError> {
        let status = read_run_noting(
            &self.shared.store,
            &self.shared.tenant,
            run_id,
            Some(&self.shared.pod),
            enforced.map(|e| &e.policy),
            |found| match found {
                StopFound::Run => self.cancelled.insert(run_id.as_str()),
                StopFound::Scope(scope) => self.cancelled.insert_scope(scope.clone()),
            },
        )
        .await?;
        Ok(status)
    }

    /// Cancels the run durably (idempotent): every later call of it is
    /// refused, by every sidecar.
    pub(crate) async fn cancel_run(
        &self,
        run_id: &RunId,
        req: &CancelRequest,
    ) -> Result<CancelResponse, GateError> {
        let run_id = run_id.clone();
        let done = self
            .shared
            .store
            .runs()
            .cancel(
                &self.shared.tenant,
                &run_id,
                req.reason.as_deref(),
                &self.shared.identity,
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

    /// Stops every run of this pod, whatever run id it uses: the stop an
    /// agent (or its supervisor) asks of its own sidecar. Wider scopes (a
    /// profile, the namespace) are not the agent's to stop: they are asked
    /// through the CLI or a `RunCancellation`.
    pub(crate) async fn cancel_pod(
        &self,
        req: &CancelRequest,
    ) -> Result<PodCancelResponse, GateError> {
        let scope = Scope::parse("pod", Some(&self.shared.pod))
            .map_err(|e| GateError::InvalidRequest(e.to_string()))?;
        let done = self
            .shared
            .store
            .runs()
            .cancel_scope(
                &self.shared.tenant,
                &scope,
                req.reason.as_deref(),
                &self.shared.identity,
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

    /// Reads the run cancellations of this tenant made since `since` and the
    /// cancelled scope that holds this sidecar under `enforced`, and
    /// remembers them.
    pub(crate) async fn learn_stops(
        &self,
        enforced: Option<&Enforced>,
        since: Timestamp,
    ) -> Result<(), StoreError> {
        let caller = self.shared.caller(enforced);
        let stops = self.shared.store.runs().stops(caller, since).await?;
        for (run, _) in stops.runs {
            self.cancelled.insert(&run);
        }
        if let Some(stop) = stops.scope {
            self.cancelled.insert_scope(stop.scope);
        }
        Ok(())
    }
}
