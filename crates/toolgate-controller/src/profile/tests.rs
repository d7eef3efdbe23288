//! Table tests of the pure planning and status functions.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use serde_json::json;
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey, TrustSet};
use toolgate_policy::{Grant, PolicyError, PolicySpec};

use super::*;
use crate::crd::{
    Approval, ApprovalSpec, ConditionType, Decision, FleetStatus, PolicyProfileStatus,
    StandingGrant,
};

pub(super) fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

pub(super) fn published(version: &str, seq: u64, issued: &str) -> PublishedBundle {
    let issued = t(issued);
    PublishedBundle {
        version: version.into(),
        candidate: None,
        digest: "sha256:00".into(),
        sequence: seq,
        issued_at: issued,
        expires_at: issued + SignedDuration::from_hours(24),
    }
}

#[test]
fn plan_signs_only_on_change_or_near_expiry() {
    let day = SignedDuration::from_hours(24);
    let now = t("2030-01-01T01:00:00Z");
    assert!(matches!(
        plan_bundle(None, None, "p@a", None, now, day),
        BundlePlan::Publish {
            sequence: 1,
            reason: PublishReason::Initial,
            ..
        }
    ));
    let p = published("p@a", 4, "2030-01-01T00:00:00Z");
    let kept = plan_bundle(Some(&p), Some(4), "p@a", None, now, day);
    assert_eq!(kept, BundlePlan::Keep(p.clone()));
    let BundlePlan::Keep(kept) = kept else {
        unreachable!()
    };
    assert_eq!(kept.resign_at(), t("2030-01-01T16:00:00Z"));
    assert!(matches!(
        plan_bundle(Some(&p), Some(7), "p@b", None, now, day),
        BundlePlan::Publish {
            sequence: 8,
            reason: PublishReason::Changed,
            ..
        }
    ));
    let late = t("2030-01-01T16:00:00Z");
    assert_eq!(
        plan_bundle(Some(&p), Some(4), "p@a", None, late, day),
        BundlePlan::Publish {
            sequence: 5,
            issued_at: late,
            expires_at: late + day,
            reason: PublishReason::Refresh,
        }
    );
}

#[test]
fn conditions_keep_transition_time() {
    let now = t("2030-01-01T00:00:00Z");
    let later = t("2030-01-02T00:00:00Z");
    let ready = ConditionType::Ready;
    let c1 = condition(&[], ready, true, "Published", "a".into(), Some(1), now);
    let c2 = condition(
        std::slice::from_ref(&c1),
        ready,
        true,
        "Published",
        "b".into(),
        Some(2),
        later,
    );
    assert_eq!(c2.last_transition_time, now.to_string());
    let c3 = condition(
        &[c2],
        ready,
        false,
        "NoValidBundle",
        "c".into(),
        Some(3),
        later,
    );
    assert_eq!(c3.last_transition_time, later.to_string());
}

fn grant_approval(
    profile: &str,
    tool: &str,
    expires: &str,
    decision: Option<Decision>,
    by: Option<&str>,
) -> Approval {
    Approval::new(
        "g",
        ApprovalSpec {
            request: None,
            grant: Some(StandingGrant {
                profile: profile.into(),
                tool: tool.into(),
                glob: "git *".into(),
                subjects: vec!["*".into()],
                expires_at: expires.into(),
            }),
            decision,
            reason: None,
            decided_by: by.map(Into::into),
            decided_by_groups: None,
        },
    )
}

/// One row: case, approvals, approvers, expected tools, expected next expiry.
type GrantCase<'a> = (
    &'a str,
    Vec<Approval>,
    &'a [String],
    Vec<&'a str>,
    Option<&'a str>,
);

