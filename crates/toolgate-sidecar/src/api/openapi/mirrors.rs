//! Schemas of the bodies `toolgate-gate` defines without a `JsonSchema`
//! derive: one mirror each, field for field. The tests below hold every
//! mirror to its gate type (a full value crosses both ways), so a field
//! added or renamed on one side fails here, not in a client.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolgate_contract::agent_api::AuthorizeResponse;
use toolgate_policy::Verdict;

/// One call of a batch: an authorize request without the run.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchCall {
    /// Tool as the agent calls it.
    pub tool: String,
    /// Optional action.
    #[serde(default)]
    pub action: Option<String>,
    /// Exact arguments.
    pub arguments: Map<String, Value>,
    /// Step within the run (`""` is none).
    #[serde(default)]
    pub step_id: Option<String>,
    /// For MCP gateways: the tool's definition digest.
    #[serde(default)]
    pub definition_digest: Option<String>,
}

/// Body of `POST /v1/authorize/batch`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// Run every call belongs to.
    pub run_id: String,
    /// Must equal the sidecar's tenant when given.
    #[serde(default)]
    pub tenant: Option<String>,
    /// 1 to `MAX_BATCH_CALLS` calls the agent would like to run at once.
    #[schemars(length(min = 1, max = 64))]
    pub calls: Vec<BatchCall>,
}

/// Answer of `POST /v1/authorize/batch`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
    pub verdicts: Vec<AuthorizeResponse<Verdict>>,
}

/// Body of `POST /v1/runs/{run_id}/cancel` and `POST /v1/pod/cancel`
/// (either may be empty).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why the run stops.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Answer of a run's cancellation.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelResponse {
    /// The run, in its canonical spelling.
    pub run_id: String,
    /// When its cancellation was first requested.
    #[schemars(extend("format" = "date-time"))]
    pub cancel_requested_at: String,
    /// False when it was already cancelled.
    pub newly_cancelled: bool,
    /// Pending approvals of the run this request cancelled.
    pub approvals_cancelled: u64,
}

/// Answer of `POST /v1/pod/cancel`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PodCancelResponse {
    /// What was stopped: `pod NAME`.
    pub scope: String,
    /// When the pod's cancellation was first requested.
    #[schemars(extend("format" = "date-time"))]
    pub cancel_requested_at: String,
    /// False when it was already cancelled.
    pub newly_cancelled: bool,
    /// Pending approvals this sidecar asked for that this request cancelled.
    pub approvals_cancelled: u64,
}

/// Body of `POST /v1/intents`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BeginIntentRequest {
    /// The allowing decision.
    pub decision_id: String,
    /// Run id (must match the decision's).
    pub run_id: String,
    /// Step id.
    pub step_id: String,
    /// Tool (must match the decision's).
    pub tool: String,
    /// Argument digest (must match the decision's).
    pub args_digest: String,
    /// Whole-call digest (must match the decision's when given).
    #[serde(default)]
    pub call_digest: Option<String>,
    /// How a resume flow can check whether the effect happened.
    #[serde(default)]
    pub verification_probe: Option<Value>,
}

/// Answer of `POST /v1/intents`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BegunIntent {
    /// The new intent's id.
    pub intent_id: String,
    /// `pending`.
    pub status: String,
}

/// How an intent ended: what `POST /v1/intents/{id}/complete` carries.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// How it ended.
    pub outcome: IntentOutcome,
    /// Free-form detail.
    #[serde(default)]
    pub detail: Option<String>,
}

/// The outcomes an intent closes with.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntentOutcome {
    /// The effect happened.
    Completed,
    /// It did not.
    NotCompleted,
    /// It failed.
    Error,
}

/// Body of `POST /v1/workspace/read`, `list` and `stat`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathRequest {
    /// Run whose workspace to use.
    pub run_id: String,
    /// Relative path; `""` is the root (list and stat only).
    pub path: String,
    /// Step within the run, for the decision record (`""` is none).
    #[serde(default)]
    pub step_id: Option<String>,
}

/// Body of `POST /v1/workspace/write`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteRequest {
    /// Run whose workspace to use.
    pub run_id: String,
    /// Relative path.
    pub path: String,
    /// UTF-8 text to write.
    pub content: String,
    /// Step within the run, for the decision record (`""` is none).
    #[serde(default)]
    pub step_id: Option<String>,
}

