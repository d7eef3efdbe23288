//! What a sidecar's shadowed candidate decided, counted in the sidecar and
//! reported with its heartbeat: the controller sums a profile's pods into
//! the profile's status without reading the decision log.

use serde::{Deserialize, Serialize};
use toolgate_policy::Decision;

/// Largest stored tally (the column's CHECK): a handful of transitions.
pub const MAX_TALLY_BYTES: usize = 8192;

/// Largest count a tally holds or a sum of tallies reaches: the largest
/// integer every JSON reader (the API server's status included) keeps
/// exactly. A tenant writes its pods' tallies; nothing it writes may make
/// its profile's status unwritable.
pub const MAX_COUNT: u64 = (1 << 53) - 1;

/// Calls one candidate version decided beside the active policy, since the
/// sidecar loaded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowTally {
    /// The candidate's policy version.
    pub candidate_version: String,
    /// Calls it decided.
    pub shadowed: u64,
    /// The calls it decided otherwise, by transition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<ShadowTransition>,
}

/// Calls the active policy decided `active` and the candidate `candidate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowTransition {
    /// The active policy's verdict.
    pub active: Decision,
    /// The candidate's.
    pub candidate: Decision,
    /// Calls.
    pub count: u64,
}

impl ShadowTally {
    /// An empty tally for `candidate_version`.
    pub fn new(candidate_version: &str) -> Self {
        Self {
            candidate_version: candidate_version.to_owned(),
            shadowed: 0,
            changed: Vec::new(),
        }
    }

    /// Counts one call the active policy decided `active` and the
    /// candidate `candidate`.
    pub fn record(&mut self, active: Decision, candidate: Decision) {
        self.shadowed = self.shadowed.saturating_add(1).min(MAX_COUNT);
        if active == candidate {
            return;
        }
        match self
            .changed
            .iter_mut()
            .find(|t| t.active == active && t.candidate == candidate)
        {
            Some(t) => t.count = t.count.saturating_add(1).min(MAX_COUNT),
            None => self.changed.push(ShadowTransition {
                active,
                candidate,
                count: 1,
            }),
        }
    }

    /// Calls decided otherwise.
    pub fn disagreements(&self) -> u64 {
        self.changed
            .iter()
            .fold(0u64, |n, t| n.saturating_add(t.count))
            .min(MAX_COUNT)
    }

    /// The stored text.
    pub(crate) fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored text, when it reads back as a tally (a tenant writes these
    /// rows: anything else counts as no report, not as a failure).
    pub(crate) fn from_text(text: &str) -> Option<Self> {
        if text.len() > MAX_TALLY_BYTES {
            return None;
        }
        let tally: Self = serde_json::from_str(text).ok()?;
        let in_range =
            tally.shadowed <= MAX_COUNT && tally.changed.iter().all(|t| t.count <= MAX_COUNT);
        in_range.then_some(tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agreements_and_each_transition() {
        let mut t = ShadowTally::new("c@1");
        t.record(Decision::Allow, Decision::Allow);
        t.record(Decision::Allow, Decision::Deny);
        t.record(Decision::Allow, Decision::Deny);
        t.record(Decision::Escalate, Decision::Allow);
        assert_eq!((t.shadowed, t.disagreements()), (4, 3));
        assert_eq!(
            t.changed,
            vec![
                ShadowTransition {
                    active: Decision::Allow,
                    candidate: Decision::Deny,
                    count: 2
                },
                ShadowTransition {
                    active: Decision::Escalate,
                    candidate: Decision::Allow,
                    count: 1
                },
            ]
        );
        assert_eq!(ShadowTally::from_text(&t.to_text()), Some(t));
        assert_eq!(ShadowTally::from_text("{\"candidate_version\":1}"), None);
        assert_eq!(
            ShadowTally::from_text(&"x".repeat(MAX_TALLY_BYTES + 1)),
            None
        );
        let huge = format!(
            "{{\"candidate_version\":\"c@1\",\"shadowed\":{}}}",
            MAX_COUNT + 1
        );
        assert_eq!(ShadowTally::from_text(&huge), None);
    }
}
