//! The sidecar's running count of what its bundle's candidate decided,
//! sent with each heartbeat so the controller can show a profile's
//! disagreements (`CandidateDisagrees`) without reading the decision log.

use std::sync::{Arc, Mutex};

use toolgate_store::{ShadowOutcome, ShadowTally};

/// One tally, of the (active, candidate) versions last counted: a bundle
/// with another active policy or another candidate starts it again, so a
/// fixed active policy is not blamed for its predecessor's disagreements.
#[derive(Debug, Clone, Default)]
pub struct ShadowTallies(Arc<Mutex<Option<(String, ShadowTally)>>>);

impl ShadowTallies {
    /// Counts one decision the active policy `active_version` made beside
    /// the candidate.
    pub(crate) fn record(&self, active_version: &str, shadow: &ShadowOutcome) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (_, tally) = match held.as_mut() {
            Some((active, t))
                if active == active_version && t.candidate_version == shadow.candidate_version =>
            {
                (active, t)
            }
            _ => {
                let (active, t) = held.insert((
                    active_version.to_owned(),
                    ShadowTally::new(&shadow.candidate_version),
                ));
                (&mut *active, t)
            }
        };
        tally.record(shadow.active, shadow.verdict);
    }

    /// The tally of `candidate_version` beside `active_version` (empty
    /// before their first call).
    pub fn snapshot(&self, active_version: &str, candidate_version: &str) -> ShadowTally {
        let held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_ref() {
            Some((active, t))
                if active == active_version && t.candidate_version == candidate_version =>
            {
                t.clone()
            }
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
    fn a_new_active_or_candidate_version_starts_again() {
        let tallies = ShadowTallies::default();
        tallies.record("p@1", &outcome("c@1", Decision::Allow, Decision::Deny));
        tallies.record("p@1", &outcome("c@1", Decision::Allow, Decision::Allow));
        let one = tallies.snapshot("p@1", "c@1");
        assert_eq!((one.shadowed, one.disagreements()), (2, 1));
        assert_eq!(tallies.snapshot("p@1", "c@2").shadowed, 0);
        tallies.record("p@1", &outcome("c@2", Decision::Deny, Decision::Allow));
        let two = tallies.snapshot("p@1", "c@2");
        assert_eq!((two.shadowed, two.disagreements()), (1, 1));
        assert_eq!(tallies.snapshot("p@1", "c@1").shadowed, 0);
        // A new active policy beside the same candidate starts again too.
        assert_eq!(tallies.snapshot("p@2", "c@2").shadowed, 0);
        tallies.record("p@2", &outcome("c@2", Decision::Allow, Decision::Allow));
        let fixed = tallies.snapshot("p@2", "c@2");
        assert_eq!((fixed.shadowed, fixed.disagreements()), (1, 0));
    }
}
