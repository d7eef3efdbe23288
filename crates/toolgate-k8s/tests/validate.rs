//! Table tests of the shared validation: `validate_approval` (what the
//! webhook refuses at admission and the controller flags on read) and
//! `validate_profile`.

use serde_json::{Value, json};
use toolgate_k8s::crd::{ApprovalRequest, ApprovalSpec, Decision, StandingGrant};
use toolgate_k8s::validate::approval_fields;
use toolgate_k8s::{ApprovalFields, K8sError, Requester, validate_approval, validate_profile};

/// Fields from a JSON spec, as the webhook reads them.
fn fields(spec: Value) -> ApprovalFields {
    approval_fields(spec.as_object().unwrap()).unwrap()
}

fn user(name: &str, groups: &[&str]) -> Requester {
    Requester {
        username: Some(name.into()),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

/// `(code, field)` of the outcome; `("ok", "")` when admitted.
fn outcome(result: Result<(), K8sError>) -> (&'static str, String) {
    match result {
        Ok(()) => ("ok", String::new()),
        Err(e) => (e.code(), e.field().unwrap_or_default().to_owned()),
    }
}

/// One row: case, old spec, new spec, writer, expected `(code, field)`.
type Case<'a> = (
    &'a str,
    Option<Value>,
    Value,
    Option<&'a Requester>,
    (&'a str, &'a str),
);

#[test]
fn validate_approval_table() {
    let req = json!({"invocationId": "i"});
    let pending = json!({"request": req});
    let approved_by_alice = json!({"request": req, "decision": "approved", "decidedBy": "alice"});
    let alice = user("alice", &["system:authenticated", "oncall"]);
    let nobody = Requester::default();
    let lead = user("oncall-lead", &[]);
    // (case, old spec, new spec, writer, expected (code, field))
    let cases: Vec<Case<'_>> = vec![
        ("a request", None, pending.clone(), Some(&alice), ("ok", "")),
        (
            "a grant",
            None,
            json!({"grant": {"profile": "p"}}),
            Some(&alice),
            ("ok", ""),
        ),
        (
            "both",
            None,
            json!({"request": req, "grant": {}}),
            Some(&alice),
            ("approval_invalid", "spec"),
        ),
        (
            "neither",
            None,
            json!({}),
            Some(&alice),
            ("approval_invalid", "spec"),
        ),
        (
            "decidedBy without a decision",
            None,
            json!({"request": req, "decidedBy": "alice"}),
            Some(&alice),
            ("approval_invalid", "spec.decidedBy"),
        ),
        (
            "decidedByGroups without a decision",
            None,
            json!({"request": req, "decidedByGroups": ["oncall"]}),
            Some(&alice),
            ("approval_invalid", "spec.decidedByGroups"),
        ),
        (
            "deciding as oneself",
            Some(pending.clone()),
            approved_by_alice.clone(),
            Some(&alice),
            ("ok", ""),
        ),
        (
            "deciding in an authenticated group",
            Some(pending.clone()),
            json!({"request": req, "decision": "approved", "decidedBy": "alice", "decidedByGroups": ["oncall"]}),
            Some(&alice),
            ("ok", ""),
        ),
        (
            "deciding in a group not authenticated",
            Some(pending.clone()),
            json!({"request": req, "decision": "approved", "decidedBy": "alice", "decidedByGroups": ["oncall", "admins"]}),
            Some(&alice),
            ("approval_invalid", "spec.decidedByGroups[1]"),
        ),
        (
            "deciding as someone else",
            Some(pending.clone()),
            json!({"request": req, "decision": "approved", "decidedBy": "bob"}),
            Some(&alice),
            ("approval_invalid", "spec.decidedBy"),
        ),
        (
            "deciding without naming anyone",
            Some(pending.clone()),
            json!({"request": req, "decision": "denied"}),
            Some(&alice),
            ("approval_invalid", "spec.decidedBy"),
        ),
        (
            "deciding with no authenticated user fails closed",
            Some(pending.clone()),
            approved_by_alice.clone(),
            Some(&nobody),
            ("approval_invalid", "spec.decision"),
        ),
        (
            "creating an already decided object is a decision",
            None,
            json!({"request": req, "decision": "approved", "decidedBy": "mallory"}),
            Some(&alice),
            ("approval_invalid", "spec.decidedBy"),
        ),
        (
            "no writer: the controller reading a stored object",
            None,
            json!({"request": req, "decision": "approved", "decidedBy": "mallory"}),
            None,
            ("ok", ""),
        ),
        (
            "an unchanged resolved approval",
            Some(approved_by_alice.clone()),
            approved_by_alice.clone(),
            Some(&alice),
            ("ok", ""),
        ),
        (
            "changing the decision",
            Some(approved_by_alice.clone()),
            json!({"request": req, "decision": "denied", "decidedBy": "alice"}),
            Some(&alice),
            ("approval_immutable", "spec.decision"),
        ),
        (
            "removing the decision",
            Some(approved_by_alice.clone()),
            pending.clone(),
            Some(&alice),
            ("approval_immutable", "spec.decision"),
        ),
        (
            "swapping the request",
            Some(approved_by_alice.clone()),
            json!({"request": {"invocationId": "j"}, "decision": "approved", "decidedBy": "alice"}),
            Some(&alice),
            ("approval_immutable", "spec.request"),
        ),
        (
            "re-attributing the decision",
            Some(approved_by_alice.clone()),
            json!({"request": req, "decision": "approved", "decidedBy": "oncall-lead"}),
            Some(&lead),
            ("approval_immutable", "spec.decidedBy"),
        ),
        (
            "adding groups afterwards",
            Some(approved_by_alice.clone()),
            json!({"request": req, "decision": "approved", "decidedBy": "alice", "decidedByGroups": ["oncall"]}),
            Some(&alice),
            ("approval_immutable", "spec.decidedByGroups"),
        ),
    ];
    for (case, old, new, writer, (code, field)) in cases {
        let old = old.map(fields);
        let got = outcome(validate_approval(old.as_ref(), &fields(new), writer));
        assert_eq!((got.0, got.1.as_str()), (code, field), "{case}");
    }
}

