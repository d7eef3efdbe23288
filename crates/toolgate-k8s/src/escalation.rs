//! Why a call was escalated, carried by the Approval that asks about it
//! (`spec.request.escalation`, immutable with the rest of `spec.request`):
//! the escalating decision's reason and matched rule as the decision log
//! recorded them, for a flow rule the labels it required and the calls that
//! set them, and the run's last decisions before it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most flow labels an escalation lists (a profile declares at most 64).
pub const MAX_ESCALATION_LABELS: usize = 64;
/// Most earlier decisions of the run an escalation lists.
pub const MAX_ESCALATION_HISTORY: usize = 10;

/// Why the call was escalated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Escalation {
    /// Id of the escalating decision in the decision log.
    #[schemars(length(max = 256))]
    pub decision_id: String,
    /// Its closed reason code: `escalate_rule` (an escalate-tier rule
    /// matched) or `flow_escalate` (a flow rule asked, because of labels
    /// the run carries).
    #[schemars(length(max = 64))]
    pub reason: String,
    /// The rule that matched (`flow:NAME when a+b` for a flow rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub matched_rule: Option<String>,
    /// For a flow escalation: each label the rule requires, with the call
    /// that set it on the run (or pod).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub flow_labels: Vec<FlowLabelCause>,
    /// The run's last decisions before this one, oldest first, tool and
    /// rule masked as previews are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub history: Vec<PastDecision>,
}

/// A flow label the escalating rule required, and what set it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlowLabelCause {
    /// The label's name.
    #[schemars(length(max = 63))]
    pub label: String,
    /// The decision whose allowed call set it.
    #[schemars(length(max = 256))]
    pub decision_id: String,
    /// That call's tool, when the decision log has its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub tool: Option<String>,
    /// When it was set (RFC 3339).
    #[schemars(length(max = 64))]
    pub set_at: String,
}

/// One earlier decision of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PastDecision {
    /// When it was decided (RFC 3339).
    #[schemars(length(max = 64))]
    pub at: String,
    /// Tool of the call (masked).
    #[schemars(length(max = 512))]
    pub tool: String,
    /// `allow`, `deny` or `escalate`.
    #[schemars(length(max = 32))]
    pub verdict: String,
    /// Closed reason code.
    #[schemars(length(max = 64))]
    pub reason: String,
    /// The rule that matched (masked), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub matched_rule: Option<String>,
}

impl Escalation {
    /// One line for tables and chat: the reason code and, when there is
    /// one, the rule (`flow_escalate (flow:x when a+b)`).
    pub fn summary(&self) -> String {
        match &self.matched_rule {
            Some(rule) => format!("{} ({rule})", self.reason),
            None => self.reason.clone(),
        }
    }
}
