//! Validation of toolgate's custom resources at admission time.
//!
//! A PolicyProfile is admitted only if its `spec` loads strictly and
//! compiles, exactly as the controller and sidecar will load it; the denial
//! names the field and the rule. An Approval must carry exactly one of
//! `spec.request` / `spec.grant`, a decision from the closed set, and once
//! decided it is final. A pod update may not touch the injected sidecar
//! ([`pod`], checks in [`guard`](crate::guard)).

use serde_json::Value;
use toolgate_policy::{CompiledPolicy, PolicySpec};

use crate::WebhookError;
use crate::review::AdmissionRequest;

/// Decisions a human may write into `spec.decision`.
pub const DECISIONS: [&str; 2] = ["approved", "denied"];

/// Checks a PolicyProfile create or update. DELETE and CONNECT pass.
pub fn policy_profile(request: &AdmissionRequest) -> Result<(), WebhookError> {
    let Some(object) = reviewed_object(request)? else {
        return Ok(());
    };
    let metadata = object.get("metadata");
    let name = metadata
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or(request.name.as_deref().filter(|n| !n.is_empty()))
        .or(metadata
            .and_then(|m| m.get("generateName"))
            .and_then(Value::as_str)
            .map(|g| g.trim_end_matches('-'))
            .filter(|g| !g.is_empty()))
        .ok_or_else(|| WebhookError::InvalidObject {
            field: "metadata.name".into(),
            message: "a PolicyProfile needs a name".into(),
        })?;
    let spec = object
        .get("spec")
        .cloned()
        .ok_or_else(|| WebhookError::InvalidObject {
            field: "spec".into(),
            message: "a PolicyProfile needs a spec".into(),
        })?;
    let spec: PolicySpec = toolgate_policy::load::from_value(spec, "spec")?;
    CompiledPolicy::compile(name, &spec, &[])?;
    Ok(())
}

/// Checks an Approval create or update. DELETE and CONNECT pass.
pub fn approval(request: &AdmissionRequest) -> Result<(), WebhookError> {
    let Some(object) = reviewed_object(request)? else {
        return Ok(());
    };
    let spec = object
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid_approval("spec", "an Approval needs a spec object"))?;
    let is_set = |key: &str| spec.get(key).is_some_and(|v| !v.is_null());
    match (is_set("request"), is_set("grant")) {
        (true, false) | (false, true) => {}
        (true, true) => {
            return Err(invalid_approval(
                "spec",
                "set exactly one of spec.request (answer one escalated call) or spec.grant (a standing grant), not both",
            ));
        }
        (false, false) => {
            return Err(invalid_approval(
                "spec",
                "set exactly one of spec.request (answer one escalated call) or spec.grant (a standing grant)",
            ));
        }
    }
    let decision = spec.get("decision").filter(|d| !d.is_null());
    if let Some(decision) = decision {
        match decision.as_str() {
            Some(d) if DECISIONS.contains(&d) => {}
            _ => {
                return Err(invalid_approval(
                    "spec.decision",
                    &format!("must be one of approved, denied; got {decision}"),
                ));
            }
        }
    }
    let old_spec = request
        .old_object
        .as_ref()
        .filter(|_| request.operation == "UPDATE")
        .and_then(|o| o.get("spec"));
    let old_decision = old_spec
        .and_then(|s| s.get("decision"))
        .filter(|d| !d.is_null());
    if decision.is_none() {
        for key in ["decidedBy", "decidedByGroups"] {
            if is_set(key) {
                return Err(invalid_approval(
                    &format!("spec.{key}"),
                    "is recorded with a decision; set spec.decision in the same write",
                ));
            }
        }
    }
    // A decision being made now must name the user the API server
    // authenticated, and only groups it authenticated them in, so the
    // controller's approvers check compares real identities rather than
    // whatever a writer typed.
    if decision.is_some() && old_decision.is_none() {
        check_decider(spec, request)?;
    }
    let Some(old_decision) = old_decision else {
        return Ok(());
    };
    if decision != Some(old_decision) {
        let now = decision.map_or_else(|| "removed".to_owned(), |d| format!("changed to {d}"));
        return Err(WebhookError::ApprovalImmutable {
            field: "spec.decision".into(),
            message: format!(
                "the approval was already resolved as {old_decision} and cannot be {now}; create a new Approval instead"
            ),
        });
    }
    for key in ["request", "grant", "decidedBy", "decidedByGroups"] {
        if spec.get(key).filter(|v| !v.is_null())
            != old_spec.and_then(|s| s.get(key)).filter(|v| !v.is_null())
        {
            return Err(WebhookError::ApprovalImmutable {
                field: format!("spec.{key}"),
                message: "a resolved approval cannot be edited; create a new Approval instead"
                    .into(),
            });
        }
    }
    Ok(())
}

