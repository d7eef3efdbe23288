//! The sidecar's agent API on the wire: the bodies its endpoints take and
//! answer, and its limits. The sidecar (through `toolgate-gate`) and its
//! clients (`toolgate mcp wrap`, the in-process MCP gateway) share these
//! definitions, so the shape is written once.
//!
//! The identifiers and the verdict inside the bodies are type parameters:
//! their validated types (`Id`, `RunId`, `Reason`, `Verdict`) live in
//! `toolgate-policy`, which depends on this crate, not the other way round.
//! `toolgate-gate` names the bodies with those types filled in (its
//! `AuthorizeResponse`, `RefusalRequest`, `MessageScreen`); the defaults
//! (plain strings, a JSON object) read any body of the right shape.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::de::IntoDeserializer;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Header naming the run of a request to the sidecar's MCP gateway
/// (`/mcp/NAME`); spelled `X-Toolgate-Run-Id` in the docs, lowercase here
/// as HTTP/2 sends it (header names are case-insensitive).
pub const RUN_ID_HEADER: &str = "x-toolgate-run-id";

/// Longest `?wait=` an approval long-poll may ask for, in seconds: the
/// sidecar caps a wait at this, and its clients never ask for more.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// The docs table of the agent API's limits and names (Markdown), as
/// `docs/sidecar.md` holds it between its `agent-api-limits` markers:
/// what every client must agree on with the sidecar, one constant a row.
pub fn limits_markdown_table() -> String {
    let rows = [
        (
            "agent_api::MAX_WAIT_SECONDS",
            MAX_WAIT_SECONDS.to_string(),
            "Longest `?wait=` of an approval long-poll, in seconds: the sidecar caps a wait at this and clients ask for no more.",
        ),
        (
            "agent_api::RUN_ID_HEADER",
            RUN_ID_HEADER.to_owned(),
            "Header naming the run of a request to the MCP gateway (`/mcp/NAME`); header names are case-insensitive.",
        ),
        (
            "env::URL",
            crate::env::URL.to_owned(),
            "Environment variable holding the sidecar's URL in every app container; clients read it by default.",
        ),
    ];
    let mut out = String::from("| constant | value | meaning |\n|---|---|---|\n");
    for (name, value, meaning) in rows {
        out.push_str(&format!("| `{name}` | `{value}` | {meaning} |\n"));
    }
    out
}

/// One call to decide: what `POST /v1/authorize` carries, as its clients
/// (`toolgate-client`) write it. Absent options are left out of the body.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[serde(bound(deserialize = "Id: Deserialize<'de>, RunId: Deserialize<'de>"))]
pub struct AuthorizeRequest<Id = String, RunId = String> {
    /// Tool as the agent calls it.
    pub tool: Id,
    /// Optional action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Id>,
    /// Exact arguments.
    pub arguments: Map<String, Value>,
    /// Run the call belongs to.
    pub run_id: RunId,
    /// Step within the run (`""` is none).
    #[serde(
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub step_id: Option<Id>,
    /// Must equal the sidecar's tenant when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// For MCP gateways: the digest of the tool's definition as announced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition_digest: Option<Id>,
}

/// The answer to one call (`POST /v1/authorize`): the verdict, flattened,
/// plus its identifiers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuthorizeResponse<Verdict = Map<String, Value>> {
    /// Id of this decision; intents name it.
    pub decision_id: String,
    /// The verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// For `escalate`: the approval to wait on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Flow labels this allowed call set on its run (or pod), in name
    /// order; absent when it set none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow_labels_set: Vec<String>,
}

