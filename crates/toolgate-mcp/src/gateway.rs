//! The gateway's decisions, independent of the transport: what to do with
//! a `tools/call` (refuse it here, or forward it with an intent to close),
//! how to filter a `tools/list` result, how to close an intent from the
//! server's answer. `stdio` (the wrapper) and the sidecar's streamable-HTTP
//! endpoint both drive this.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::McpError;
use crate::message;

/// One `tools/call` as the decider is asked about it, under its policy
/// tool name (`<server>__<tool>`).
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// Policy tool name.
    pub tool: &'a str,
    /// The call's arguments, as the client sent them.
    pub arguments: &'a Map<String, Value>,
    /// Run the call belongs to, in its canonical spelling.
    pub run_id: &'a toolgate_policy::RunId,
    /// Step id; one per server, so a call retried after its approval is
    /// the same invocation.
    pub step_id: &'a str,
    /// Digest of the tool definition the server announced, when it did.
    pub definition_digest: Option<&'a str>,
}

/// The `intent_id` of an answer to `POST /v1/intents`.
pub fn intent_id(answer: &Value) -> Result<String, McpError> {
    answer["intent_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| McpError::Sidecar("intent answer without intent_id".into()))
}

/// Who decides: the sidecar over HTTP ([`crate::sidecar::Sidecar`]) or,
/// inside the sidecar, its own decision path.
pub trait Decider: Send + Sync + 'static {
    /// The verdict JSON of `/v1/authorize` (with `decision_id`).
    fn authorize(&self, call: ToolCall<'_>)
    -> impl Future<Output = Result<Value, McpError>> + Send;

    /// Which of `tools` may be offered, given the announced digests.
    fn visible(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> impl Future<Output = Result<Vec<String>, McpError>> + Send;

    /// Records the intent of an allowed high-risk call and marks it
    /// effect-sent; returns its id.
    fn begin_intent(
        &self,
        verdict: &Value,
        call: ToolCall<'_>,
    ) -> impl Future<Output = Result<String, McpError>> + Send;

    /// Closes an intent `completed` or `error`.
    fn complete_intent(
        &self,
        id: &str,
        failed: bool,
        detail: Option<&str>,
    ) -> impl Future<Output = Result<(), McpError>> + Send;

    /// Waits up to `wait` for an approval; returns its status.
    fn wait_for_approval(
        &self,
        id: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<String, McpError>> + Send;
}

/// What to do with one `tools/call`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// Send it to the server; close `intent` (if any) from its answer.
    Forward {
        /// The intent recorded for this high-risk call.
        intent: Option<String>,
    },
    /// Answer the client with this message; the server never sees the call.
    Respond(Value),
}

/// One announced tool: its pinnable digest and its argument validator.
#[derive(Clone)]
struct Definition {
    digest: String,
    /// `Err` when the `inputSchema` is missing or unusable: calls are refused.
    validator: Result<Arc<jsonschema::Validator>, String>,
}

impl Definition {
    fn of(tool: &Value) -> Self {
        let validator = match tool.get("inputSchema") {
            Some(schema) => jsonschema::validator_for(schema)
                .map(Arc::new)
                .map_err(|e| format!("its inputSchema cannot be used: {e}")),
            None => Err("it announced no inputSchema".to_owned()),
        };
        Self {
            digest: message::definition_digest(tool),
            validator,
        }
    }

    /// `Err` with the first problem when `arguments` do not fit the schema.
    fn check(&self, arguments: &Map<String, Value>) -> Result<(), String> {
        let validator = self.validator.as_ref().map_err(Clone::clone)?;
        validator
            .validate(&Value::Object(arguments.clone()))
            .map_err(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
    }
}

/// The gateway of one MCP server (`server`).
pub struct Gateway<D> {
    server: String,
    approval_wait: Duration,
    decider: D,
    /// What the last `tools/list` announced, by MCP tool name.
    definitions: Mutex<HashMap<String, Definition>>,
}

impl<D: Decider> Gateway<D> {
    /// A gateway for server `server`, asking `decider`; a call that needs
    /// an approval waits up to `approval_wait` for it.
    pub fn new(server: impl Into<String>, approval_wait: Duration, decider: D) -> Self {
        Self {
            server: server.into(),
            approval_wait,
            decider,
            definitions: Mutex::new(HashMap::new()),
        }
    }

    /// The server's name (the policy prefix).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The decider.
    pub fn decider(&self) -> &D {
        &self.decider
    }

    fn definition(&self, name: &str) -> Option<Definition> {
        self.definitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Decides one `tools/call` (`id`, MCP tool `name`, `arguments`) of run
    /// `run_id`. `modern`: the client speaks protocol 2026-07-28.
    pub async fn decide_call(
        &self,
        id: &Value,
        name: &str,
        arguments: &Map<String, Value>,
        run_id: &toolgate_policy::RunId,
        modern: bool,
    ) -> CallOutcome {
        let refuse = |text: String, verdict: Option<&Value>| {
            CallOutcome::Respond(message::refusal(id, &text, verdict, modern))
        };
        let unavailable = |e: McpError| {
            refuse(
                format!("toolgate: {} ({e}); the call was not made", e.code()),
                None,
            )
        };
        let tool = message::policy_tool(&self.server, name);
        // Arguments must fit the schema the server announced, before the
        // policy is asked (and the call is never forwarded when they do not).
        let definition = self.definition(name);
        if let Some(def) = &definition
            && let Err(problem) = def.check(arguments)
        {
            return refuse(
                format!("toolgate: invalid_arguments: {problem}; the call was not made"),
                None,
            );
        }
        let digest = definition.as_ref().map(|d| d.digest.as_str());
        // One step per server: a call retried after its approval is the
        // same invocation, so the approval lets it through (once).
        let step = format!("mcp:{}", self.server);
        let call = ToolCall {
            tool: &tool,
            arguments,
            run_id,
            step_id: &step,
            definition_digest: digest,
        };
        let ask = || self.decider.authorize(call);
        let mut verdict = match ask().await {
            Ok(v) => v,
            Err(e) => return unavailable(e),
        };
        let field = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
        if field(&verdict, "verdict") == "escalate" && !self.approval_wait.is_zero() {
            let approval = field(&verdict, "approval_id");
            match self
                .decider
                .wait_for_approval(&approval, self.approval_wait)
                .await
            {
                Ok(status) if status != "pending" => match ask().await {
                    Ok(v) => verdict = v,
                    Err(e) => return unavailable(e),
                },
                Ok(_) => {}
                Err(e) => return unavailable(e),
            }
        }
        let reason = field(&verdict, "reason");
        let decision = field(&verdict, "decision_id");
        match field(&verdict, "verdict").as_str() {
            "allow" => {}
            "deny" if reason == "unknown_tool" => {
                return CallOutcome::Respond(message::error(
                    id,
                    message::INVALID_PARAMS,
                    &format!("Unknown tool: {name}"),
                ));
            }
            "escalate" => {
                let approval = field(&verdict, "approval_id");
                return refuse(
                    format!(
                        "toolgate: approval_required: approval {approval} must be approved by a \
                         human; retry the same call afterwards (decision {decision})"
                    ),
                    Some(&verdict),
                );
            }
            _ => {
                return refuse(
                    format!("toolgate: {reason} (decision {decision})"),
                    Some(&verdict),
                );
            }
        }
        if verdict["intent_required"].as_bool() != Some(true) {
            return CallOutcome::Forward { intent: None };
        }
        match self.decider.begin_intent(&verdict, call).await {
            Ok(intent) => CallOutcome::Forward {
                intent: Some(intent),
            },
            Err(e) => refuse(
                format!(
                    "toolgate: the intent of this high-risk call could not be recorded \
                     ({}: {e}); the call was not made (decision {decision})",
                    e.code()
                ),
                Some(&verdict),
            ),
        }
    }

    /// Filters a `tools/list` response in place to what the profile could
    /// allow or escalate with the announced definitions, and remembers those
    /// definitions for later calls. Lists nothing when the decider cannot be
    /// asked.
    pub async fn filter_list(&self, response: &mut Value) {
        let announced: Vec<(String, Definition)> = message::listed_definitions(response)
            .iter()
            .filter_map(|t| Some((t.get("name")?.as_str()?.to_owned(), Definition::of(t))))
            .collect();
        let names: Vec<String> = announced
            .iter()
            .map(|(n, _)| message::policy_tool(&self.server, n))
            .collect();
        let digests: HashMap<String, String> = announced
            .iter()
            .map(|(n, d)| (message::policy_tool(&self.server, n), d.digest.clone()))
            .collect();
        self.definitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(announced);
        let visible: HashSet<String> = match self.decider.visible(&names, &digests).await {
            Ok(v) => v.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot ask which tools to list; listing none");
                HashSet::new()
            }
        };
        message::filter_tools(response, &self.server, &visible);
    }

    /// Closes `intent` from the server's answer to its call: `error` for a
    /// JSON-RPC error or `isError`, else `completed`. A failure to close is
    /// logged; the intent then shows as `uncertain` on resume.
    pub async fn finish_call(&self, intent: &str, response: &Value) {
        let failed = message::is_failure(response);
        let detail = failed.then(|| {
            response
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("the tool reported isError")
                .chars()
                .take(1024)
                .collect::<String>()
        });
        if let Err(e) = self
            .decider
            .complete_intent(intent, failed, detail.as_deref())
            .await
        {
            tracing::error!(%intent, error = %e, "could not complete the intent");
        }
    }
}

#[cfg(test)]
mod schema_fuzz {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::Definition;

    fn schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({"type": "string"})),
            Just(json!({"type": "integer", "minimum": 0})),
            Just(json!({"pattern": "^(a+)+$"})),
            Just(json!({"$ref": "#/definitions/missing"})),
            Just(json!({"$ref": "https://example.com/remote.json"})),
            Just(json!({"format": "email"})),
            Just(json!({"type": "nonsense"})),
            Just(json!(true)),
            Just(json!(7)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::btree_map("[a-z]{1,6}", inner.clone(), 0..4).prop_map(|props| {
                    json!({"type": "object", "properties": props, "required": ["a"]})
                }),
                prop::collection::vec(inner.clone(), 0..3).prop_map(|all| json!({"allOf": all})),
                inner.prop_map(|items| json!({"type": "array", "items": items})),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("TOOLGATE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128)
        ))]

        /// A hostile server's schema compiles or is refused, and arguments
        /// are checked against it, without a panic or a remote fetch.
        #[test]
        fn any_announced_schema_is_usable_or_refused(s in schema(), arg in ".{0,20}", n in any::<i64>()) {
            let tool = json!({"name": "t", "inputSchema": s});
            let definition = Definition::of(&tool);
            let args = json!({"a": arg, "b": n, "c": [arg]});
            let result = definition.check(args.as_object().unwrap());
            if definition.validator.is_err() {
                prop_assert!(result.is_err());
            }
        }
    }
}
