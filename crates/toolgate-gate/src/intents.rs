//! Intents: record a pending intent for an allowed high-risk call,
//! watermark it before the side effect, close it with its outcome, and list
//! a run's open intents for resume. Every store call is scoped to this
//! sidecar's tenant, so another tenant's intent is simply not found.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{Id, RunId};
use toolgate_store::{Intent, IntentOutcome, NewIntent, PendingIntent};

use crate::allowed::{AllowedCall, AllowedDecisions, REMEMBER_FOR, Remembered};
use crate::shared::Shared;
use crate::trace::intent_step;
use crate::{GateError, json_with};

/// An intent to begin: what `POST /v1/intents` carries.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginIntentRequest {
    /// The allowing decision.
    pub decision_id: Id,
    /// Run id (must match the decision's).
    pub run_id: RunId,
    /// Step id.
    pub step_id: Id,
    /// Tool (must match the decision's).
    pub tool: Id,
    /// Argument digest (must match the decision's).
    pub args_digest: Id,
    /// Whole-call digest (must match the decision's when given).
    #[serde(default)]
    pub call_digest: Option<Id>,
    /// How a resume flow can check whether the effect happened.
    #[serde(default)]
    pub verification_probe: Option<serde_json::Value>,
}

/// How an intent ended: what `POST /v1/intents/{id}/complete` carries.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// completed | not_completed | error.
    pub outcome: IntentOutcome,
    /// Free-form detail.
    #[serde(default)]
    pub detail: Option<String>,
}

/// The intents of this sidecar's calls: the allowed decisions awaiting
/// one, and the store's intent rows.
pub(crate) struct Intents {
    shared: Arc<Shared>,
    /// Allowed high-risk decisions awaiting their intent.
    allowed: Mutex<AllowedDecisions>,
}

impl Intents {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            allowed: Mutex::new(AllowedDecisions::default()),
        }
    }

    /// Remembers that `decision_id` allowed `call`, so that its intent can
    /// be checked against exactly that call.
    pub(crate) fn remember(&self, decision_id: String, call: AllowedCall) {
        self.allowed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(decision_id, call, Instant::now());
    }

    /// Records the pending intent of the call decision `req.decision_id`
    /// allowed: exactly that call, once.
    pub(crate) async fn begin_intent(&self, req: BeginIntentRequest) -> Result<Intent, GateError> {
        intent_step("begin", None, self.begin(req)).await
    }

    async fn begin(&self, req: BeginIntentRequest) -> Result<Intent, GateError> {
        let (risk, call_digest) = {
            let allowed = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
            let call = match allowed.get(&req.decision_id) {
                Some(Remembered::Open(call)) => call,
                Some(Remembered::Used) => {
                    return Err(GateError::IntentExists(format!(
                        "decision {} already has an intent",
                        req.decision_id
                    )));
                }
                None => {
                    return Err(GateError::DecisionNotAllowed(format!(
                        "decision {} did not allow a call that needs an intent (unknown, denied, \
                         escalated, not high-risk, or allowed more than {} s ago)",
                        req.decision_id,
                        REMEMBER_FOR.as_secs()
                    )));
                }
            };
            if req.args_digest != call.args_digest
                || req
                    .call_digest
                    .as_ref()
                    .is_some_and(|d| *d != call.call_digest)
                || (req.tool != call.tool && req.tool != call.canonical_tool)
                || call.run_id != req.run_id
            {
                return Err(GateError::IntentDigestMismatch(format!(
                    "decision {} allowed tool `{}` with {} in run `{}`, not these arguments",
                    req.decision_id, call.tool, call.args_digest, call.run_id
                )));
            }
            (call.risk, call.call_digest.clone())
        };
        let intent = self
            .shared
            .store
            .intents()
            .begin(
                NewIntent {
                    tenant: self.shared.tenant.clone(),
                    run_id: req.run_id.into_string(),
                    step_id: req.step_id.into(),
                    tool: req.tool.into(),
                    args_digest: req.args_digest.into(),
                    call_digest: Some(call_digest),
                    decision_id: req.decision_id.to_string(),
                    risk: risk.as_str().to_owned(),
                    verification_probe: req.verification_probe,
                },
                Timestamp::now(),
            )
            .await?;
        self.allowed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .mark_used(&req.decision_id);
        self.shared
            .metrics
            .intents
            .with_label_values(&["pending"])
            .inc();
        Ok(intent)
    }

    /// Watermarks intent `id`: its effect is about to be sent.
    pub(crate) async fn effect_sent(&self, id: &str) -> Result<Intent, GateError> {
        let intents = self.shared.store.intents();
        let sent = async {
            Ok(intents
                .mark_effect_sent(&self.shared.tenant, id, Timestamp::now())
                .await?)
        };
        intent_step("effect_sent", Some(id), sent).await
    }

    /// Closes intent `id` with its outcome.
    pub(crate) async fn complete_intent(
        &self,
        id: &str,
        req: CompleteRequest,
    ) -> Result<Intent, GateError> {
        let intents = self.shared.store.intents();
        let close = async {
            Ok(intents
                .complete(
                    &self.shared.tenant,
                    id,
                    req.outcome,
                    req.detail,
                    Timestamp::now(),
                )
                .await?)
        };
        let intent = intent_step("complete", Some(id), close).await?;
        self.shared
            .metrics
            .intents
            .with_label_values(&[intent.status.as_str()])
            .inc();
        Ok(intent)
    }

    /// The run's open intents, each with its resume class.
    pub(crate) async fn pending_intents(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<PendingIntent>, GateError> {
        Ok(self
            .shared
            .store
            .intents()
            .pending(&self.shared.tenant, run_id.as_str())
            .await?)
    }
}

/// An intent row as the API shows it: its id as `intent_id`, as
/// `POST /v1/intents` answers (`id` stays one release for older clients).
pub fn intent_json(intent: &Intent) -> serde_json::Value {
    json_with(intent, "intent_id", intent.id.clone().into())
}

/// An open intent as the API shows it: the row plus its `resume` class.
pub fn pending_json(p: &PendingIntent) -> serde_json::Value {
    json_with(&intent_json(&p.intent), "resume", p.class.as_str().into())
}
