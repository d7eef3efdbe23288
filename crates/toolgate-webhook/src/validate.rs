//! Validation of toolgate's custom resources at admission time.
//!
//! A PolicyProfile is admitted only if its `spec` loads strictly and
//! compiles, exactly as the controller and sidecar will load it; the denial
//! names the field and the rule. An Approval must carry exactly one of
//! `spec.request` / `spec.grant`, a decision from the closed set, and once
//! decided it is final. A pod update may not touch the injected sidecar
//! ([`pod`], checks in [`guard`](crate::guard)).

use serde_json::Value;
use toolgate_k8s::{K8sError, Requester, validate_approval, validate_profile};
use toolgate_policy::{CompiledPolicy, PolicySpec};

use crate::WebhookError;
use crate::review::AdmissionRequest;

/// Checks a PolicyProfile create or update: the compiled profile, for the
/// analysis of [`crate::profile_check`]; `None` for DELETE and CONNECT,
/// which pass.
pub fn policy_profile(request: &AdmissionRequest) -> Result<Option<CompiledPolicy>, WebhookError> {
    let Some(object) = reviewed_object(request)? else {
        return Ok(None);
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
    Ok(Some(validate_profile(name, &spec)?))
}

/// Checks an Approval create or update with
/// [`validate_approval`], the rules the
/// controller applies too. DELETE and CONNECT pass.
pub fn approval(request: &AdmissionRequest) -> Result<(), WebhookError> {
    let Some(object) = reviewed_object(request)? else {
        return Ok(());
    };
    let spec = object
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| K8sError::InvalidApproval {
            field: "spec".into(),
            message: "an Approval needs a spec object".into(),
        })?;
    let new = toolgate_k8s::validate::approval_fields(spec)?;
    let old = request
        .old_object
        .as_ref()
        .filter(|_| request.operation == "UPDATE")
        .and_then(|o| o.get("spec"))
        .and_then(Value::as_object)
        .map(toolgate_k8s::validate::approval_fields)
        .transpose()?;
    // A review without user information fails closed: nobody to attribute
    // a decision to.
    let writer = request
        .user_info
        .as_ref()
        .map(|u| Requester {
            username: u.username.clone(),
            groups: u.groups.clone(),
        })
        .unwrap_or_default();
    Ok(validate_approval(old.as_ref(), &new, Some(&writer))?)
}

/// Refuses the CREATE of a request Approval, or of any Approval whose name
/// takes the mirror's prefix (`apr-`), by anyone but `controller` (the
/// username the controller authenticates as; `None`: not configured,
/// anyone RBAC lets create). A request mirrors a database row, and only the
/// controller reads rows: an object made by anyone else could show an
/// approver a harmless call while naming a dangerous one's id, or — a
/// standing grant squatting `apr-<id>` — turn the approver's "approve" of
/// one call into a standing permission.
pub fn request_creator(
    request: &AdmissionRequest,
    controller: Option<&str>,
) -> Result<(), WebhookError> {
    let Some(controller) = controller else {
        return Ok(());
    };
    if request.operation != "CREATE" {
        return Ok(());
    }
    let object = request.object.as_ref();
    let is_request = object
        .and_then(|o| o.get("spec"))
        .and_then(|s| s.get("request"))
        .is_some_and(|r| !r.is_null());
    let metadata = object.and_then(|o| o.get("metadata"));
    let reserved = [
        request.name.as_deref(),
        metadata.and_then(|m| m.get("name")).and_then(Value::as_str),
        metadata
            .and_then(|m| m.get("generateName"))
            .and_then(Value::as_str),
    ]
    .into_iter()
    .flatten()
    .any(|name| name.starts_with(toolgate_k8s::names::APPROVAL_NAME_PREFIX));
    if !is_request && !reserved {
        return Ok(());
    }
    let writer = request
        .user_info
        .as_ref()
        .and_then(|u| u.username.as_deref())
        .unwrap_or_default();
    if writer == controller {
        Ok(())
    } else {
        Err(WebhookError::RequestNotFromController {
            writer: if writer.is_empty() {
                "an unidentified writer".into()
            } else {
                writer.to_owned()
            },
            controller: controller.to_owned(),
        })
    }
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
