//! The sidecar's running count of what its bundle's candidate decided,
//! sent with each heartbeat so the controller can show a profile's
//! disagreements (`CandidateDisagrees`) without reading the decision log.

use std::sync::{Arc, Mutex};

use toolgate_store::{ShadowOutcome, ShadowTally};

/// One tally, of the candidate version last counted: a bundle with another
/// candidate starts it again.
#[derive(Debug, Clone, Default)]
pub struct ShadowTallies(Arc<Mutex<Option<ShadowTally>>>);

impl ShadowTallies {
    /// Counts one shadowed decision.
    pub(crate) fn record(&self, shadow: &ShadowOutcome) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let tally = match held.as_mut() {
            Some(t) if t.candidate_version == shadow.candidate_version => t,
            _ => held.insert(ShadowTally::new(&shadow.candidate_version)),
        };
        tally.record(shadow.active, shadow.verdict);
    }

    /// The tally of `candidate_version` (empty before its first call).
    pub fn snapshot(&self, candidate_version: &str) -> ShadowTally {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_ref() {
            Some(t) if t.candidate_version == candidate_version => t.clone(),
            _ => ShadowTally::new(candidate_version),
        }
    }
}

#[cfg(test)]
mod tests {
    use toolgate_policy::{Decision, Reason};

    use super::*;

    fn outcome(version: &str, active: Decision, verdict: Decision) -> ShadowOutcome {
        ShadowOutcome {
            candidate_version: version.into(),
            active,
            verdict,
            reason: Reason::DenyRule,
            rule: None,
        }
    }

    #[test]
    fn a_new_candidate_version_starts_again() {
        let tallies = ShadowTallies::default();
        tallies.record(&outcome("c@1", Decision::Allow, Decision::Deny));
        tallies.record(&outcome("c@1", Decision::Allow, Decision::Allow));
        let one = tallies.snapshot("c@1");
        assert_eq!((one.shadowed, one.disagreements()), (2, 1));
        assert_eq!(tallies.snapshot("c@2").shadowed, 0);
        tallies.record(&outcome("c@2", Decision::Deny, Decision::Allow));
        let two = tallies.snapshot("c@2");
        assert_eq!((two.shadowed, two.disagreements()), (1, 1));
        assert_eq!(tallies.snapshot("c@1").shadowed, 0);
    }
}