/// One refusal made at an edge: what `POST /v1/refusals` carries (the
/// gateway of `toolgate mcp wrap` reports its refusals there).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[serde(bound(
    deserialize = "Id: Deserialize<'de>, RunId: Deserialize<'de>, Reason: Deserialize<'de>"
))]
pub struct RefusalRequest<Id = String, RunId = String, Reason = String> {
    /// The tool (or `SERVER.METHOD`) the refused message was about.
    pub tool: Id,
    /// The arguments the refused call carried, when it had any.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    /// Run the message belongs to.
    pub run_id: RunId,
    /// Step within the run (`""` is none).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub step_id: Option<Id>,
    /// Why: one of the reasons an edge refuses with (`Reason::EDGE`).
    pub reason: Reason,
    /// The check that refused (`mcp:tool_not_listed`, `workspace:workspace_escape`).
    pub check: Id,
    /// For an MCP tool: the definition it was announced with.
    #[serde(default)]
    pub definition_digest: Option<Id>,
}

/// The decision a refusal was recorded as (the answer to `POST /v1/refusals`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RecordedRefusal {
    /// Its id in the decision log.
    pub decision_id: String,
}

/// A message (not a `tools/call`) a run sends an MCP server: what `POST
/// /v1/messages/screen` carries.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageScreen<Id = String, RunId = String> {
    /// Run the message belongs to.
    pub run_id: RunId,
    /// The MCP server it goes to.
    pub server: Id,
    /// Its method.
    pub method: Id,
    /// Its parameters (without `_meta`), whose text the flow rules see.
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// A screened message's answer: `refused` with the denial it was recorded as.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Screened {
    /// Whether the message may not be sent.
    pub refused: bool,
    /// The recorded denial, when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
    /// The flow rule that refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_rule: Option<String>,
}

/// An intent as the intent endpoints answer it: the stored row, flattened,
/// plus its id as `intent_id`, the name `POST /v1/intents` answers with
/// (the row's own `id` stays one release for older clients).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IntentView<Intent = Map<String, Value>> {
    /// The row (`toolgate-store`'s `Intent` in the sidecar).
    #[serde(flatten)]
    pub intent: Intent,
    /// The intent's id.
    pub intent_id: String,
}

/// An open intent, as `GET /v1/intents` lists it and a run's status shows
/// it: the intent plus how the resume flow may treat it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpenIntent<Intent = Map<String, Value>, Resume = String> {
    /// The intent, with its `intent_id`.
    #[serde(flatten)]
    pub intent: IntentView<Intent>,
    /// `safe_to_retry` or `uncertain`.
    pub resume: Resume,
}

/// Answer of `GET /v1/intents?run_id=...&status=pending`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpenIntents<Intent = Map<String, Value>, Resume = String> {
    /// The run's open intents.
    pub intents: Vec<OpenIntent<Intent, Resume>>,
}

/// An approval as `GET /v1/approvals/{id}` answers it: the stored row,
/// flattened, plus its id as `approval_id` (the name `/v1/authorize`
/// answers with).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalView<Approval = Map<String, Value>> {
    /// The row (`toolgate-store`'s `Approval` in the sidecar).
    #[serde(flatten)]
    pub approval: Approval,
    /// The approval's id.
    pub approval_id: String,
}

/// Answer of `GET /v1/runs/{run_id}` (and `toolgate runs status`): what an
/// agent checks between steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunStatus<RunId = String, Open = OpenIntent, Label = Map<String, Value>> {
    /// The run, in its canonical spelling.
    pub run_id: RunId,
    /// True once anyone cancelled the run: stop, and make no more calls.
    pub cancel_requested: bool,
    /// When, and why.
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
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
    /// Intents of the run still open, as `GET /v1/intents` lists them.
    pub open_intents: Vec<Open>,
    /// Flow labels the run carries (its pod's, for a profile whose flows
    /// have `scope: pod`), oldest first, each with the decision that set
    /// it; absent for a profile without flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_labels: Option<Vec<Label>>,
}

/// The budgets of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

/// One budget as the agent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetUse {
    /// Used so far.
    pub used: u64,
    /// The profile's limit; `null` when none is set.
    pub limit: Option<u64>,
    /// What remains; `null` when unlimited.
    pub left: Option<u64>,
}

