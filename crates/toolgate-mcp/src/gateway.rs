//! The gateway's decisions, independent of the transport: what to do with
//! a `tools/call` (refuse it here, or forward it with an intent to close),
//! how to filter a `tools/list` result, how to close an intent from the
//! server's answer. `stdio` (the wrapper) and the sidecar's streamable-HTTP
//! endpoint both drive this.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use toolgate_client::Outcome;
use toolgate_policy::Reason;

use serde_json::{Map, Value};

use crate::McpError;
use crate::definition::Definition;
use crate::in_flight::InFlight;
use crate::kept::Keeper;
use crate::message;
use crate::tasks::TaskBook;

/// Who decides, and what it is asked, re-exported where callers have
/// always found them.
pub use crate::decider::{
    AuthorizeResponse, Decider, MessageScreen, RefusalRequest, Screened, ToolCall,
};

/// A refusal of the gateway's own, on its way to the decision log.
pub struct EdgeRefusal<'a> {
    tool: &'a str,
    run_id: &'a toolgate_policy::RunId,
    reason: Reason,
    arguments: Option<&'a Map<String, Value>>,
    definition: Option<&'a str>,
}

impl<'a> EdgeRefusal<'a> {
    /// A refusal of `tool` (a policy tool name) for `run_id`, with `reason`.
    pub fn new(tool: &'a str, run_id: &'a toolgate_policy::RunId, reason: Reason) -> Self {
        Self {
            tool,
            run_id,
            reason,
            arguments: None,
            definition: None,
        }
    }

    /// The refused call's arguments.
    pub fn arguments(mut self, arguments: &'a Map<String, Value>) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// The definition the refused tool was announced with.
    pub fn definition(mut self, digest: &'a str) -> Self {
        self.definition = Some(digest);
        self
    }
}

/// Largest arguments (as JSON) a refusal carries to the decision log.
const MAX_RECORDED_ARGUMENTS: usize = 64 * 1024;

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
    /// Escalated, for a client that takes a task: hold the call until
    /// `approval` is decided. `refusal` answers it if no task can be held.
    Defer {
        /// The approval the call waits on.
        approval: String,
        /// The digest of the definition the call was decided against.
        definition_digest: String,
        /// The answer of a client without tasks.
        refusal: Value,
    },
}

/// Why a governed request was not let through.
pub(crate) enum Refusal {
    /// The profile does not declare the tool.
    UnknownTool,
    /// Escalated: waits on `approval`; `text` and `verdict` as for
    /// [`Refusal::Policy`].
    Escalated {
        approval: String,
        text: String,
        verdict: Option<Value>,
    },
    /// Denied, escalated, or not decidable: the text the client reads and
    /// the verdict, when there is one.
    Policy {
        text: String,
        verdict: Option<Value>,
    },
}

/// The gateway of one MCP server (`server`).
pub struct Gateway<D> {
    server: String,
    approval_wait: Duration,
    decider: D,
    /// What the last `tools/list` announced, by MCP tool name.
    definitions: Mutex<HashMap<String, Definition>>,
    /// Requests forwarded under the gateway's own ids, awaiting answers.
    pub(crate) in_flight: InFlight,
    /// Names announced in the current listing (its pages so far).
    listing: Mutex<HashSet<String>>,
    /// The server answered `server/discover` (protocol 2026-07-28).
    pub(crate) modern_server: std::sync::atomic::AtomicBool,
    /// Escalated calls held for clients of the tasks extension.
    pub(crate) tasks: TaskBook,
    /// Where those tasks are kept across restarts, once set.
    pub(crate) kept: OnceLock<Keeper>,
    /// Pagination cursors the server returned (see [`crate::protocol`]).
    pub(crate) cursors: crate::protocol::CursorBook,
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
            in_flight: InFlight::default(),
            listing: Mutex::new(HashSet::new()),
            modern_server: std::sync::atomic::AtomicBool::new(false),
            tasks: TaskBook::default(),
            kept: OnceLock::new(),
            cursors: crate::protocol::CursorBook::default(),
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

    /// Records a refusal of the gateway's own in the decision log, as the
    /// check `mcp:REASON`; the refusal stands whether or not it could be.
    pub async fn record_refusal(&self, refused: EdgeRefusal<'_>) {
        let id = |text: &str| toolgate_policy::Id::parse(text.to_owned()).ok();
        // A name that is no id (too long, control characters) is still a
        // refusal to record: under a name that says so.
        let tool = id(refused.tool).or_else(|| id(&format!("{}.unnamed", self.server())));
        let (Some(tool), Some(check)) = (tool, id(&format!("mcp:{}", refused.reason.as_str())))
        else {
            return;
        };
        // Arguments too large for the sidecar's request limit are left out,
        // so the refusal itself is still recorded.
        let arguments = refused.arguments.filter(|a| {
            serde_json::to_vec(a).is_ok_and(|bytes| bytes.len() <= MAX_RECORDED_ARGUMENTS)
        });
        let request = RefusalRequest {
            tool,
            arguments: arguments.cloned(),
            run_id: refused.run_id.clone(),
            step_id: id(&format!("mcp:{}", self.server())),
            reason: refused.reason,
            check,
            definition_digest: refused.definition.and_then(id),
        };
        if let Err(e) = self.decider().refused(&request).await {
            tracing::error!(error = %e, reason = refused.reason.as_str(), "refusal not recorded");
        }
    }