#[test]
fn active_grants_table() {
    let now = t("2030-01-01T00:00:00Z");
    let soon = "2030-01-01T01:00:00Z";
    let later = "2030-01-02T00:00:00Z";
    let past = "2029-12-31T00:00:00Z";
    let yes = Some(Decision::Approved);
    let approvers = vec!["alice".to_owned()];
    let mut deleted = grant_approval("p", "bash", soon, yes, Some("alice"));
    deleted.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    // (case, approvals, approvers, expected tools, expected next expiry)
    let cases: Vec<GrantCase<'_>> = vec![
        ("none", vec![], &[], vec![], None),
        (
            "approved, anyone may approve",
            vec![grant_approval("p", "bash", soon, yes, None)],
            &[],
            vec!["bash"],
            Some(soon),
        ),
        (
            "other profile",
            vec![grant_approval("q", "bash", soon, yes, None)],
            &[],
            vec![],
            None,
        ),
        (
            "undecided and denied",
            vec![
                grant_approval("p", "bash", soon, None, None),
                grant_approval("p", "bash", soon, Some(Decision::Denied), Some("alice")),
            ],
            &[],
            vec![],
            None,
        ),
        (
            "expired or unparsable expiry",
            vec![
                grant_approval("p", "bash", past, yes, None),
                grant_approval("p", "bash", "tomorrow", yes, None),
            ],
            &[],
            vec![],
            None,
        ),
        (
            "decider not among the approvers",
            vec![grant_approval("p", "bash", soon, yes, Some("mallory"))],
            &approvers,
            vec![],
            None,
        ),
        (
            "decider among the approvers, being deleted",
            vec![deleted],
            &approvers,
            vec![],
            None,
        ),
        (
            "sorted, deduplicated, earliest expiry",
            vec![
                grant_approval("p", "zsh", later, yes, Some("alice")),
                grant_approval("p", "bash", soon, yes, Some("alice")),
                grant_approval("p", "bash", soon, yes, Some("alice")),
            ],
            &approvers,
            vec!["bash", "zsh"],
            Some(soon),
        ),
    ];
    for (case, approvals, approvers, tools, expiry) in cases {
        let (grants, next) = active_grants(&approvals, "p", approvers, now);
        let got: Vec<&str> = grants.iter().map(|g| g.tool.as_str()).collect();
        assert_eq!(got, tools, "{case}");
        assert_eq!(next, expiry.map(t), "{case}");
    }
}

pub(super) fn spec() -> PolicySpec {
    toolgate_policy::load::from_value(
        json!({
            "mode": "rules",
            "rules": {"bash": {"allow": ["ls *"], "escalate": ["git *"]}},
            "effects": {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"}}
        }),
        "spec",
    )
    .unwrap()
}

fn grant(tool: &str, glob: &str) -> Grant {
    Grant {
        tool: tool.into(),
        glob: glob.into(),
        subjects: vec!["*".into()],
        expires_at: "2030-01-02T00:00:00Z".into(),
    }
}

#[test]
fn usable_grants_table() {
    let good = grant("bash", "git status");
    let unknown_tool = grant("nope", "x");
    // (case, grants, kept, rejected)
    let cases = [
        ("none", vec![], vec![], vec![]),
        (
            "all compile",
            vec![good.clone()],
            vec![good.clone()],
            vec![],
        ),
        (
            "a bad grant is set aside, the rest kept",
            vec![good.clone(), unknown_tool.clone()],
            vec![good.clone()],
            vec![unknown_tool.clone()],
        ),
        (
            "only bad grants",
            vec![unknown_tool.clone()],
            vec![],
            vec![unknown_tool.clone()],
        ),
    ];
    for (case, grants, kept, rejected) in cases {
        let (k, r) = usable_grants("p", &spec(), grants);
        assert_eq!(k, kept, "{case}");
        let r: Vec<Grant> = r.into_iter().map(|(g, _)| g).collect();
        assert_eq!(r, rejected, "{case}");
    }
}

fn signed(key: &SigningKey, namespace: &str, name: &str, sequence: u64) -> (String, String) {
    let issued_at = t("2030-01-01T00:00:00Z");
    let (doc, bytes) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: name.into(),
                namespace: Some(namespace.into()),
            },
            spec: spec(),
            grants: vec![],
            sequence,
            issued_at,
            expires_at: issued_at + SignedDuration::from_hours(1),
        },
        key,
    )
    .unwrap();
    (String::from_utf8(bytes).unwrap(), doc.digest())
}