/// Body of `POST /v1/tools/visible`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibleToolsRequest {
    /// Policy tool names (aliases apply), e.g. `fs.read_file`.
    #[schemars(length(max = 10_000))]
    pub tools: Vec<String>,
    /// Definition digests the server announced, by policy tool name.
    #[serde(default)]
    pub definitions: std::collections::BTreeMap<String, String>,
}

/// Answer of `POST /v1/tools/visible`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibleTools {
    /// The asked names the policy lets the run see.
    pub tools: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    /// `value` reads as the gate's type `G` and as the mirror `M`, and
    /// both write it back the same (types without `Serialize` only read).
    fn reads_as_both<G: DeserializeOwned, M: DeserializeOwned + Serialize>(value: Value) -> G {
        let mirror: M = serde_json::from_value(value.clone()).expect("the mirror reads it");
        assert_eq!(serde_json::to_value(&mirror).unwrap(), value);
        serde_json::from_value(value).expect("the gate reads it")
    }

    fn round_trips<G: DeserializeOwned + Serialize, M: DeserializeOwned + Serialize>(value: Value) {
        let gate: G = reads_as_both::<G, M>(value.clone());
        assert_eq!(serde_json::to_value(&gate).unwrap(), value);
    }

    fn verdict() -> Value {
        json!({
            "decision_id": "d1", "verdict": "allow", "reason": "allow_rule",
            "matched_rule": "allow:t:*", "policy_version": "p", "risk": "low",
            "intent_required": false, "args_digest": "sha256:a", "call_digest": "sha256:c",
            "enforced": true,
        })
    }

    #[test]
    fn batch_bodies_are_the_gate_s() {
        use toolgate_gate::runs as gate;
        reads_as_both::<gate::BatchRequest, super::BatchRequest>(json!({
            "run_id": "r1", "tenant": "t",
            "calls": [{"tool": "t", "action": "a", "arguments": {"x": 1},
                       "step_id": "s", "definition_digest": "sha256:d"}],
        }));
        round_trips::<gate::BatchResponse, super::BatchResponse>(json!({
            "parallel": false, "reason": "batch_denied", "call_index": 0,
            "verdicts": [verdict()],
        }));
    }

    #[test]
    fn cancellations_are_the_gate_s() {
        use toolgate_gate::runs as gate;
        reads_as_both::<gate::CancelRequest, super::CancelRequest>(json!({"reason": "why"}));
        let at = "2026-01-02T03:04:05Z";
        round_trips::<gate::CancelResponse, super::CancelResponse>(json!({
            "run_id": "r1", "cancel_requested_at": at, "newly_cancelled": true,
            "approvals_cancelled": 2,
        }));
        round_trips::<gate::PodCancelResponse, super::PodCancelResponse>(json!({
            "scope": "pod p", "cancel_requested_at": at, "newly_cancelled": false,
            "approvals_cancelled": 0,
        }));
    }

    #[test]
    fn intent_and_workspace_bodies_are_the_gate_s() {
        reads_as_both::<toolgate_gate::BeginIntentRequest, super::BeginIntentRequest>(json!({
            "decision_id": "d1", "run_id": "r1", "step_id": "s", "tool": "t",
            "args_digest": "sha256:a", "call_digest": "sha256:c",
            "verification_probe": {"kind": "http"},
        }));
        for outcome in ["completed", "not_completed", "error"] {
            round_trips::<toolgate_gate::CompleteRequest, super::CompleteRequest>(
                json!({"outcome": outcome, "detail": "d"}),
            );
        }
        round_trips::<toolgate_gate::PathRequest, super::PathRequest>(
            json!({"run_id": "r1", "path": "a/b", "step_id": "s"}),
        );
        round_trips::<toolgate_gate::WriteRequest, super::WriteRequest>(
            json!({"run_id": "r1", "path": "a", "content": "x", "step_id": "s"}),
        );
        reads_as_both::<crate::api::VisibleToolsRequest, super::VisibleToolsRequest>(
            json!({"tools": ["fs.read"], "definitions": {"fs.read": "sha256:d"}}),
        );
    }
}