#[test]
fn approval_fields_table() {
    // (case, spec, expected (code, field))
    let cases = [
        ("empty", json!({}), ("ok", "")),
        (
            "nulls count as unset",
            json!({"decision": null, "decidedBy": null}),
            ("ok", ""),
        ),
        ("each decision", json!({"decision": "denied"}), ("ok", "")),
        (
            "a decision outside the set",
            json!({"decision": "approve"}),
            ("approval_invalid", "spec.decision"),
        ),
        (
            "a decision that is not a string",
            json!({"decision": true}),
            ("approval_invalid", "spec.decision"),
        ),
        (
            "decidedBy not a string",
            json!({"decidedBy": 7}),
            ("approval_invalid", "spec.decidedBy"),
        ),
        (
            "decidedByGroups not a list",
            json!({"decidedByGroups": "oncall"}),
            ("approval_invalid", "spec.decidedByGroups"),
        ),
        (
            "a group that is not a string",
            json!({"decidedByGroups": ["oncall", 3]}),
            ("approval_invalid", "spec.decidedByGroups[1]"),
        ),
    ];
    for (case, spec, (code, field)) in cases {
        let got = outcome(approval_fields(spec.as_object().unwrap()).map(|_| ()));
        assert_eq!((got.0, got.1.as_str()), (code, field), "{case}");
    }
    let decided =
        fields(json!({"decision": "approved", "decidedBy": "a", "decidedByGroups": ["g"]}));
    assert_eq!(decided.decision, Some(Decision::Approved));
    assert_eq!(decided.decided_by_groups, Some(vec!["g".to_owned()]));
    let message = approval_fields(json!({"decision": "yes"}).as_object().unwrap())
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "spec.decision: must be one of approved, denied; got \"yes\""
    );
}

/// The typed spec the controller holds reads as the same fields as its JSON.
#[test]
fn typed_and_json_specs_read_alike() {
    let request = ApprovalRequest {
        approval_id: "a1".into(),
        tenant: "agents".into(),
        invocation_id: "i".into(),
        tool: "bash".into(),
        args_digest: "sha256:00".into(),
        call_digest: None,
        action: None,
        preview: None,
        run_id: "r".into(),
        policy_version: "p@x".into(),
        profile: None,
        requested_by: None,
        escalation: None,
    };
    let grant = StandingGrant {
        profile: "p".into(),
        tool: "bash".into(),
        glob: "git *".into(),
        subjects: vec!["*".into()],
        expires_at: "2030-01-01T00:00:00Z".into(),
    };
    for spec in [
        ApprovalSpec {
            request: Some(request),
            grant: None,
            decision: Some(Decision::Denied),
            reason: Some("no".into()),
            decided_by: Some("alice".into()),
            decided_by_groups: Some(vec!["oncall".into()]),
        },
        ApprovalSpec {
            request: None,
            grant: Some(grant),
            decision: None,
            reason: None,
            decided_by: None,
            decided_by_groups: None,
        },
    ] {
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(ApprovalFields::from(&spec), fields(json));
        validate_approval(None, &ApprovalFields::from(&spec), None).unwrap();
    }
}

#[test]
fn decisions_are_one_closed_set() {
    for d in Decision::ALL {
        assert_eq!(Decision::from_wire(d.as_str()), Some(d));
        assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
    }
    for legacy in ["approve", "deny", "Approved", ""] {
        assert_eq!(Decision::from_wire(legacy), None, "{legacy}");
    }
}

#[test]
fn validate_profile_table() {
    // (case, spec, expected error code or "ok")
    let cases = [
        (
            "rules that compile",
            json!({"mode": "rules", "rules": {"bash": {"allow": ["ls *"]}},
                   "effects": {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"}}}),
            "ok",
        ),
        ("deny everything", json!({"mode": "denyAll"}), "ok"),
        (
            "a rule for a tool without an effect",
            json!({"mode": "rules", "rules": {"bash": {"allow": ["ls *"]}}}),
            "profile_incomplete_effects",
        ),
        (
            "a bad glob",
            json!({"mode": "rules", "rules": {"bash": {"allow": [""]}},
                   "effects": {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"}}}),
            "profile_invalid_glob",
        ),
    ];
    for (case, spec, code) in cases {
        let spec: toolgate_policy::PolicySpec = serde_json::from_value(spec).unwrap();
        let got = validate_profile("p", &spec).map(|_| "ok");
        assert_eq!(got.unwrap_or_else(|e| e.code()), code, "{case}");
    }
}