fn configmap(envelope: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta::default(),
        data: Some(BTreeMap::from([(
            BUNDLE_KEY.to_owned(),
            envelope.to_owned(),
        )])),
        ..Default::default()
    }
}

/// One row: case, ConfigMap, status, expected sequence or rejection kind.
type LastGoodCase = (
    &'static str,
    Option<ConfigMap>,
    PolicyProfileStatus,
    Result<u64, &'static str>,
);

#[test]
fn last_good_table() {
    let key = SigningKey::from_seed(&[1; 32]);
    let attacker = SigningKey::from_seed(&[2; 32]);
    let trust = TrustSet::from_keys([key.public_key()]).unwrap();
    let (good, good_digest) = signed(&key, "ns", "p", 3);
    let (forged, _) = signed(&attacker, "ns", "p", 3);
    let (other, other_digest) = signed(&key, "ns", "q", 3);
    let (older, _) = signed(&key, "ns", "p", 2);
    let recorded = |sequence: Option<u64>, digest: &str| PolicyProfileStatus {
        sequence,
        bundle_digest: Some(digest.to_owned()),
        ..Default::default()
    };
    let empty = ConfigMap::default();
    // (case, ConfigMap, status, expected: Ok(sequence) or the rejection's kind)
    let cases: [LastGoodCase; 7] = [
        (
            "verified",
            Some(configmap(&good)),
            recorded(Some(3), &good_digest),
            Ok(3),
        ),
        (
            "no ConfigMap",
            None,
            recorded(Some(3), &good_digest),
            Err("missing"),
        ),
        (
            "no bundle key",
            Some(empty),
            recorded(Some(3), &good_digest),
            Err("missing"),
        ),
        (
            "nothing recorded",
            Some(configmap(&good)),
            recorded(None, &good_digest),
            Err("not_recorded"),
        ),
        (
            "signed by another key",
            Some(configmap(&forged)),
            recorded(Some(3), &good_digest),
            Err("untrusted"),
        ),
        (
            "replay of an older sequence",
            Some(configmap(&older)),
            recorded(Some(3), &good_digest),
            Err("untrusted"),
        ),
        (
            "another profile",
            Some(configmap(&other)),
            recorded(Some(3), &other_digest),
            Err("wrong_profile"),
        ),
    ];
    for (case, cm, status, expected) in cases {
        let got = last_good(cm.as_ref(), &trust, "ns", "p", &status);
        let got = got.map(|doc| doc.sequence).map_err(|r| match r {
            LastGoodRejection::Missing => "missing",
            LastGoodRejection::NotRecorded => "not_recorded",
            LastGoodRejection::Untrusted(_) => "untrusted",
            LastGoodRejection::WrongProfile(_) => "wrong_profile",
        });
        assert_eq!(got, expected, "{case}");
    }
}

pub(super) fn conditions(status: &PolicyProfileStatus) -> Vec<(&str, &str, &str)> {
    status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect()
}

