//! Unit tests of the pure approval functions.

use std::sync::Arc;

use jiff::Timestamp;

use super::*;
use crate::crd::{Approval, ApprovalSpec, Decision, Phase, PolicyProfile, StandingGrant};

#[test]
fn names_are_valid_and_distinct() {
    assert_eq!(approval_name("abc-123"), "apr-abc-123");
    let a = approval_name("ABC_123");
    let b = approval_name("abc_123");
    assert_ne!(a, b);
    for n in [a, b, approval_name("01J_X/Y:Z")] {
        assert!(n.len() <= 253);
        assert!(
            n.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
            "{n}"
        );
        assert!(!n.ends_with('-') && !n.contains("--"), "{n}");
    }
    assert_eq!(
        profile_of("safe-coding@abc+hdef").as_deref(),
        Some("safe-coding")
    );
    assert_eq!(profile_of("nope"), None);
}

#[test]
fn grant_phases() {
    let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
    let grant = StandingGrant {
        profile: "p".into(),
        tool: "bash".into(),
        glob: "make *".into(),
        subjects: vec!["*".into()],
        expires_at: "2030-01-02T00:00:00Z".into(),
    };
    let mut spec = ApprovalSpec {
        request: None,
        grant: Some(grant.clone()),
        decision: None,
        reason: None,
        decided_by: Some("alice".into()),
        decided_by_groups: Some(vec!["platform".into()]),
    };
    let anyone: &[String] = &[];
    assert_eq!(
        grant_status(&spec, &grant, Some(anyone), now, None).phase,
        Some(Phase::Pending)
    );
    spec.decision = Some(Decision::Approved);
    assert_eq!(
        grant_status(&spec, &grant, Some(anyone), now, None).phase,
        Some(Phase::Approved)
    );
    let later: Timestamp = "2030-01-03T00:00:00Z".parse().unwrap();
    assert_eq!(
        grant_status(&spec, &grant, Some(anyone), later, None).phase,
        Some(Phase::Expired)
    );
    // A decider outside the approvers keeps the grant pending, and so
    // does a profile that cannot be found.
    let oncall = ["group:oncall".to_owned()];
    let refused = grant_status(&spec, &grant, Some(&oncall), now, None);
    assert_eq!(refused.phase, Some(Phase::Pending));
    assert!(refused.message.unwrap().starts_with(APPROVER_NOT_ALLOWED));
    assert_eq!(
        grant_status(&spec, &grant, None, now, None).phase,
        Some(Phase::Pending)
    );
    let platform = ["group:platform".to_owned()];
    assert_eq!(
        grant_status(&spec, &grant, Some(&platform), now, None).phase,
        Some(Phase::Approved)
    );
    spec.decision = Some(Decision::Denied);
    assert_eq!(
        grant_status(&spec, &grant, Some(&oncall), now, None).phase,
        Some(Phase::Denied)
    );
}

#[test]
fn approvers_are_users_or_groups() {
    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let groups = list(&["system:authenticated", "oncall"]);
    assert!(approver_allowed(&[], None, &[]));
    assert!(!approver_allowed(&list(&["alice"]), None, &groups));
    assert!(approver_allowed(&list(&["alice"]), Some("alice"), &[]));
    assert!(approver_allowed(&list(&["user:alice"]), Some("alice"), &[]));
    assert!(!approver_allowed(
        &list(&["user:alice"]),
        Some("Alice"),
        &[]
    ));
    assert!(approver_allowed(
        &list(&["group:oncall"]),
        Some("bob"),
        &groups
    ));
    assert!(!approver_allowed(
        &list(&["group:oncall"]),
        Some("bob"),
        &[]
    ));
    // A group name is not a username, and a username is not a group.
    assert!(!approver_allowed(
        &list(&["group:oncall"]),
        Some("oncall"),
        &[]
    ));
    assert!(!approver_allowed(
        &list(&["user:oncall"]),
        Some("bob"),
        &groups
    ));
    assert!(approver_allowed(
        &list(&["system:serviceaccount:ops:bot"]),
        Some("system:serviceaccount:ops:bot"),
        &[]
    ));
}

#[test]
fn finished_objects_are_kept_for_their_profiles_retention() {
    let now: Timestamp = "2030-01-02T00:00:00Z".parse().unwrap();
    let mut obj: Approval = serde_json::from_value(serde_json::json!({
        "apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
        "metadata": {"name": "apr-1", "namespace": "toolgate-system"},
        "spec": {"request": {"approvalId": "1", "tenant": "t", "invocationId": "i",
            "tool": "bash", "argsDigest": "d", "runId": "r", "policyVersion": "p@x"}},
        "status": {"phase": "Approved", "profile": "p", "finishedAt": "2030-01-01T00:00:00Z"}
    }))
    .unwrap();
    // Default: one day.
    assert!(past_retention(&obj, &[], now));
    assert!(!past_retention(
        &obj,
        &[],
        "2030-01-01T23:59:59Z".parse().unwrap()
    ));
    let profile: PolicyProfile = serde_json::from_value(serde_json::json!({
        "apiVersion": "toolgate.dev/v1alpha1", "kind": "PolicyProfile",
        "metadata": {"name": "p", "namespace": "agents"},
        "spec": {"mode": "denyAll", "approvals": {"ttlSeconds": 60, "retentionSeconds": 172800}}
    }))
    .unwrap();
    let profiles = [Arc::new(profile)];
    assert!(!past_retention(&obj, &profiles, now));
    assert!(past_retention(
        &obj,
        &profiles,
        "2030-01-03T00:00:00Z".parse().unwrap()
    ));
    // Pending objects are never deleted.
    obj.status.as_mut().unwrap().phase = Some(Phase::Pending);
    assert!(!past_retention(
        &obj,
        &[],
        "2031-01-01T00:00:00Z".parse().unwrap()
    ));
}
