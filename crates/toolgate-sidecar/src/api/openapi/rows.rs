//! Schemas of the store's rows the agent API answers with (an approval,
//! an intent, a flow label): `toolgate-store` derives no `JsonSchema`, so
//! each is mirrored here, and the tests hold each mirror to the row (a
//! full row crosses both ways unchanged).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One approval row.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// Approval id.
    pub id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Invocation it answers.
    pub invocation_id: String,
    /// Waiting run.
    pub run_id: String,
    /// Approved tool.
    pub tool: String,
    /// Approved argument digest.
    pub args_digest: String,
    /// Approved whole-call digest (`null` on rows from before it existed).
    pub call_digest: Option<String>,
    /// Policy version that escalated.
    pub policy_version: String,
    /// Escalating decision.
    pub decision_id: String,
    /// Who asked.
    pub requested_by: String,
    /// Effective status (lazy expiry applied).
    pub status: ApprovalStatus,
    /// When it was requested.
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
    /// When it stops being answerable.
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
    /// Who resolved it.
    pub resolved_by: Option<String>,
    /// Why, in the resolver's words.
    pub reason: Option<String>,
    /// When it was resolved or swept to expired.
    #[schemars(extend("format" = "date-time"))]
    pub resolved_at: Option<String>,
    /// When the single re-authorization it grants was used.
    #[schemars(extend("format" = "date-time"))]
    pub consumed_at: Option<String>,
    /// The action of the call, as requested.
    pub action: Option<String>,
    /// The preview shown to the approver, as requested.
    pub preview: Option<String>,
}

/// Effective state of an approval (the contract's `ApprovalStatus`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a human.
    Pending,
    /// Approved; may be consumed once.
    Approved,
    /// Denied.
    Denied,
    /// Nobody answered in time.
    Expired,
    /// Its run (or a scope holding it) was cancelled before anyone answered.
    Cancelled,
}

/// Lifecycle state of an intent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntentStatus {
    /// Recorded before the call; outcome not yet known.
    Pending,
    /// The tool reported its effect happened.
    Completed,
    /// The tool reported its effect did not happen.
    NotCompleted,
    /// The tool failed; whether the effect happened is in `detail`.
    Error,
}

/// One intent row.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Intent {
    /// Generated id (UUIDv7); also answered as `intent_id`.
    pub id: String,
    /// Tenant that owns the run.
    pub tenant: String,
    /// Run id.
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Tool name.
    pub tool: String,
    /// Bound argument digest.
    pub args_digest: String,
    /// Bound whole-call digest (`null` on rows from before it existed).
    pub call_digest: Option<String>,
    /// Decision that allowed the call.
    pub decision_id: String,
    /// Risk class.
    pub risk: String,
    /// Probe for checking the effect on resume.
    pub verification_probe: Option<Value>,
    /// Current status.
    pub status: IntentStatus,
    /// Free-form detail given at completion.
    pub detail: Option<String>,
    /// When the pending row was committed.
    #[schemars(extend("format" = "date-time"))]
    pub created_at: String,
    /// When the caller said the side effect was about to be sent.
    #[schemars(extend("format" = "date-time"))]
    pub effect_sent_at: Option<String>,
    /// When the outcome was recorded.
    #[schemars(extend("format" = "date-time"))]
    pub completed_at: Option<String>,
}

/// How the resume flow may treat an open intent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumeClass {
    /// The effect was never sent, so running the call again cannot double it.
    SafeToRetry,
    /// The effect may have happened; a human or the verification probe
    /// must decide. Never replay silently.
    Uncertain,
}

/// One flow label a run or pod carries.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowLabel {
    /// The label's name, as the profile declares it.
    pub label: String,
    /// The decision whose allowed call set it.
    pub decision_id: String,
    /// When that call was decided.
    #[schemars(extend("format" = "date-time"))]
    pub set_at: String,
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    /// `value` reads as the store's row `R` and the mirror `M`, and both
    /// write it back unchanged.
    fn same<R: DeserializeOwned + Serialize, M: DeserializeOwned + Serialize>(value: Value) {
        let row: R = serde_json::from_value(value.clone()).expect("the store reads it");
        assert_eq!(serde_json::to_value(&row).unwrap(), value);
        let mirror: M = serde_json::from_value(value.clone()).expect("the mirror reads it");
        assert_eq!(serde_json::to_value(&mirror).unwrap(), value);
    }

    const AT: &str = "2026-01-02T03:04:05Z";

    #[test]
    fn an_approval_row_is_the_store_s() {
        for status in toolgate_contract::ApprovalStatus::NAMES {
            same::<toolgate_contract::ApprovalStatus, super::ApprovalStatus>(json!(status));
            same::<toolgate_store::Approval, super::Approval>(json!({
                "id": "a1", "tenant": "t", "invocation_id": "i", "run_id": "r", "tool": "x",
                "args_digest": "sha256:a", "call_digest": "sha256:c", "policy_version": "p",
                "decision_id": "d", "requested_by": "pod", "status": status, "created_at": AT,
                "expires_at": AT, "resolved_by": "alice", "reason": "ok", "resolved_at": AT,
                "consumed_at": AT, "action": "a", "preview": "p",
            }));
        }
    }

    #[test]
    fn intent_rows_and_labels_are_the_store_s() {
        for status in toolgate_store::IntentStatus::NAMES {
            same::<toolgate_store::IntentStatus, super::IntentStatus>(json!(status));
            same::<toolgate_store::Intent, super::Intent>(json!({
                "id": "i1", "tenant": "t", "run_id": "r", "step_id": "s", "tool": "x",
                "args_digest": "sha256:a", "call_digest": null, "decision_id": "d",
                "risk": "high", "verification_probe": {"kind": "http"}, "status": status,
                "detail": "d", "created_at": AT, "effect_sent_at": AT, "completed_at": null,
            }));
        }
        for resume in toolgate_store::ResumeClass::NAMES {
            same::<toolgate_store::ResumeClass, super::ResumeClass>(json!(resume));
        }
        same::<toolgate_store::FlowLabel, super::FlowLabel>(
            json!({"label": "secret", "decision_id": "d", "set_at": AT}),
        );
    }
}
