//! Decisions: the held policy, the decision log, and the one path every
//! call takes through them ([`Decisions::authorize`]): evaluated, checked
//! against its run ([`RunBook`]) and flow labels ([`Flows`]), recorded,
//! and remembered for its intent ([`Intents`]). Refusals made at an edge
//! and batches are decided and recorded here too.

mod authorize;
pub(crate) mod batch;
mod escalation;
mod inputs;
mod message;
mod refusals;
mod shadow;

pub use refusals::{MessageScreen, RefusalRequest};

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;

use crate::flows::Flows;
use crate::intents::Intents;
use crate::runs::RunBook;
use crate::shared::Shared;
use crate::{DecisionLog, Enforced, PolicyState};

/// The decision path: the policy it evaluates, the log it records to, and
/// the components it asks about a call's run, labels and intent.
pub(crate) struct Decisions {
    shared: Arc<Shared>,
    /// The enforced policy.
    policy: Arc<PolicyState>,
    /// Background writer for low-risk decisions.
    log: DecisionLog,
    /// The flow labels of this sidecar's runs and pod.
    flows: Flows,
    /// Stopped runs and run budgets.
    runs: Arc<RunBook>,
    /// Allowed decisions awaiting their intent.
    intents: Arc<Intents>,
}

impl Decisions {
    pub(crate) fn new(
        shared: Arc<Shared>,
        policy: Arc<PolicyState>,
        log: DecisionLog,
        runs: Arc<RunBook>,
        intents: Arc<Intents>,
    ) -> Self {
        Self {
            flows: Flows::new(shared.clone()),
            shared,
            policy,
            log,
            runs,
            intents,
        }
    }

    /// The bundle state decisions are made on.
    pub(crate) fn policy(&self) -> &Arc<PolicyState> {
        &self.policy
    }

    /// The bundle held (live or expired).
    pub(crate) fn current(&self) -> Option<Arc<Enforced>> {
        self.policy.current()
    }

    /// Which of the named tools the held profile declares and could allow
    /// or escalate, in the order asked, with their pinned definition where
    /// one is pinned; nothing without a live bundle (fail closed).
    pub(crate) fn visible_tools(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Vec<String> {
        match self.policy.live(Timestamp::now()) {
            Some(e) => tools
                .iter()
                .filter(|t| e.policy.may_permit(t))
                .filter(|t| {
                    e.policy.pinned_definition(t).is_none_or(|pinned| {
                        definitions.get(*t).map(String::as_str) == Some(pinned)
                    })
                })
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the live policy denies `tool` on `arguments` whatever the
    /// run (a pure evaluation: nothing is recorded).
    pub(crate) fn denies_anywhere(
        &self,
        tool: &str,
        arguments: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        let now = Timestamp::now();
        self.policy.live(now).is_some_and(|e| {
            let call = toolgate_policy::Call {
                tool,
                action: None,
                arguments,
            };
            let context = toolgate_policy::Context::at(now);
            e.policy.evaluate(&call, &context).verdict == toolgate_policy::Decision::Deny
        })
    }
}
