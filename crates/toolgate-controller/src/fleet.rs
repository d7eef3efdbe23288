//! Folding sidecar heartbeats into a profile's fleet status.

use jiff::{SignedDuration, Timestamp};
use toolgate_store::Heartbeat;

use crate::crd::FleetStatus;

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