/// A new decision's `decidedBy` must be the authenticated username and its
/// `decidedByGroups` (optional) a subset of the authenticated groups. A
/// review without a username fails closed.
fn check_decider(
    spec: &serde_json::Map<String, Value>,
    request: &AdmissionRequest,
) -> Result<(), WebhookError> {
    let info = request.user_info.as_ref();
    let Some(user) = info
        .and_then(|u| u.username.as_deref())
        .filter(|u| !u.is_empty())
    else {
        return Err(invalid_approval(
            "spec.decision",
            "the admission request names no authenticated user, so the decision cannot be attributed",
        ));
    };
    let decided_by = spec.get("decidedBy").and_then(Value::as_str);
    if decided_by != Some(user) {
        return Err(invalid_approval(
            "spec.decidedBy",
            &format!(
                "must be the user making this decision (`{user}`), got {}; `kubectl toolgate approve` sets it",
                decided_by.map_or_else(|| "nothing".to_owned(), |d| format!("`{d}`"))
            ),
        ));
    }
    let Some(groups) = spec.get("decidedByGroups").filter(|g| !g.is_null()) else {
        return Ok(());
    };
    let authenticated = info.map(|u| u.groups.as_slice()).unwrap_or_default();
    let groups = groups
        .as_array()
        .ok_or_else(|| invalid_approval("spec.decidedByGroups", "must be a list of group names"))?;
    for (i, group) in groups.iter().enumerate() {
        let field = format!("spec.decidedByGroups[{i}]");
        let name = group
            .as_str()
            .ok_or_else(|| invalid_approval(&field, "must be a string"))?;
        if !authenticated.iter().any(|g| g == name) {
            return Err(invalid_approval(
                &field,
                &format!("`{user}` is not authenticated in group `{name}`"),
            ));
        }
    }
    Ok(())
}

/// Checks a pod UPDATE (the main resource or `pods/ephemeralcontainers`)
/// against the stored pod with [`guard::pod_update`](crate::guard::pod_update).
/// Other operations pass: CREATE is judged by the mutating webhook, which
/// injects the sidecar.
pub fn pod(request: &AdmissionRequest) -> Result<(), WebhookError> {
    if request.operation != "UPDATE" {
        return Ok(());
    }
    let missing = |field: &str| WebhookError::InvalidObject {
        field: field.into(),
        message: "missing for UPDATE".into(),
    };
    let new = request
        .object
        .as_ref()
        .ok_or_else(|| missing("request.object"))?;
    let old = request
        .old_object
        .as_ref()
        .ok_or_else(|| missing("request.oldObject"))?;
    crate::guard::pod_update(old, new)
}

/// The object to check, or `None` when the operation needs no check.
fn reviewed_object(request: &AdmissionRequest) -> Result<Option<&Value>, WebhookError> {
    match request.operation.as_str() {
        "CREATE" | "UPDATE" => {
            request
                .object
                .as_ref()
                .map(Some)
                .ok_or_else(|| WebhookError::InvalidObject {
                    field: "request.object".into(),
                    message: format!("missing for {}", request.operation),
                })
        }
        _ => Ok(None),
    }
}

