//! Refusals made at an edge — the MCP gateway's own checks (a tool never
//! listed, arguments that do not fit its schema, a malformed message, an
//! upstream outside egress) and the workspace's (an escape, a link swapped
//! in) — are verdicts like any other: each is a denial with its reason and
//! the check that refused, appended to the hash-chained decision log before
//! the refusal is answered, and counted. Messages to an MCP server other
//! than a `tools/call` are screened by the run's flow rules here too
//! ([`Decisions::screen_message`]).

use jiff::Timestamp;
use serde_json::{Map, Value};
use toolgate_contract::agent_api::{self, RecordedRefusal, Screened};
use toolgate_policy::{Decision, Id, Reason, Risk, RunId};
use toolgate_store::DecisionRecord;

use super::Decisions;
use crate::labels::{MAX_LABEL_CHARS, decision_labels, truncate};
use crate::{GateError, NO_POLICY, NO_STEP};

/// One refusal made at an edge: what `POST /v1/refusals` carries (the
/// gateway of `toolgate mcp wrap` reports its refusals there). Its shape
/// is the contract's ([`agent_api::RefusalRequest`]).
pub type RefusalRequest = agent_api::RefusalRequest<Id, RunId, Reason>;

/// A message (not a `tools/call`) a run sends an MCP server: what `POST
/// /v1/messages/screen` carries ([`agent_api::MessageScreen`]).
pub type MessageScreen = agent_api::MessageScreen<Id, RunId>;

/// One denial on its way to the log.
struct Denial<'a> {
    tool: &'a str,
    arguments: &'a Map<String, Value>,
    run_id: &'a RunId,
    step_id: Option<&'a Id>,
    reason: Reason,
    rule: &'a str,
    definition_digest: Option<&'a Id>,
}

impl Decisions {
    /// Records `refusal` as a denial, durably, and counts it; the caller
    /// then answers the refusal (it stands whether or not it could be
    /// recorded: refusing is never the unsafe side).
    pub(crate) async fn refuse(
        &self,
        refusal: &RefusalRequest,
    ) -> Result<RecordedRefusal, GateError> {
        if !Reason::EDGE.contains(&refusal.reason) {
            return Err(GateError::InvalidRequest(format!(
                "`{}` is not a reason an edge refuses with",
                refusal.reason.as_str()
            )));
        }
        let empty = Map::new();
        let decision_id = self
            .append_denial(Denial {
                tool: &refusal.tool,
                arguments: refusal.arguments.as_ref().unwrap_or(&empty),
                run_id: &refusal.run_id,
                step_id: refusal.step_id.as_ref(),
                reason: refusal.reason,
                rule: &refusal.check,
                definition_digest: refusal.definition_digest.as_ref(),
            })
            .await?;
        Ok(RecordedRefusal { decision_id })
    }

    /// [`Decisions::refuse`] where the refusal is answered anyway: a log that
    /// cannot take the record is reported, and the refusal stands.
    pub(crate) async fn record_refusal(&self, refusal: &RefusalRequest) {
        if let Err(err) = self.refuse(refusal).await {
            tracing::error!(error = %err, reason = refusal.reason.as_str(), "refusal not recorded");
        }
    }

    /// Screens a message a run sends an MCP server other than a
    /// `tools/call` (which is decided in full): refused, and recorded as a
    /// `flow_rule` denial of `SERVER.METHOD`, when a flow deny rule, with
    /// the labels the run carries, would deny a call of one of the server's
    /// tools carrying the message's text. Without a live bundle, or a flow
    /// rule about the server, nothing is read and nothing refused here.
    pub(crate) async fn screen_message(
        &self,
        message: &MessageScreen,
    ) -> Result<Screened, GateError> {
        let passes = Screened {
            refused: false,
            decision_id: None,
            matched_rule: None,
        };
        let Some(enforced) = self.policy.live(Timestamp::now()) else {
            return Ok(passes);
        };
        let policy = &enforced.policy;
        if !policy.server_under_flows(&message.server) {
            return Ok(passes);
        }
        let state = self
            .flows
            .flow_state(policy, &message.run_id, true)
            .await?
            .map_or(toolgate_policy::LabelSet::EMPTY, |s| s.labels);
        let mut texts = Vec::new();
        strings(&Value::Object(message.params.clone()), &mut texts);
        let Some(rule) = policy.server_flow_denial(&message.server, state, &texts) else {
            return Ok(passes);
        };
        let tool = format!("{}.{}", message.server, message.method);
        let decision_id = self
            .append_denial(Denial {
                tool: &tool,
                arguments: &message.params,
                run_id: &message.run_id,
                step_id: None,
                reason: Reason::FlowRule,
                rule,
                definition_digest: None,
            })
            .await?;
        Ok(Screened {
            refused: true,
            decision_id: Some(decision_id),
            matched_rule: Some(rule.to_owned()),
        })
    }

