//! Running a call held under a task (see [`crate::tasks`]): waiting for its
//! approval, deciding it again, and reading the server's answer into the
//! task. The transport sends what [`Gateway::run_deferred`] returns.
//!
//! Everything a retried call would go through is checked again when the
//! approval comes, not remembered from when the task was made: the tool's
//! definition (the server may have re-announced it meanwhile), its
//! arguments against that definition, the transport's own conditions (the
//! upstream's egress, a client still there) and the policy's decision,
//! which consumes the approval once.

use std::time::Duration;

use serde_json::{Value, json};

use toolgate_policy::Reason;

use crate::definition::EdgeProblem;
use crate::edges::EdgeRefusal;
use crate::gateway::{Decider, Gateway, Refusal};
use crate::in_flight::Awaiting;
use crate::message;
use crate::tasks::{self, DeferredCall};

/// How long one wait on the approval lasts before the task is looked at
/// again (cancelled, expired).
const WAIT: Duration = Duration::from_secs(30);

impl<D: Decider> Gateway<D> {
    /// Shuts the gateway's tasks: those not yet ended fail, and every held
    /// call stops waiting (so nothing outlives the process's shutdown).
    pub fn close_tasks(&self) {
        self.tasks.close();
    }

    /// Tells `observer` of every task event of this gateway (for metrics).
    pub fn observe_tasks(&self, observer: tasks::TaskObserver) {
        self.tasks.observe(observer);
    }

    /// Resolves once [`Gateway::close_tasks`] was called: a transport's
    /// deferred send stops then.
    pub async fn closing(&self) {
        self.tasks.closing().await;
    }

    /// Waits for the approval of a deferred call, then decides it again (the
    /// approval lets it through once, bound to the call) and returns the
    /// message to send the server, under the gateway's id. `sendable` is the
    /// transport's own check, made before the approval is consumed (`Err`
    /// with why not). `None` when the call is not to be made: denied,
    /// expired, cancelled, changed, closing; its task says which.
    pub async fn run_deferred(
        &self,
        call: DeferredCall,
        sendable: impl Fn() -> Result<(), String>,
    ) -> Option<Value> {
        loop {
            if !self.tasks.is_waiting(&call.task) {
                return None;
            }
            let status = tokio::select! {
                status = self.decider().wait_for_approval(&call.approval, WAIT) => status,
                () = self.tasks.closing() => return None,
            };
            match status {
                Ok(status) if status.is_pending() => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(server = %self.server(), approval = %call.approval, error = %e, "cannot read a deferred call's approval; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(2)) => {}
                        () = self.tasks.closing() => return None,
                    }
                }
            }
        }
        if !self.tasks.begin_deciding(&call.task) {
            return None;
        }
        let fail = |code: i64, text: String| {
            self.tasks
                .fail(&call.task, message::error_object(code, &text));
            None
        };
        if let Err(why) = sendable() {
            return fail(
                message::INTERNAL_ERROR,
                format!("toolgate: {why}; the call was not made"),
            );
        }
        if let Err((reason, problem)) = self.still_as_listed(&call) {
            let mut refused = EdgeRefusal::new(&call.tool, &call.run_id, reason);
            refused = refused.arguments(&call.arguments);
            if let Some(digest) = &call.definition_digest {
                refused = refused.definition(digest);
            }
            self.record_refusal(refused).await;
            return fail(
                message::POLICY_REFUSED,
                format!("toolgate: {problem}; the call was not made"),
            );
        }
        let decided = self
            .decide(
                &call.tool,
                &call.arguments,
                &call.run_id,
                call.definition_digest.as_deref(),
                Duration::ZERO,
            )
            .await;
        let intent = match decided {
            Ok(intent) => intent,
            Err(refusal) => {
                self.tasks
                    .fail(&call.task, refusal_error(refusal, &call.tool));
                return None;
            }
        };
        let not_sent = async |why: &str| {
            if let Some(intent) = &intent
                && let Err(e) = self
                    .decider()
                    .complete_intent(intent, true, Some(why))
                    .await
            {
                tracing::error!(%intent, error = %e, "could not complete the intent");
            }
        };
        if !self.tasks.mark_sent(&call.task) {
            // Closed or expired between the decision and now: not sent.
            not_sent("not sent: its task ended first").await;
            return None;
        }
        // At most once: the forward is committed where the task is kept
        // before the call leaves.
        if let Err(why) = self.claim_kept(&call.task).await {
            self.tasks.fail(
                &call.task,
                message::error_object(
                    message::INTERNAL_ERROR,
                    &format!("toolgate: {why}; the call was not made"),
                ),
            );
            not_sent("not sent: its task could not be claimed").await;
            return None;
        }
        let mut message = call.message;
        tasks::strip_declaration(&mut message);
        let awaiting = Awaiting::Task {
            task: call.task,
            intent,
        };
        self.in_flight
            .forward(&mut message, awaiting, &call.run_id, None);
        Some(message)
    }

    /// `Err` with the refusal when the tool is no longer what the call was
    /// decided against: unlisted, re-announced with another definition, or
    /// its arguments no longer fit.
    fn still_as_listed(&self, call: &DeferredCall) -> Result<(), EdgeProblem> {
        let definition = self.definition(&call.name).ok_or_else(|| {
            let text = format!(
                "tool_not_listed: `{}` is no longer in the server's tools/list",
                call.name
            );
            (Reason::ToolNotListed, text)
        })?;
        if call.definition_digest.as_deref() != Some(definition.digest.as_str()) {
            return Err((
                Reason::ToolDefinitionChanged,
                format!(
                    "tool_definition_changed: the server announced `{}` anew while the call \
                     waited for its approval",
                    call.name
                ),
            ));
        }
        definition.check(&call.arguments)
    }

    /// Closes the intent of a deferred call from the server's answer
    /// (`error` unless the task completes), then ends its task: a client
    /// that sees the task ended finds the call's record closed too.
    pub(crate) async fn settle_task(&self, task: &str, intent: Option<&str>, answer: &Value) {
        if let Some(intent) = intent {
            let closing = match tasks::failure_of(answer) {
                Some(error) => json!({ "error": error }),
                None => answer.clone(),
            };
            self.finish_call(intent, &closing).await;
        }
        self.tasks.settle(task, answer);
    }
}

/// The JSON-RPC error a task fails with when the call is refused on its
/// second decision: what a client without tasks would have been answered.
fn refusal_error(refusal: Refusal, tool: &str) -> Value {
    match refusal {
        Refusal::UnknownTool => {
            message::error_object(message::INVALID_PARAMS, &format!("Unknown tool: {tool}"))
        }
        Refusal::Policy { text, verdict } | Refusal::Escalated { text, verdict, .. } => {
            message::policy_error_object(&text, verdict.as_ref())
        }
    }
}