fn invalid_approval(field: &str, message: &str) -> WebhookError {
    WebhookError::InvalidApproval {
        field: field.into(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(operation: &str, object: Value, old: Option<Value>) -> AdmissionRequest {
        AdmissionRequest {
            uid: "u".into(),
            name: None,
            namespace: Some("ns".into()),
            operation: operation.into(),
            object: Some(object),
            old_object: old,
            dry_run: None,
            user_info: None,
        }
    }

    #[test]
    fn profile_rules() {
        let good = json!({"metadata": {"name": "p"}, "spec": {"mode": "rules", "rules": {"bash": {"allow": ["ls *"]}}, "effects": {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"}}}});
        policy_profile(&request("CREATE", good, None)).unwrap();
        let err = policy_profile(&request(
            "CREATE",
            json!({"metadata": {"name": "p"}, "spec": {"mode": "rulez"}}),
            None,
        ))
        .unwrap_err();
        assert_eq!(err.code(), "profile_invalid_mode");
        assert_eq!(err.field(), Some("spec.mode"));
        let mut del = request("DELETE", json!(null), None);
        del.object = None;
        policy_profile(&del).unwrap();
    }

    #[test]
    fn approval_rules() {
        let req = json!({"invocationId": "i"});
        approval(&request("CREATE", json!({"spec": {"request": req}}), None)).unwrap();
        let both = approval(&request(
            "CREATE",
            json!({"spec": {"request": req, "grant": {}}}),
            None,
        ))
        .unwrap_err();
        assert_eq!(both.code(), "approval_invalid");
        let neither = approval(&request("CREATE", json!({"spec": {}}), None)).unwrap_err();
        assert_eq!(neither.field(), Some("spec"));
        let bad = approval(&request(
            "CREATE",
            json!({"spec": {"request": req, "decision": "yes"}}),
            None,
        ))
        .unwrap_err();
        assert_eq!(bad.field(), Some("spec.decision"));
        let old = json!({"spec": {"request": req, "decision": "approved"}});
        approval(&request("UPDATE", old.clone(), Some(old.clone()))).unwrap();
        let mut decide = request(
            "UPDATE",
            json!({"spec": {"request": req, "decision": "denied", "decidedBy": "alice"}}),
            Some(json!({"spec": {"request": req}})),
        );
        decide.user_info = Some(user("alice", &[]));
        approval(&decide).unwrap();
        for new in [
            json!({"spec": {"request": req, "decision": "denied"}}),
            json!({"spec": {"request": req}}),
        ] {
            let err = approval(&request("UPDATE", new, Some(old.clone()))).unwrap_err();
            assert_eq!(err.code(), "approval_immutable");
            assert_eq!(err.field(), Some("spec.decision"));
        }
        let swapped = approval(&request(
            "UPDATE",
            json!({"spec": {"request": {"invocationId": "j"}, "decision": "approved"}}),
            Some(old),
        ))
        .unwrap_err();
        assert_eq!(swapped.field(), Some("spec.request"));
    }

    #[test]
    fn a_new_decision_names_the_authenticated_user() {
        let req = json!({"invocationId": "i"});
        let pending = json!({"spec": {"request": req}});
        let as_user = |object: Value, user: Option<&str>| {
            let mut r = request("UPDATE", object, Some(pending.clone()));
            r.user_info = user.map(|u| self::user(u, &["system:authenticated", "oncall"]));
            approval(&r)
        };
        as_user(
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "alice"}}),
            Some("alice"),
        )
        .unwrap();
        for spoofed in [
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "platform-oncall"}}),
            json!({"spec": {"request": req, "decision": "approved"}}),
        ] {
            let err = as_user(spoofed, Some("alice")).unwrap_err();
            assert_eq!(
                (err.code(), err.field()),
                ("approval_invalid", Some("spec.decidedBy"))
            );
            assert!(err.to_string().contains("alice"), "{err}");
        }
        // Without user information the decision cannot be attributed: refused.
        let err = as_user(
            json!({"spec": {"request": req, "decision": "denied"}}),
            None,
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("spec.decision"));
        // Groups: only ones the API server authenticated the user in.
        as_user(
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "alice",
                            "decidedByGroups": ["oncall"]}}),
            Some("alice"),
        )
        .unwrap();
        let err = as_user(
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "alice",
                            "decidedByGroups": ["oncall", "platform-oncall"]}}),
            Some("alice"),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("spec.decidedByGroups[1]"));
        // Neither field without a decision.
        let err = as_user(
            json!({"spec": {"request": req, "decidedBy": "alice"}}),
            Some("alice"),
        )
        .unwrap_err();
        assert_eq!(err.field(), Some("spec.decidedBy"));
        // Creating an already-decided object is a decision too.
        let mut create = request(
            "CREATE",
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "mallory"}}),
            None,
        );
        create.user_info = Some(user("alice", &[]));
        assert_eq!(
            approval(&create).unwrap_err().field(),
            Some("spec.decidedBy")
        );
    }

    fn user(name: &str, groups: &[&str]) -> crate::review::UserInfo {
        crate::review::UserInfo {
            username: Some(name.into()),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// Item: a refused approver cannot re-attribute a recorded decision to
    /// an allowed name, nor add or change groups afterwards.
    #[test]
    fn the_decider_is_immutable_once_recorded() {
        let req = json!({"invocationId": "i"});
        let old = json!({"spec": {"request": req, "decision": "approved", "decidedBy": "mallory"}});
        for new in [
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "platform-oncall"}}),
            json!({"spec": {"request": req, "decision": "approved"}}),
            json!({"spec": {"request": req, "decision": "approved", "decidedBy": "mallory",
                            "decidedByGroups": ["platform-oncall"]}}),
        ] {
            let mut r = request("UPDATE", new, Some(old.clone()));
            r.user_info = Some(user("platform-oncall", &["platform-oncall"]));
            let err = approval(&r).unwrap_err();
            assert_eq!(err.code(), "approval_immutable", "{err}");
            assert!(
                matches!(err.field(), Some("spec.decidedBy" | "spec.decidedByGroups")),
                "{err}"
            );
        }
    }
}
