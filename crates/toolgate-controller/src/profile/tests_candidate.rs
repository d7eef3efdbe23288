//! `spec.candidate`: planning, the fleet's counts and the
//! `CandidateDisagrees` condition, pure.

use std::sync::Arc;

use jiff::SignedDuration;
use kube::api::ObjectMeta;
use toolgate_policy::{CandidateRef, Decision};
use toolgate_store::{Heartbeat, ShadowTally};

use super::candidate::{Resolved, compile, shadowing};
use super::tests::{conditions, policy_error, published, spec, t};
use super::*;
use crate::crd::{CandidateStatus, CandidateTransition, ConditionType, FleetStatus, PolicyProfile};

#[test]
fn a_changed_candidate_is_signed_again_and_the_same_one_is_kept() {
    let day = SignedDuration::from_hours(24);
    let now = t("2030-01-01T01:00:00Z");
    let mut p = published("p@a", 4, "2030-01-01T00:00:00Z");
    p.candidate = Some("c@1".into());
    assert!(matches!(
        plan_bundle(Some(&p), Some(4), "p@a", Some("c@1"), now, day),
        BundlePlan::Keep(_)
    ));
    for (case, candidate) in [("another candidate", Some("c@2")), ("dropped", None)] {
        assert!(
            matches!(
                plan_bundle(Some(&p), Some(4), "p@a", candidate, now, day),
                BundlePlan::Publish {
                    sequence: 5,
                    reason: PublishReason::Changed,
                    ..
                }
            ),
            "{case}"
        );
    }
}

#[test]
fn a_candidate_compiles_with_the_grants_and_without_its_own_candidate() {
    let mut own = spec();
    own.candidate = Some(CandidateRef {
        profile: "third".into(),
    });
    let Resolved::Signed(c) = compile("next", own.clone(), &[]) else {
        panic!("should compile");
    };
    assert!(c.spec.candidate.is_none() && c.version.starts_with("next@"));
    // The candidate reference is not part of what is enforced.
    let bare = compile("next", spec(), &[]);
    assert_eq!(bare.signed().unwrap().version, c.version);

    let mut broken = spec();
    broken.effects.clear();
    let Resolved::Unsigned(Shadowing::Unsigned {
        reason, message, ..
    }) = compile("next", broken, &[])
    else {
        panic!("should not compile");
    };
    assert_eq!(reason, "CandidateInvalid");
    assert!(message.contains("profile_"), "{message}");
}

fn beat(pod: &str, version: &str, tally: Option<ShadowTally>) -> Heartbeat {
    Heartbeat {
        pod_name: pod.into(),
        pod_namespace: "agents".into(),
        profile: "p".into(),
        policy_version: version.into(),
        sequence: 1,
        last_seen: t("2030-01-01T00:00:00Z"),
        shadow: tally,
    }
}

fn tally(version: &str, calls: &[(Decision, Decision)]) -> ShadowTally {
    let mut t = ShadowTally::new(version);
    for (a, c) in calls {
        t.record(*a, *c);
    }
    t
}

#[test]
fn the_fleet_counts_only_pods_on_this_version_and_candidate() {
    use Decision::{Allow, Deny, Escalate};
    let beats = [
        beat(
            "a",
            "p@1",
            Some(tally("c@1", &[(Allow, Deny), (Allow, Allow)])),
        ),
        beat(
            "b",
            "p@1",
            Some(tally("c@1", &[(Allow, Deny), (Escalate, Allow)])),
        ),
        // Another candidate version, another active version, no tally.
        beat("c", "p@1", Some(tally("c@0", &[(Deny, Allow)]))),
        beat("d", "p@0", Some(tally("c@1", &[(Deny, Allow)]))),
        beat("e", "p@1", None),
    ];
    let status = crate::fleet::candidate_status(&beats, "p@1", "next", "c@1");
    let transition = |from: &str, to: &str, count| CandidateTransition {
        from: from.into(),
        to: to.into(),
        count,
    };
    assert_eq!(
        status,
        CandidateStatus {
            profile: "next".into(),
            version: Some("c@1".into()),
            shadowed: 4,
            disagreements: 3,
            transitions: vec![
                transition("allow", "deny", 2),
                transition("escalate", "allow", 1)
            ],
        }
    );
}

fn ready_with(shadowing: Option<Shadowing>) -> crate::crd::PolicyProfileStatus {
    let bundle = published("p@a", 1, "2030-01-01T00:00:00Z");
    ready_status(
        &Default::default(),
        "p",
        &Published {
            bundle: &bundle,
            grants: 0,
            fleet: FleetStatus::default(),
            stale_pods: vec![],
            shadowing,
        },
        Some(1),
        t("2030-01-01T00:00:00Z"),
    )
}

#[test]
fn candidate_disagrees_condition_table() {
    let signed = |disagreements, transitions| {
        Shadowing::Signed(CandidateStatus {
            profile: "next".into(),
            version: Some("next@1".into()),
            shadowed: 10,
            disagreements,
            transitions,
        })
    };
    let allow_deny = vec![CandidateTransition {
        from: "allow".into(),
        to: "deny".into(),
        count: 3,
    }];
    let cases = [
        (
            signed(3, allow_deny),
            "True",
            "Disagrees",
            "3 of 10 shadowed call(s) otherwise: allow→deny 3",
        ),
        (signed(0, vec![]), "False", "Agrees", "agreed on all 10"),
        (
            Shadowing::Unsigned {
                profile: "next".into(),
                reason: "CandidateNotFound",
                message: "no PolicyProfile agents/next".into(),
            },
            "Unknown",
            "CandidateNotFound",
            "candidate next is not shadowed: no PolicyProfile agents/next",
        ),
    ];
    for (shadowing, status, reason, text) in cases {
        let s = ready_with(Some(shadowing));
        let c = s.condition(ConditionType::CandidateDisagrees).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), (status, reason));
        assert!(c.message.contains(text), "{}", c.message);
        assert_eq!(s.candidate.as_ref().unwrap().profile, "next");
        // An invalid spec later keeps what was last known of the candidate.
        let invalid = invalid_status(
            &s,
            &policy_error(),
            &Serving::Nothing {
                reason: "NoValidBundle",
                message: "x".into(),
            },
            Some(2),
            t("2030-01-01T00:01:00Z"),
        );
        assert_eq!(
            invalid.condition(ConditionType::CandidateDisagrees),
            Some(c)
        );
        assert_eq!(invalid.candidate, s.candidate);
    }
    let none = ready_with(None);
    assert!(none.candidate.is_none());
    assert_eq!(
        conditions(&none).iter().map(|c| c.0).collect::<Vec<_>>(),
        ["Valid", "Ready", "Stale"]
    );
}

fn named(ns: &str, name: &str, candidate: Option<&str>) -> Arc<PolicyProfile> {
    let mut s = spec();
    s.candidate = candidate.map(|c| CandidateRef { profile: c.into() });
    let mut p = PolicyProfile::new(name, s.into());
    p.metadata = ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    };
    Arc::new(p)
}

#[test]
fn a_changed_candidate_wakes_the_profiles_of_its_namespace_that_shadow_it() {
    let all = [
        named("agents", "prod", Some("next")),
        named("agents", "other", Some("else")),
        named("team-b", "prod", Some("next")),
        named("agents", "plain", None),
    ];
    let woken = shadowing(all.iter().cloned(), &named("agents", "next", None));
    let names: Vec<String> = woken
        .iter()
        .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap(), r.name))
        .collect();
    assert_eq!(names, ["agents/prod"]);
}