    pub(crate) fn definition(&self, name: &str) -> Option<Definition> {
        self.definitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Decides one `tools/call` (`id`, MCP tool `name`, `arguments`) of run
    /// `run_id`. `modern`: the client speaks protocol 2026-07-28;
    /// `deferrable`: it declared the tasks extension, so an escalation is
    /// [`CallOutcome::Defer`] rather than a refusal.
    pub async fn decide_call(
        &self,
        id: &Value,
        name: &str,
        arguments: &Map<String, Value>,
        run_id: &toolgate_policy::RunId,
        modern: bool,
        deferrable: bool,
    ) -> CallOutcome {
        let refuse = |text: String, verdict: Option<&Value>| {
            CallOutcome::Respond(message::refusal(id, &text, verdict, modern))
        };
        // A tool is called as the server last announced it: its arguments
        // must fit that schema before the policy is asked, and a tool never
        // announced (or announced twice) has no schema to fit.
        let tool = message::policy_tool(&self.server, name);
        let definition = match self.definition(name) {
            Some(def) => def,
            None => {
                let refused = EdgeRefusal::new(&tool, run_id, Reason::ToolNotListed);
                self.record_refusal(refused.arguments(arguments)).await;
                return refuse(
                    format!(
                        "toolgate: tool_not_listed: `{name}` was not in a tools/list answer of \
                         this server that the gateway read; list the tools first. The call was \
                         not made"
                    ),
                    None,
                );
            }
        };
        if let Err((reason, problem)) = definition.check(arguments) {
            let refused = EdgeRefusal::new(&tool, run_id, reason).arguments(arguments);
            self.record_refusal(refused.definition(&definition.digest))
                .await;
            return refuse(format!("toolgate: {problem}; the call was not made"), None);
        }
        match self
            .decide(
                &tool,
                arguments,
                run_id,
                Some(&definition.digest),
                // A client that takes a task is not held here.
                if deferrable {
                    Duration::ZERO
                } else {
                    self.approval_wait
                },
            )
            .await
        {
            Ok(intent) => {
                // A call that waited for its approval runs only against the
                // definition it was decided (and approved) under.
                let current = self.definition(name).map(|d| d.digest);
                if current.as_deref() == Some(definition.digest.as_str()) {
                    return CallOutcome::Forward { intent };
                }
                let refused = EdgeRefusal::new(&tool, run_id, Reason::ToolDefinitionChanged);
                self.record_refusal(refused.arguments(arguments).definition(&definition.digest))
                    .await;
                if let Some(intent) = &intent
                    && let Err(e) = self
                        .decider
                        .complete_intent(
                            intent,
                            true,
                            Some("not sent: the tool was announced anew"),
                        )
                        .await
                {
                    tracing::error!(%intent, error = %e, "could not complete the intent");
                }
                refuse(
                    format!(
                        "toolgate: tool_definition_changed: the server announced `{name}` anew \
                         while the call waited; the call was not made"
                    ),
                    None,
                )
            }
            Err(Refusal::UnknownTool) => CallOutcome::Respond(message::error(
                id,
                message::INVALID_PARAMS,
                &format!("Unknown tool: {name}"),
            )),
            Err(Refusal::Escalated {
                approval,
                text,
                verdict,
            }) if deferrable => CallOutcome::Defer {
                approval,
                definition_digest: definition.digest,
                refusal: message::refusal(id, &text, verdict.as_ref(), modern),
            },
            Err(Refusal::Policy { text, verdict } | Refusal::Escalated { text, verdict, .. }) => {
                refuse(text, verdict.as_ref())
            }
        }
    }

    /// Decides a request that is not a `tools/call` (`resources/read` from
    /// the client, `sampling/createMessage` from the server, …) as the tool
    /// `SERVER.METHOD`: `None` to let it through, else the JSON-RPC error
    /// that answers it. Undeclared means refused; an escalation is refused
    /// with its approval id (nothing waits on a human here).
    pub async fn decide_request(
        &self,
        id: &Value,
        method: &str,
        arguments: &Map<String, Value>,
        run_id: &toolgate_policy::RunId,
    ) -> Option<Value> {
        let tool = message::policy_tool(&self.server, method);
        match self
            .decide(&tool, arguments, run_id, None, Duration::ZERO)
            .await
        {
            Ok(_) => None,
            Err(Refusal::UnknownTool) => Some(message::policy_error(
                id,
                &format!(
                    "toolgate: unknown_tool: the profile does not declare `{tool}`; the request \
                     was not passed on"
                ),
                None,
            )),
            Err(Refusal::Policy { text, verdict } | Refusal::Escalated { text, verdict, .. }) => {
                Some(message::policy_error(id, &text, verdict.as_ref()))
            }
        }
    }

    /// The decision path shared by calls and other governed requests: ask,
    /// wait up to `wait` for an approval and ask again, record the intent
    /// of an allowed high-risk call. `Ok` carries that intent.
    pub(crate) async fn decide(
        &self,
        tool: &str,
        arguments: &Map<String, Value>,
        run_id: &toolgate_policy::RunId,
        definition_digest: Option<&str>,
        wait: Duration,
    ) -> Result<Option<String>, Refusal> {
        let unavailable = |e: McpError| Refusal::Policy {
            text: format!("toolgate: {} ({e}); the call was not made", e.code()),
            verdict: None,
        };
        // One step per server: a call retried after its approval is the
        // same invocation, so the approval lets it through (once).
        let step = format!("mcp:{}", self.server);
        let call = ToolCall {
            tool,
            arguments,
            run_id,
            step_id: &step,
            definition_digest,
        };
        let outcome = toolgate_client::wait_then_ask_again(
            || self.decider.authorize(call),
            |approval, wait| async move { self.decider.wait_for_approval(&approval, wait).await },
            wait,
        )
        .await
        .map_err(unavailable)?;
        let shown = |answer: &AuthorizeResponse| serde_json::to_value(answer).ok();
        let answer = match outcome {
            Outcome::Allowed(answer) => answer,
            Outcome::Denied(answer) if answer.verdict.reason == Reason::UnknownTool => {
                return Err(Refusal::UnknownTool);
            }
            Outcome::Denied(answer) => {
                return Err(Refusal::Policy {
                    text: format!(
                        "toolgate: {} (decision {})",
                        answer.verdict.reason.as_str(),
                        answer.decision_id
                    ),
                    verdict: shown(&answer),
                });
            }
            Outcome::Escalated { answer, .. } => {
                let approval = answer.approval_id.clone().unwrap_or_default();
                return Err(Refusal::Escalated {
                    text: format!(
                        "toolgate: approval_required: approval {approval} must be approved by a \
                         human; retry the same call afterwards (decision {})",
                        answer.decision_id
                    ),
                    verdict: shown(&answer),
                    approval,
                });
            }
        };
        let decision = answer.decision_id.as_str();
        if !answer.verdict.intent_required {
            return Ok(None);
        }
        match self.decider.begin_intent(&answer, call).await {
            Ok(intent) => Ok(Some(intent)),
            Err(e) => Err(Refusal::Policy {
                text: format!(
                    "toolgate: the intent of this high-risk call could not be recorded \
                     ({}: {e}); the call was not made (decision {decision})",
                    e.code()
                ),
                verdict: shown(&answer),
            }),
        }
    }

    /// Filters a `tools/list` response in place to what the profile could
    /// allow or escalate with the announced definitions, and remembers those
    /// definitions for later calls. A name announced twice in one listing
    /// (one answer, or the pages since the last `first_page`) is withheld
    /// and its calls refused, and so is a name with a `/` (it would take the
    /// permission of the MCP method of that name). Lists nothing when the
    /// decider cannot be asked.
    pub async fn filter_list(&self, response: &mut Value, first_page: bool) {
        let mut announced: HashMap<String, Definition> = HashMap::new();
        let mut withheld: HashMap<String, &'static str> = HashMap::new();
        {
            let mut listing = self.listing.lock().unwrap_or_else(|p| p.into_inner());
            if first_page {
                listing.clear();
            }
            for tool in message::listed_definitions(response) {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if name.contains('/') {
                    withheld.insert(name.to_owned(), "its name contains `/`, as MCP methods' do");
                } else if !listing.insert(name.to_owned()) {
                    withheld.insert(
                        name.to_owned(),
                        "the server announced it more than once in one listing",
                    );
                }
                announced.insert(name.to_owned(), Definition::of(tool));
            }
        }
        for (name, why) in &withheld {
            tracing::warn!(server = %self.server, tool = %name, %why, "a listed tool is withheld");
            announced.insert(name.clone(), Definition::withheld(why));
        }
        let offered = |n: &String| !withheld.contains_key(n);
        let names: Vec<String> = announced
            .keys()
            .filter(|n| offered(n))
            .map(|n| message::policy_tool(&self.server, n))
            .collect();
        let digests: HashMap<String, String> = announced
            .iter()
            .filter(|(n, _)| offered(n))
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
        // What one principal may see is no listing to share.
        if let Some(scope) = response.pointer_mut("/result/cacheScope") {
            *scope = Value::String("private".into());
        }
    }

    /// Forgets every announced definition: after a list the gateway could
    /// not read, no call is made against what an older list said.
    pub fn forget_definitions(&self) {
        self.definitions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
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