impl BudgetUse {
    /// `used` of `limit`, with what is left (none past the limit).
    pub fn new(used: u64, limit: Option<u64>) -> Self {
        Self {
            used,
            limit,
            left: limit.map(|l| l.saturating_sub(used)),
        }
    }
}

/// Every refusal's body: `{"error": {"code", "message"}}`, plus the
/// decision for a governed operation the policy refused (`policy_denied`,
/// `approval_required`), as `/v1/authorize` would have answered it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody<Verdict = Map<String, Value>> {
    /// The code (one of [`crate::errors::ALL`]) and what went wrong.
    pub error: ErrorDetail,
    /// The refusing decision, when the policy refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<AuthorizeResponse<Verdict>>,
}

/// The `error` member of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// The stable code clients match on.
    #[schemars(with = "crate::errors::Code")]
    pub code: String,
    /// For people.
    pub message: String,
}

/// An optional identifier where `""` (and `null`, and absence) mean none:
/// the agent API's `step_id`. Anything else must read as a `T`.
pub fn empty_as_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => T::deserialize(text.into_deserializer()).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_are_strict_and_an_empty_step_is_none() {
        let read = |v: Value| serde_json::from_value::<RefusalRequest>(v);
        let body = json!({
            "tool": "fs.read", "run_id": "r1", "step_id": "",
            "reason": "tool_not_listed", "check": "mcp:tool_not_listed",
        });
        let refusal = read(body.clone()).unwrap();
        assert_eq!(refusal.step_id, None);
        assert_eq!(refusal.arguments, None);
        let mut extra = body;
        extra["surprise"] = json!(1);
        assert!(read(extra).is_err());
    }

    #[test]
    fn a_call_leaves_out_what_it_does_not_name() {
        let call: AuthorizeRequest = serde_json::from_value(json!({
            "tool": "t", "arguments": {}, "run_id": "r", "step_id": "",
        }))
        .unwrap();
        assert_eq!(call.step_id, None);
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"tool": "t", "arguments": {}, "run_id": "r"})
        );
    }

    #[test]
    fn an_authorize_answer_flattens_its_verdict() {
        let answer: AuthorizeResponse = serde_json::from_value(json!({
            "decision_id": "d1", "verdict": "allow", "reason": "allow_rule",
        }))
        .unwrap();
        assert_eq!(answer.verdict["verdict"], "allow");
        assert_eq!(answer.approval_id, None);
        let back = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            back,
            json!({"decision_id": "d1", "verdict": "allow", "reason": "allow_rule"})
        );
    }

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    /// An intent is its row plus `intent_id`; an open one adds `resume`;
    /// both read back into the row and the added members.
    #[test]
    fn intent_views_add_their_members_to_the_row() {
        let row = object(json!({"id": "i1", "status": "pending"}));
        let view = IntentView {
            intent: row.clone(),
            intent_id: "i1".into(),
        };
        let open = OpenIntent {
            intent: view.clone(),
            resume: "uncertain".to_owned(),
        };
        let expected =
            json!({"id": "i1", "status": "pending", "intent_id": "i1", "resume": "uncertain"});
        assert_eq!(serde_json::to_value(&open).unwrap(), expected);
        let listed = OpenIntents {
            intents: vec![open],
        };
        let listed_json = serde_json::to_value(&listed).unwrap();
        assert_eq!(listed_json, json!({"intents": [expected]}));
        let back: OpenIntents = serde_json::from_value(listed_json).unwrap();
        assert_eq!(back.intents[0].intent.intent, row);
        assert_eq!(back.intents[0].resume, "uncertain");
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            json!({"id": "i1", "status": "pending", "intent_id": "i1"})
        );
    }

    #[test]
    fn an_approval_is_its_row_plus_approval_id() {
        let view = ApprovalView {
            approval: object(json!({"id": "a1", "status": "pending"})),
            approval_id: "a1".into(),
        };
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            json!({"id": "a1", "status": "pending", "approval_id": "a1"})
        );
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

    /// A run's status leaves out who and which scope stopped it, its pod
    /// budgets and its labels when it has none; everything else is always
    /// there, `null` when unset.
    #[test]
    fn a_run_status_has_its_members() {
        let budget = BudgetUse::new(1, None);
        let mut status: RunStatus = RunStatus {
            run_id: "r1".into(),
            cancel_requested: false,
            cancel_requested_at: None,
            cancel_reason: None,
            cancelled_by: None,
            cancelled_scope: None,
            budgets: RunBudgets {
                calls: budget,
                high_risk_calls: budget,
                run_seconds: budget,
                pod_calls: None,
                pod_high_risk_calls: None,
            },
            open_intents: Vec::new(),
            flow_labels: None,
        };
        let used = json!({"used": 1, "limit": null, "left": null});
        let three = json!({"calls": used, "high_risk_calls": used, "run_seconds": used});
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({
                "run_id": "r1", "cancel_requested": false, "cancel_requested_at": null,
                "cancel_reason": null, "budgets": three, "open_intents": [],
            })
        );
        let at: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        status.cancel_requested = true;
        status.cancel_requested_at = Some(at);
        status.cancel_reason = Some("why".into());
        status.cancelled_by = Some("me".into());
        status.cancelled_scope = Some("namespace".into());
        status.budgets.pod_calls = Some(budget);
        status.budgets.pod_high_risk_calls = Some(budget);
        status.flow_labels = Some(vec![object(json!({"label": "l"}))]);
        let mut five = three;
        five["pod_calls"] = used.clone();
        five["pod_high_risk_calls"] = used;
        let full = json!({
            "run_id": "r1", "cancel_requested": true,
            "cancel_requested_at": "2026-01-02T03:04:05Z", "cancel_reason": "why",
            "cancelled_by": "me", "cancelled_scope": "namespace", "budgets": five,
            "open_intents": [], "flow_labels": [{"label": "l"}],
        });
        assert_eq!(serde_json::to_value(&status).unwrap(), full);
        assert_eq!(serde_json::from_value::<RunStatus>(full).unwrap(), status);
    }

    /// The error envelope carries a verdict only when the policy refused.
    #[test]
    fn an_error_body_carries_the_refusing_verdict() {
        let error = ErrorDetail {
            code: "not_found".into(),
            message: "no such run".into(),
        };
        let plain: ErrorBody = ErrorBody {
            error: error.clone(),
            verdict: None,
        };
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            json!({"error": {"code": "not_found", "message": "no such run"}})
        );
        let refused: ErrorBody = ErrorBody {
            error,
            verdict: Some(AuthorizeResponse {
                decision_id: "d1".into(),
                verdict: object(json!({"verdict": "deny"})),
                approval_id: None,
                flow_labels_set: Vec::new(),
            }),
        };
        assert_eq!(
            serde_json::to_value(&refused).unwrap(),
            json!({
                "error": {"code": "not_found", "message": "no such run"},
                "verdict": {"decision_id": "d1", "verdict": "deny"},
            })
        );
    }

    /// `docs/sidecar.md` holds exactly [`limits_markdown_table`] between
    /// its `agent-api-limits` markers (the Python client's test reads it);
    /// `TOOLGATE_BLESS=1` writes it there.
    #[test]
    fn the_docs_limits_table_is_the_contract_s() {
        let table = limits_markdown_table();
        let row = format!("| `agent_api::MAX_WAIT_SECONDS` | `{MAX_WAIT_SECONDS}` |");
        assert!(table.contains(&row), "{table}");
        crate::doc_tables::assert_generated("agent-api-limits", &table);
    }

    #[test]
    fn screens_are_strict() {
        assert!(
            serde_json::from_value::<MessageScreen>(json!({
                "run_id": "r", "server": "s", "method": "m", "tool": "x",
            }))
            .is_err()
        );
        let passes: Screened = serde_json::from_value(json!({"refused": false})).unwrap();
        assert_eq!(
            serde_json::to_value(passes).unwrap(),
            json!({"refused": false})
        );
    }
}
