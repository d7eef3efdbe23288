//! Allowed decisions remembered until their intent is recorded: an intent
//! must name a decision that allowed exactly its call.

use std::collections::HashMap;

use toolgate_policy::Risk;

/// Allowed decisions remembered for intent checks.
const MAX_REMEMBERED: usize = 100_000;

/// What an allowed decision permits; an intent must match it exactly.
#[derive(Debug, Clone)]
pub(crate) struct AllowedCall {
    pub(super) run_id: String,
    pub(super) tool: String,
    pub(super) canonical_tool: String,
    pub(super) args_digest: String,
    pub(super) call_digest: String,
    pub(super) risk: Risk,
    pub(super) used: bool,
}

/// Bounded map of recent allowed decisions, oldest evicted first.
#[derive(Debug, Default)]
pub(crate) struct AllowedDecisions {
    pub(super) map: HashMap<String, AllowedCall>,
    order: std::collections::VecDeque<String>,
}

impl AllowedDecisions {
    pub(super) fn insert(&mut self, id: String, call: AllowedCall) {
        if self.order.len() >= MAX_REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.map.remove(&old);
        }
        self.order.push_back(id.clone());
        self.map.insert(id, call);
    }
}
