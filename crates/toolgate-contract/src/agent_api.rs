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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordedRefusal {
    /// Its id in the decision log.
    pub decision_id: String,
}

/// A message (not a `tools/call`) a run sends an MCP server: what `POST
/// /v1/messages/screen` carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
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