    /// Appends `denial` to the decision log, durably, and counts it.
    async fn append_denial(&self, denial: Denial<'_>) -> Result<String, GateError> {
        let enforced = self.policy.current();
        let risk = enforced
            .as_deref()
            .and_then(|e| e.policy.effect(denial.tool))
            .map_or(Risk::High, |effect| effect.risk);
        let decision_id = uuid::Uuid::now_v7().to_string();
        let record = DecisionRecord {
            decision_id: decision_id.clone(),
            run_id: denial.run_id.as_str().to_owned(),
            step_id: denial
                .step_id
                .map_or_else(|| NO_STEP.to_owned(), Id::to_string),
            tool: denial.tool.to_owned(),
            verdict: Decision::Deny.as_str().to_owned(),
            reason: denial.reason.as_str().to_owned(),
            message: None,
            matched_rule: Some(truncate(denial.rule, MAX_LABEL_CHARS * 4).to_owned()),
            policy_version: enforced
                .as_deref()
                .map_or_else(|| NO_POLICY.to_owned(), |e| e.policy_version.clone()),
            risk: risk.as_str().to_owned(),
            args_digest: toolgate_policy::args_digest(denial.arguments),
            call_digest: Some(toolgate_policy::call_digest(
                denial.tool,
                None,
                denial.arguments,
            )),
            definition_digest: denial.definition_digest.map(Id::to_string),
            created_at: Timestamp::now(),
        };
        record
            .validate()
            .map_err(|e| GateError::InvalidRequest(e.to_string()))?;
        let (tool_label, profile_label) = decision_labels(enforced.as_deref(), denial.tool);
        self.shared
            .metrics
            .decisions
            .with_label_values(&[
                Decision::Deny.as_str(),
                denial.reason.as_str(),
                tool_label,
                profile_label,
                "true",
            ])
            .inc();
        self.shared
            .store
            .decisions()
            .append(&self.shared.tenant, &self.shared.stream, record)
            .await?;
        Ok(decision_id)
    }
}

/// Every string in `value` (keys aside), in document order.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(members) => members.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{MessageScreen, RefusalRequest};

    #[test]
    fn the_contract_shape_reads_the_policy_types() {
        let read = |v: serde_json::Value| serde_json::from_value::<RefusalRequest>(v);
        let body = json!({
            "tool": "fs.read", "run_id": "Run-1", "step_id": "",
            "reason": "tool_not_listed", "check": "mcp:tool_not_listed",
        });
        let refusal = read(body.clone()).unwrap();
        assert_eq!(refusal.run_id.as_str(), "run-1");
        assert_eq!(refusal.step_id, None);
        let mut step = body.clone();
        step["step_id"] = json!("s1");
        assert_eq!(read(step).unwrap().step_id.unwrap().as_str(), "s1");
        for (field, bad) in [
            ("step_id", json!(" ")),
            ("run_id", json!("a b")),
            ("reason", json!("because")),
            ("surprise", json!(1)),
        ] {
            let mut wrong = body.clone();
            wrong[field] = bad;
            assert!(read(wrong).is_err(), "{field}");
        }
        assert!(
            serde_json::from_value::<MessageScreen>(json!({
                "run_id": "r", "server": "s", "method": "tools/list", "params": {"a": 1},
            }))
            .is_ok()
        );
    }
}
