//! Intents: record a pending intent for an allowed high-risk call,
//! watermark it before the side effect, close it with its outcome, and list
//! a run's open intents for resume. Every store call is scoped to this
//! sidecar's tenant, so another tenant's intent is simply not found.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{Id, RunId};
use toolgate_store::{Intent, IntentOutcome, NewIntent, PendingIntent, ResumeClass};

use crate::GateError;
use crate::allowed::{AllowedCall, AllowedDecisions, REMEMBER_FOR, Remembered};
use crate::shared::Shared;
use crate::trace::intent_step;

/// An intent to begin: what `POST /v1/intents` carries.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BeginIntentRequest {
    /// The allowing decision.
    #[schemars(with = "String")]
    pub decision_id: Id,
    /// Run id (must match the decision's).
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// Step id.
    #[schemars(with = "String")]
    pub step_id: Id,
    /// Tool (must match the decision's).
    #[schemars(with = "String")]
    pub tool: Id,
    /// Argument digest (must match the decision's).
    #[schemars(with = "String")]
    pub args_digest: Id,
    /// Whole-call digest (must match the decision's when given).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub call_digest: Option<Id>,
    /// How a resume flow can check whether the effect happened.
    #[serde(default)]
    pub verification_probe: Option<serde_json::Value>,
}

/// How an intent ended: what `POST /v1/intents/{id}/complete` carries.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
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

/// An intent as the intent endpoints answer it: the row plus `intent_id`
/// (the contract's shape over the store's row).
pub type IntentView = toolgate_contract::agent_api::IntentView<Intent>;

/// An open intent as `GET /v1/intents` lists it and a run's status shows
/// it: the row, `intent_id` and its `resume` class.
pub type OpenIntent = toolgate_contract::agent_api::OpenIntent<Intent, ResumeClass>;

/// Answer of `GET /v1/intents`.
pub type OpenIntents = toolgate_contract::agent_api::OpenIntents<Intent, ResumeClass>;

/// `intent` as the API shows it: its id as `intent_id`, as `POST
/// /v1/intents` answers (`id` stays one release for older clients).
pub fn intent_view(intent: Intent) -> IntentView {
    let intent_id = intent.id.clone();
    IntentView { intent, intent_id }
}

/// An open intent as the API shows it: the row plus its `resume` class.
pub fn open_intent(p: PendingIntent) -> OpenIntent {
    OpenIntent {
        intent: intent_view(p.intent),
        resume: p.class,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A completed intent, every optional member set.
    pub(crate) fn intent() -> Intent {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        Intent {
            id: "i1".into(),
            tenant: "t".into(),
            run_id: "r1".into(),
            step_id: "s1".into(),
            tool: "payments.refund".into(),
            args_digest: "sha256:a".into(),
            call_digest: Some("sha256:c".into()),
            decision_id: "d1".into(),
            risk: "high".into(),
            verification_probe: Some(json!({"kind": "http"})),
            status: toolgate_store::IntentStatus::Completed,
            detail: Some("done".into()),
            created_at: at("2026-01-02T03:04:05Z"),
            effect_sent_at: Some(at("2026-01-02T03:04:06Z")),
            completed_at: Some(at("2026-01-02T03:04:07Z")),
        }
    }

    /// [`intent`] as the intent endpoints have always answered it.
    pub(crate) fn intent_json() -> serde_json::Value {
        json!({
            "id": "i1", "intent_id": "i1", "tenant": "t", "run_id": "r1",
            "step_id": "s1", "tool": "payments.refund", "args_digest": "sha256:a",
            "call_digest": "sha256:c", "decision_id": "d1", "risk": "high",
            "verification_probe": {"kind": "http"}, "status": "completed",
            "detail": "done", "created_at": "2026-01-02T03:04:05Z",
            "effect_sent_at": "2026-01-02T03:04:06Z",
            "completed_at": "2026-01-02T03:04:07Z",
        })
    }

    #[test]
    fn an_intent_is_shown_with_its_intent_id() {
        let view = serde_json::to_value(intent_view(intent())).unwrap();
        assert_eq!(view, intent_json());
    }

    /// Unset members are `null`, not left out.
    #[test]
    fn an_open_intent_adds_its_resume_class() {
        let mut row = intent();
        (row.call_digest, row.verification_probe, row.detail) = (None, None, None);
        (row.effect_sent_at, row.completed_at) = (None, None);
        row.status = toolgate_store::IntentStatus::Pending;
        let open = open_intent(PendingIntent {
            intent: row,
            class: ResumeClass::Uncertain,
        });
        let listed = OpenIntents {
            intents: vec![open],
        };
        let mut expected = intent_json();
        for member in [
            "call_digest",
            "verification_probe",
            "detail",
            "effect_sent_at",
            "completed_at",
        ] {
            expected[member] = serde_json::Value::Null;
        }
        expected["status"] = "pending".into();
        expected["resume"] = "uncertain".into();
        let got = serde_json::to_value(&listed).unwrap();
        assert_eq!(got, json!({"intents": [expected]}));
    }
}