#[test]
fn ready_status_table() {
    let now = t("2030-01-01T00:00:00Z");
    let bundle = published("p@a", 2, "2030-01-01T00:00:00Z");
    let pods = |n: usize| (0..n).map(|i| format!("pod-{i}")).collect::<Vec<_>>();
    // (case, fleet, stale pods, Stale condition, message fragment)
    let cases = [
        (
            "all current",
            FleetStatus {
                current: 2,
                stale: 0,
                total: 2,
            },
            vec![],
            ("Stale", "False", "AllCurrent"),
            "2 of 2 pods run p@a",
        ),
        (
            "some behind",
            FleetStatus {
                current: 1,
                stale: 1,
                total: 2,
            },
            pods(1),
            ("Stale", "True", "PodsBehind"),
            "1 of 2 pods are not on p@a: pod-0",
        ),
        (
            "many behind: five named",
            FleetStatus {
                current: 0,
                stale: 7,
                total: 7,
            },
            pods(7),
            ("Stale", "True", "PodsBehind"),
            "pod-0, pod-1, pod-2, pod-3, pod-4 and 2 more",
        ),
    ];
    for (case, fleet, stale_pods, stale, message) in cases {
        let status = ready_status(
            &PolicyProfileStatus::default(),
            "p",
            &Published {
                bundle: &bundle,
                grants: 3,
                fleet,
                stale_pods,
                shadowing: None,
                warnings: vec![],
            },
            Some(4),
            now,
        );
        assert_eq!(
            conditions(&status),
            vec![
                ("Valid", "True", "Compiled"),
                ("Ready", "True", "Published"),
                stale
            ],
            "{case}"
        );
        let stale_condition = status.condition(ConditionType::Stale).unwrap();
        assert!(
            stale_condition.message.contains(message),
            "{case}: {stale_condition:?}"
        );
        assert_eq!(status.version.as_deref(), Some("p@a"), "{case}");
        assert_eq!(
            status.bundle_ref.as_deref(),
            Some("toolgate-bundle-p"),
            "{case}"
        );
        assert_eq!(
            (status.sequence, status.grants),
            (Some(2), Some(3)),
            "{case}"
        );
        assert_eq!(status.observed_generation, Some(4), "{case}");
        assert_eq!(status.fleet, Some(fleet), "{case}");
    }
}

pub(super) fn policy_error() -> PolicyError {
    toolgate_policy::load::from_value::<PolicySpec>(json!({"mode": "rulez"}), "spec").unwrap_err()
}

#[test]
fn invalid_status_table() {
    let now = t("2030-01-01T00:00:00Z");
    let bundle = published("p@a", 5, "2030-01-01T00:00:00Z");
    let stale = condition(
        &[],
        ConditionType::Stale,
        true,
        "PodsBehind",
        "x".into(),
        Some(1),
        now,
    );
    let previous = PolicyProfileStatus {
        version: Some("p@old".into()),
        sequence: Some(4),
        fleet: Some(FleetStatus {
            current: 1,
            stale: 1,
            total: 2,
        }),
        conditions: vec![stale.clone()],
        ..Default::default()
    };
    let err = policy_error();
    // (case, serving, Ready condition, served version and sequence)
    let cases = [
        (
            "serving the last good bundle",
            Serving::LastGood {
                bundle: &bundle,
                grants: 2,
            },
            ("Ready", "True", "ServingLastGood"),
            (Some("p@a"), Some(5)),
        ),
        (
            "nothing published",
            Serving::Nothing {
                reason: "NoValidBundle",
                message: "ConfigMap toolgate-bundle-p holds no bundle".into(),
            },
            ("Ready", "False", "NoValidBundle"),
            (Some("p@old"), Some(4)),
        ),
        (
            "last good unusable",
            Serving::Nothing {
                reason: "LastGoodUnusable",
                message: "not re-signing".into(),
            },
            ("Ready", "False", "LastGoodUnusable"),
            (Some("p@old"), Some(4)),
        ),
    ];
    for (case, serving, ready, (version, sequence)) in cases {
        let status = invalid_status(&previous, &err, &serving, Some(2), now);
        assert_eq!(
            conditions(&status),
            vec![
                ("Valid", "False", "InvalidSpec"),
                ready,
                ("Stale", "True", "PodsBehind")
            ],
            "{case}"
        );
        let valid = status.condition(ConditionType::Valid).unwrap();
        assert_eq!(valid.message, rejection_message(&err), "{case}");
        assert!(valid.message.starts_with(err.code()), "{case}");
        let ready = status.condition(ConditionType::Ready).unwrap();
        assert!(
            ready.message.contains("(generation 2) is invalid"),
            "{case}: {ready:?}"
        );
        assert_eq!(
            (status.version.as_deref(), status.sequence),
            (version, sequence),
            "{case}"
        );
        assert_eq!(status.fleet, previous.fleet, "{case}");
        assert_eq!(status.observed_generation, Some(2), "{case}");
    }
}
