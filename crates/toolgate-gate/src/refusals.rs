//! Refusals made at an edge — the MCP gateway's own checks (a tool never
//! listed, arguments that do not fit its schema, a malformed message, an
//! upstream outside egress) and the workspace's (an escape, a link swapped
//! in) — are verdicts like any other: each is a denial with its reason and
//! the check that refused, appended to the hash-chained decision log before
//! the refusal is answered, and counted.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolgate_policy::{Decision, Id, Reason, Risk, RunId};
use toolgate_store::DecisionRecord;

use crate::labels::{MAX_LABEL_CHARS, NO_PROFILE, OTHER_TOOL, metric_tool_label, truncate};
use crate::{Gate, GateError, NO_POLICY, NO_STEP};

/// One refusal made at an edge: what `POST /v1/refusals` carries (the
/// gateway of `toolgate mcp wrap` reports its refusals there).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusalRequest {
    /// The tool (or `SERVER.METHOD`) the refused message was about.
    pub tool: Id,
    /// The arguments the refused call carried, when it had any.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    /// Run the message belongs to.
    pub run_id: RunId,
    /// Step within the run (`""` is none).
    #[serde(default, deserialize_with = "toolgate_policy::ids::empty_as_none")]
    pub step_id: Option<Id>,
    /// Why: one of [`Reason::EDGE`].
    pub reason: Reason,
    /// The check that refused (`mcp:tool_not_listed`, `workspace:workspace_escape`).
    pub check: Id,
    /// For an MCP tool: the definition it was announced with.
    #[serde(default)]
    pub definition_digest: Option<Id>,
}

/// The decision a refusal was recorded as.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRefusal {
    /// Its id in the decision log.
    pub decision_id: String,
}

impl Gate {
    /// Records `refusal` as a denial, durably, and counts it; the caller
    /// then answers the refusal (it stands whether or not it could be
    /// recorded: refusing is never the unsafe side).
    pub async fn refuse(&self, refusal: &RefusalRequest) -> Result<RecordedRefusal, GateError> {
        if !Reason::EDGE.contains(&refusal.reason) {
            return Err(GateError::InvalidRequest(format!(
                "`{}` is not a reason an edge refuses with",
                refusal.reason.as_str()
            )));
        }
        let enforced = self.policy.current();
        let empty = Map::new();
        let arguments = refusal.arguments.as_ref().unwrap_or(&empty);
        let risk = enforced
            .as_deref()
            .and_then(|e| e.policy.effect(&refusal.tool))
            .map_or(Risk::High, |effect| effect.risk);
        let decision_id = uuid::Uuid::now_v7().to_string();
        let record = DecisionRecord {
            decision_id: decision_id.clone(),
            run_id: refusal.run_id.as_str().to_owned(),
            step_id: refusal
                .step_id
                .as_ref()
                .map_or_else(|| NO_STEP.to_owned(), Id::to_string),
            tool: refusal.tool.to_string(),
            verdict: Decision::Deny.as_str().to_owned(),
            reason: refusal.reason.as_str().to_owned(),
            message: None,
            matched_rule: Some(truncate(&refusal.check, MAX_LABEL_CHARS * 4).to_owned()),
            policy_version: enforced
                .as_deref()
                .map_or_else(|| NO_POLICY.to_owned(), |e| e.policy_version.clone()),
            risk: risk.as_str().to_owned(),
            args_digest: toolgate_policy::args_digest(arguments),
            call_digest: Some(toolgate_policy::call_digest(&refusal.tool, None, arguments)),
            definition_digest: refusal.definition_digest.as_ref().map(Id::to_string),
            created_at: Timestamp::now(),
        };
        record
            .validate()
            .map_err(|e| GateError::InvalidRequest(e.to_string()))?;
        let (tool_label, profile_label) = match enforced.as_deref() {
            Some(e) => (
                metric_tool_label(&e.policy, &refusal.tool),
                truncate(&e.profile, MAX_LABEL_CHARS),
            ),
            None => (OTHER_TOOL, NO_PROFILE),
        };
        self.metrics
            .decisions
            .with_label_values(&[
                Decision::Deny.as_str(),
                refusal.reason.as_str(),
                tool_label,
                profile_label,
                "true",
            ])
            .inc();
        self.store
            .decisions()
            .append(&self.tenant, &self.stream, record)
            .await?;
        Ok(RecordedRefusal { decision_id })
    }

    /// [`Gate::refuse`] where the refusal is answered anyway: a log that
    /// cannot take the record is reported, and the refusal stands.
    pub async fn record_refusal(&self, refusal: &RefusalRequest) {
        if let Err(err) = self.refuse(refusal).await {
            tracing::error!(error = %err, reason = refusal.reason.as_str(), "refusal not recorded");
        }
    }
}
