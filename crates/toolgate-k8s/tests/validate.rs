//! Table tests of the shared validation: `validate_approval` (what the
//! webhook refuses at admission and the controller flags on read) and
//! `validate_profile`.

use serde_json::{Value, json};
use toolgate_k8s::crd::{ApprovalRequest, ApprovalSpec, Decision, StandingGrant};
use toolgate_k8s::validate::approval_fields;
use toolgate_k8s::{
    ApprovalFields, K8sError, Requester, validate_approval, validate_profile,
    validate_profile_warnings,
};

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

/// A bash profile with `rules` and one PROCESS_EXEC tool.
fn bash_rules(rules: serde_json::Value) -> toolgate_policy::PolicySpec {
    serde_json::from_value(json!({"mode": "rules", "rules": rules,
        "effects": {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"}}}))
    .unwrap()
}

#[test]
fn an_escalate_glob_under_the_allow_tier_is_refused() {
    // `git push origin*` is allowed by `git *` before the escalate tier.
    let spec = bash_rules(json!({"bash": {"allow": ["ls", "git *"],
                                          "escalate": ["git push origin*"]}}));
    let err = validate_profile("p", &spec).unwrap_err();
    assert_eq!(err.code(), "shadowed_escalate");
    assert_eq!(err.field(), Some("spec.rules.bash.escalate[0]"));
    let message = err.to_string();
    for part in [
        "escalate glob `git push origin*` of tool `bash`",
        "`git *` (spec.rules.bash.allow[1])",
        "remove or narrow that allow glob, or move the pattern to deny",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    assert!(!message.contains("spec.rules.bash.allow[0]"), "{message}");

    // The `*` tool's allow rules run before the tool's escalate rules too.
    let spec = bash_rules(json!({"bash": {"escalate": ["make *"]}, "*": {"allow": ["*"]}}));
    assert_eq!(
        validate_profile("p", &spec).unwrap_err().code(),
        "shadowed_escalate"
    );

    // Not refused: partly allowed, or wholly denied before the allow tier.
    for rules in [
        json!({"bash": {"allow": ["git status*"], "escalate": ["git *"]}}),
        json!({"bash": {"deny": ["git push*"], "allow": ["git *"], "escalate": ["git push -f*"]}}),
    ] {
        let (_, warnings) = validate_profile_warnings("p", &bash_rules(rules.clone())).unwrap();
        assert!(warnings.is_empty(), "{rules}: {warnings:?}");
    }
}

#[test]
fn a_catch_all_escalate_is_refused_only_when_every_tool_shadows_it() {
    let spec = |escalate: serde_json::Value| -> toolgate_policy::PolicySpec {
        serde_json::from_value(json!({"mode": "rules",
            "rules": {"bash": {"allow": ["git *"]}, "reader": {"allow": ["*"]},
                      "*": {"escalate": escalate}},
            "effects": {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"},
                        "reader": {"sideEffect": "WORKSPACE_READ", "risk": "low"}}}))
        .unwrap()
    };
    // `reader` allows everything, but `*` still asks for the rest of bash.
    validate_profile("p", &spec(json!(["*"]))).unwrap();
    // Every tool allows `git push*` first: nobody is ever asked.
    let err = validate_profile("p", &spec(json!(["git push*"]))).unwrap_err();
    assert_eq!(err.code(), "shadowed_escalate");
    assert_eq!(err.field(), Some("spec.rules.*.escalate[0]"));
    assert!(
        err.to_string()
            .contains("`git *` (spec.rules.bash.allow[0])"),
        "{err}"
    );
}

#[test]
fn duplicate_globs_and_intricate_globs_are_warnings() {
    let spec = bash_rules(json!({"bash": {"allow": ["ls *", "ls *"], "escalate": ["make"]}}));
    let (_, warnings) = validate_profile_warnings("p", &spec).unwrap();
    let codes: Vec<_> = warnings
        .iter()
        .map(|f| (f.code, f.field.as_str()))
        .collect();
    assert_eq!(codes, [("duplicate_glob", "spec.rules.bash.allow[1]")]);

    // Past the state budget the glob is not judged, never refused.
    let policy = validate_profile(
        "p",
        &bash_rules(json!({"bash": {
        "allow": ["*a?????????*"], "escalate": ["*a?????????b*"]}})),
    )
    .unwrap();
    let warnings = toolgate_policy::analyze::admission_check(&policy).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].code, "analysis_incomplete");
    assert_eq!(warnings[0].field, "spec.rules.bash.escalate[0]");
    // With room, the same glob is judged (and is shadowed).
    let err = toolgate_policy::analyze::admission_check_within(&policy, 200_000).unwrap_err();
    assert_eq!(err.code(), "shadowed_escalate");
}

/// Every example profile is admitted; prints how long each takes (run
/// with `--nocapture`; no timed assertion).
#[test]
fn example_profiles_pass_admission() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/profiles");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let manifest = toolgate_policy::load::parse_manifest(&text).unwrap();
        let started = std::time::Instant::now();
        let result = validate_profile_warnings(&manifest.metadata.name, &manifest.spec);
        let elapsed = started.elapsed();
        let (_, warnings) = result.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        println!(
            "admission {}: {elapsed:?}, {} warning(s)",
            file.display(),
            warnings.len()
        );
        for w in &warnings {
            println!("  {}: {} [{}]", w.field, w.message, w.code);
        }
    }
}

/// Many intricate escalate globs: each question stops at its budget and
/// the profile's total runs out, so all are warnings (elapsed printed).
#[test]
fn intricate_profiles_stay_bounded() {
    let allow: Vec<String> = (0..40).map(|i| format!("*{i}?????????*")).collect();
    let escalate: Vec<String> = (0..40).map(|i| format!("*{i}?????????x*")).collect();
    let spec = bash_rules(json!({"bash": {"allow": allow, "escalate": escalate}}));
    let started = std::time::Instant::now();
    let (_, warnings) = validate_profile_warnings("p", &spec).unwrap();
    println!("40 intricate escalate globs: {:?}", started.elapsed());
    assert_eq!(warnings.len(), 40, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.code == "analysis_incomplete"));
}
