//! `spec.candidate`: planning, the fleet's counts and the
//! `CandidateDisagrees` condition, pure.

use std::sync::Arc;

use jiff::SignedDuration;
use kube::api::ObjectMeta;
use toolgate_policy::{CandidateRef, Decision};
use toolgate_store::{Heartbeat, ShadowTally};

use super::candidate::{self, Resolved, compile, shadowing};
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
            counted_at: None,
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
            warnings: vec![],
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
            counted_at: None,
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
        // An invalid spec later keeps what was last known of the candidate
        // while the last good bundle (and so its candidate) is served.
        let bundle = published("p@a", 1, "2030-01-01T00:00:00Z");
        let later = t("2030-01-01T00:01:00Z");
        let serving = Serving::LastGood {
            bundle: &bundle,
            grants: 0,
        };
        let invalid = invalid_status(&s, &policy_error(), &serving, Some(2), later);
        assert_eq!(
            invalid.condition(ConditionType::CandidateDisagrees),
            Some(c)
        );
        assert_eq!(invalid.candidate, s.candidate);
        let nothing = Serving::Nothing {
            reason: "NoValidBundle",
            message: "x".into(),
        };
        let invalid = invalid_status(&s, &policy_error(), &nothing, Some(2), later);
        assert!(
            invalid
                .condition(ConditionType::CandidateDisagrees)
                .is_none()
        );
        assert!(invalid.candidate.is_none());
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

#[tokio::test]
async fn analysis_warnings_are_the_admission_words_and_a_shadowed_escalate_is_one() {
    let compiled = |spec: toolgate_policy::PolicySpec| {
        toolgate_policy::CompiledPolicy::compile("p", &spec, &[]).unwrap()
    };
    let mut dup = spec();
    dup.rules.get_mut("bash").unwrap().allow.push("ls *".into());
    let warnings = super::analysis::warnings(compiled(dup)).await;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("spec.rules.bash.allow[1]") && w.ends_with("[duplicate_glob]")),
        "{warnings:?}"
    );
    // `git *` escalates, but an allow of `git status` under it is fine; an
    // escalate of `ls x*` under the allow of `ls *` never asks anyone.
    let mut shadowed = spec();
    shadowed
        .rules
        .get_mut("bash")
        .unwrap()
        .escalate
        .insert(0, "ls x*".into());
    let warnings = super::analysis::warnings(compiled(shadowed)).await;
    assert!(
        warnings.iter().any(|w| w.starts_with("shadowed_escalate")),
        "{warnings:?}"
    );
    assert!(super::analysis::warnings(compiled(spec())).await.is_empty());
}

#[test]
fn counts_are_read_again_once_per_refresh_unless_the_candidate_starts_or_stops_disagreeing() {
    let every = SignedDuration::from_secs(60);
    let t0 = t("2030-01-01T00:00:00Z");
    let counts = |shadowed, disagreements| CandidateStatus {
        profile: "next".into(),
        version: Some("next@1".into()),
        shadowed,
        disagreements,
        ..CandidateStatus::default()
    };
    let first = candidate::throttled(None, counts(5, 0), t0, every);
    assert_eq!(first.counted_at.as_deref(), Some("2030-01-01T00:00:00Z"));
    // More calls, still agreeing, within the refresh: the old counts stay.
    let soon = t0 + SignedDuration::from_secs(10);
    assert_eq!(
        candidate::throttled(Some(&first), counts(9, 0), soon, every),
        first
    );
    // It starts disagreeing: written at once.
    let flip = candidate::throttled(Some(&first), counts(9, 1), soon, every);
    assert_eq!((flip.shadowed, flip.disagreements), (9, 1));
    // Past the refresh, or another candidate version: the new counts.
    let late = t0 + every;
    assert_eq!(
        candidate::throttled(Some(&first), counts(12, 0), late, every).shadowed,
        12
    );
    let mut other = counts(1, 0);
    other.version = Some("next@2".into());
    assert_eq!(
        candidate::throttled(Some(&first), other, soon, every).shadowed,
        1
    );
}
