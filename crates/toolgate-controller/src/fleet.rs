//! Folding sidecar heartbeats into a profile's fleet status.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use toolgate_store::{Heartbeat, MAX_TALLY_COUNT};

use crate::crd::{CandidateStatus, CandidateTransition, FleetStatus};

/// How recently a pod must have reported to count as current.
pub const FLEET_WINDOW: SignedDuration = SignedDuration::from_secs(60);

/// The heartbeats of profile `profile` in namespace `namespace`.
///
/// A sidecar mounts the bundle ConfigMap of its profile, and a ConfigMap
/// volume can only come from the pod's own namespace, so a pod enforces
/// `namespace/profile` exactly when it runs in `namespace` and reports
/// `profile`. Two profiles with the same name in different namespaces are
/// different profiles; their pods must not be counted together.
pub fn of_profile(heartbeats: Vec<Heartbeat>, namespace: &str, profile: &str) -> Vec<Heartbeat> {
    heartbeats
        .into_iter()
        .filter(|hb| hb.pod_namespace == namespace && hb.profile == profile)
        .collect()
}

/// Counts the pods of one profile (already selected with [`of_profile`]): `current` runs `version` and was seen
/// within `window` of `now`; every other pod is `stale`. With no current
/// version (nothing published yet) every pod is stale.
pub fn count(
    heartbeats: &[Heartbeat],
    version: Option<&str>,
    now: Timestamp,
    window: SignedDuration,
) -> FleetStatus {
    let mut fleet = FleetStatus::default();
    for hb in heartbeats {
        fleet.total += 1;
        let fresh = now.duration_since(hb.last_seen) <= window;
        if fresh && Some(hb.policy_version.as_str()) == version {
            fleet.current += 1;
        } else {
            fleet.stale += 1;
        }
    }
    fleet
}

/// Names (`namespace/pod`) of the stale pods, sorted, for the `Stale` condition message.
pub fn stale_pods(
    heartbeats: &[Heartbeat],
    version: Option<&str>,
    now: Timestamp,
    window: SignedDuration,
) -> Vec<String> {
    let mut pods: Vec<String> = heartbeats
        .iter()
        .filter(|hb| {
            now.duration_since(hb.last_seen) > window || Some(hb.policy_version.as_str()) != version
        })
        .map(|hb| format!("{}/{}", hb.pod_namespace, hb.pod_name))
        .collect();
    pods.sort();
    pods
}

/// What candidate `candidate` (its profile name and version) decided,
/// summed over the latest heartbeat of every pod of the profile that
/// enforces `version` beside that same candidate version (a gone pod's last
/// report still counts; a pod's counts start when it loads the bundle).
/// The top five disagreements, most frequent first.
pub fn candidate_status(
    heartbeats: &[Heartbeat],
    version: &str,
    candidate: &str,
    candidate_version: &str,
) -> CandidateStatus {
    let mut status = CandidateStatus {
        profile: candidate.to_owned(),
        version: Some(candidate_version.to_owned()),
        ..CandidateStatus::default()
    };
    let mut transitions: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let tallies = heartbeats
        .iter()
        .filter(|hb| hb.policy_version == version)
        .filter_map(|hb| hb.shadow.as_ref())
        .filter(|t| t.candidate_version == candidate_version);
    for tally in tallies {
        status.shadowed = status
            .shadowed
            .saturating_add(tally.shadowed)
            .min(MAX_TALLY_COUNT);
        for t in &tally.changed {
            let n = transitions
                .entry((t.active.as_str(), t.candidate.as_str()))
                .or_default();
            *n = n.saturating_add(t.count).min(MAX_TALLY_COUNT);
            status.disagreements = status
                .disagreements
                .saturating_add(t.count)
                .min(MAX_TALLY_COUNT);
        }
    }
    let mut top: Vec<_> = transitions.into_iter().collect();
    // Most frequent first; ties in a fixed order, so the status is stable.
    top.sort_by(|(a, n), (b, m)| m.cmp(n).then(a.cmp(b)));
    status.transitions = top
        .into_iter()
        .take(5)
        .map(|((from, to), count)| CandidateTransition {
            from: from.to_owned(),
            to: to.to_owned(),
            count,
        })
        .collect();
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(pod: &str, version: &str, seen: Timestamp) -> Heartbeat {
        hb_in("agents", pod, version, seen)
    }

    fn hb_in(ns: &str, pod: &str, version: &str, seen: Timestamp) -> Heartbeat {
        Heartbeat {
            pod_name: pod.into(),
            pod_namespace: ns.into(),
            profile: "p".into(),
            policy_version: version.into(),
            sequence: 1,
            last_seen: seen,
            shadow: None,
        }
    }

    #[test]
    fn counts_current_and_stale() {
        let now: Timestamp = "2030-01-01T00:10:00Z".parse().unwrap();
        let beats = [
            hb("a", "p@v2", now - SignedDuration::from_secs(5)),
            hb("b", "p@v1", now - SignedDuration::from_secs(5)),
            hb("c", "p@v2", now - SignedDuration::from_secs(61)),
            hb("d", "p@v2", now - SignedDuration::from_secs(60)),
        ];
        let fleet = count(&beats, Some("p@v2"), now, FLEET_WINDOW);
        assert_eq!(
            fleet,
            FleetStatus {
                current: 2,
                stale: 2,
                total: 4
            }
        );
        assert_eq!(
            stale_pods(&beats, Some("p@v2"), now, FLEET_WINDOW),
            ["agents/b", "agents/c"]
        );
        assert_eq!(count(&beats, None, now, FLEET_WINDOW).stale, 4);
        assert_eq!(
            count(&[], Some("p@v2"), now, FLEET_WINDOW),
            FleetStatus::default()
        );
    }

    #[test]
    fn only_pods_in_the_profile_namespace_count() {
        let now: Timestamp = "2030-01-01T00:10:00Z".parse().unwrap();
        let seen = now - SignedDuration::from_secs(5);
        let mut other_profile = hb("e", "q@v1", seen);
        other_profile.profile = "q".into();
        let beats = vec![
            hb_in("agents", "a", "p@v2", seen),
            hb_in("team-b", "b", "p@v9", seen),
            hb_in("team-b", "c", "p@v9", seen),
            other_profile,
        ];
        let mine = of_profile(beats.clone(), "agents", "p");
        assert_eq!(
            mine.iter().map(|h| h.pod_name.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(
            count(&mine, Some("p@v2"), now, FLEET_WINDOW),
            FleetStatus {
                current: 1,
                stale: 0,
                total: 1
            }
        );
        let theirs = of_profile(beats, "team-b", "p");
        assert_eq!(count(&theirs, Some("p@v9"), now, FLEET_WINDOW).current, 2);
    }
}
