//! Who may decide: a write that makes an Approval's decision is refused
//! unless its decider is one of the approvers of the profile the approval
//! answers for — the rule the controller applies before it records a
//! decision ([`toolgate_k8s::approver_allowed`]). Checked here too because
//! a decision, once admitted, is immutable: one the controller then refuses
//! would stay on the object, and the real approvers could not answer until
//! the approval expired.
//!
//! The profile: for a request, PolicyProfile `{profile}` (the prefix of
//! `spec.request.policyVersion`) in the namespace `spec.request.tenant`, read
//! from the stored object (`spec.request` is immutable and written by the
//! controller from the database row); for a standing grant,
//! `spec.grant.profile` in the Approval's own namespace. The decider:
//! `spec.decidedBy` and `spec.decidedByGroups`, which
//! [`validate_approval`](toolgate_k8s::validate_approval) has already pinned
//! to the user the API server authenticated. Fails closed: no profile named,
//! a tenant that is no namespace, a profile not found or not readable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::OnceCell;
use toolgate_k8s::approver_allowed;
use toolgate_k8s::crd::PolicyProfile;
use toolgate_k8s::names::is_namespace_name;

use crate::WebhookError;
use crate::review::AdmissionRequest;

/// How long reading a PolicyProfile may take before the decision is refused.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The profile whose approvers judge a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Namespace of the PolicyProfile.
    pub namespace: String,
    /// Name of the PolicyProfile.
    pub profile: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PolicyProfile {}/{}", self.namespace, self.profile)
    }
}

/// Where approvers lists are read from.
#[derive(Clone)]
pub enum Profiles {
    /// The Kubernetes API, with a client inferred (in-cluster or
    /// `KUBECONFIG`) at the first decision; a failure is retried next time.
    Kube(Arc<OnceCell<kube::Client>>),
    /// A fixed map from (namespace, profile) to its approvers (tests, benches).
    Fixed(Arc<BTreeMap<(String, String), Vec<String>>>),
}

impl Profiles {
    /// Reads profiles from the Kubernetes API.
    pub fn kube() -> Self {
        Self::Kube(Arc::default())
    }

    /// Profiles from a list of `((namespace, name), approvers)`.
    pub fn fixed(profiles: impl IntoIterator<Item = ((String, String), Vec<String>)>) -> Self {
        Self::Fixed(Arc::new(profiles.into_iter().collect()))
    }

    /// The approvers of `target`; `None` when the profile does not exist.
    pub async fn approvers(&self, target: &Target) -> Result<Option<Vec<String>>, WebhookError> {
        let unavailable = |message: String| WebhookError::ApproversUnavailable {
            profile: target.to_string(),
            message,
        };
        match self {
            Self::Fixed(map) => Ok(map
                .get(&(target.namespace.clone(), target.profile.clone()))
                .cloned()),
            Self::Kube(cell) => {
                let client = cell
                    .get_or_try_init(kube::Client::try_default)
                    .await
                    .map_err(|e| unavailable(format!("no Kubernetes client: {e}")))?;
                let api: kube::Api<PolicyProfile> =
                    kube::Api::namespaced(client.clone(), &target.namespace);
                let profile = tokio::time::timeout(READ_TIMEOUT, api.get_opt(&target.profile))
                    .await
                    .map_err(|_| unavailable(format!("no answer in {READ_TIMEOUT:?}")))?
                    .map_err(|e| unavailable(e.to_string()))?;
                Ok(profile.map(|p| {
                    p.spec
                        .approvals
                        .as_ref()
                        .map(|a| a.approvers.clone())
                        .unwrap_or_default()
                }))
            }
        }
    }
}

impl std::fmt::Debug for Profiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kube(_) => f.write_str("Profiles::Kube"),
            Self::Fixed(map) => f.debug_tuple("Profiles::Fixed").field(map).finish(),
        }
    }
}

impl PartialEq for Profiles {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Kube(_), Self::Kube(_)) => true,
            (Self::Fixed(a), Self::Fixed(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Profiles {}

/// The profile whose approvers judge the decision `request` makes, or
/// `None` when it makes none (no decision, or one already stored: its
/// immutability is [`validate_approval`](toolgate_k8s::validate_approval)'s
/// to judge). Call after the shape checks of
/// [`validate::approval`](crate::validate::approval) passed.
pub fn decision_target(request: &AdmissionRequest) -> Result<Option<Target>, WebhookError> {
    let spec_of = |object: Option<&Value>| object.and_then(|o| o.get("spec")).cloned();
    let new = match request.operation.as_str() {
        "CREATE" | "UPDATE" => spec_of(request.object.as_ref()).unwrap_or_default(),
        _ => return Ok(None),
    };
    let old = spec_of(request.old_object.as_ref()).filter(|_| request.operation == "UPDATE");
    let decided = |spec: &Value| spec.get("decision").is_some_and(|d| !d.is_null());
    if !decided(&new) || old.as_ref().is_some_and(decided) {
        return Ok(None);
    }
    // The stored request when there is one: it is what the controller wrote.
    let spec = old.as_ref().unwrap_or(&new);
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let refused = |field: &str, message: String| WebhookError::ApproverNotAllowed {
        field: field.into(),
        message,
    };
    if let Some(req) = spec.get("request").filter(|r| r.is_object()) {
        let version = text(req, "policyVersion").unwrap_or_default();
        let profile = version
            .split_once('@')
            .map(|(p, _)| p.to_owned())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                refused(
                    "spec.decision",
                    format!(
                        "policy version `{version}` names no profile, so its approvers cannot \
                         be checked; the decision is refused"
                    ),
                )
            })?;
        let tenant = text(req, "tenant").unwrap_or_default();
        if !is_namespace_name(&tenant) {
            return Err(refused(
                "spec.decision",
                format!(
                    "tenant `{tenant}` is not a namespace, so the approvers of its PolicyProfile \
                     {profile} cannot be checked; the decision is refused"
                ),
            ));
        }
        return Ok(Some(Target {
            namespace: tenant,
            profile,
        }));
    }
    let grant = spec.get("grant").unwrap_or(&Value::Null);
    let profile = text(grant, "profile").ok_or_else(|| {
        refused(
            "spec.grant.profile",
            "a decided grant must name its profile".into(),
        )
    })?;
    let namespace = request
        .namespace
        .clone()
        .or_else(|| {
            request
                .object
                .as_ref()
                .and_then(|o| text(o.get("metadata")?, "namespace"))
        })
        .unwrap_or_default();
    if !is_namespace_name(&namespace) {
        return Err(refused(
            "metadata.namespace",
            format!("`{namespace}` is not a namespace; the decision is refused"),
        ));
    }
    Ok(Some(Target { namespace, profile }))
}

/// Judges the decider of `request` (its new `spec.decidedBy` and
/// `spec.decidedByGroups`) against `approvers`, the list of `target`
/// (`None`: the profile was not found, refused).
pub fn judge(
    request: &AdmissionRequest,
    target: &Target,
    approvers: Option<&[String]>,
) -> Result<(), WebhookError> {
    let spec = request
        .object
        .as_ref()
        .and_then(|o| o.get("spec"))
        .unwrap_or(&Value::Null);
    let user = spec.get("decidedBy").and_then(Value::as_str);
    let groups: Vec<String> = spec
        .get("decidedByGroups")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let Some(approvers) = approvers else {
        return Err(WebhookError::ApproverNotAllowed {
            field: "spec.decision".into(),
            message: format!(
                "{target} not found, so its approvers cannot be checked; the decision is refused"
            ),
        });
    };
    if approver_allowed(approvers, user, &groups) {
        return Ok(());
    }
    let who = match (user, groups.is_empty()) {
        (None, _) => "an unset spec.decidedBy".to_owned(),
        (Some(u), true) => format!("`{u}`"),
        (Some(u), false) => format!("`{u}` (groups {})", groups.join(", ")),
    };
    Err(WebhookError::ApproverNotAllowed {
        field: "spec.decision".into(),
        message: format!(
            "{who} is not in spec.approvals.approvers of {target} ({}); only they may decide",
            approvers.join(", ")
        ),
    })
}

/// The whole check: no decision made passes; otherwise the target's
/// approvers are read from `profiles` and the decider judged.
pub async fn check(request: &AdmissionRequest, profiles: &Profiles) -> Result<(), WebhookError> {
    let Some(target) = decision_target(request)? else {
        return Ok(());
    };
    let approvers = profiles.approvers(&target).await?;
    judge(request, &target, approvers.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::UserInfo;
    use serde_json::json;

    fn update(new: Value, old: Value) -> AdmissionRequest {
        AdmissionRequest {
            uid: "u".into(),
            name: Some("apr-1".into()),
            namespace: Some("toolgate-system".into()),
            operation: "UPDATE".into(),
            object: Some(new),
            old_object: Some(old),
            dry_run: None,
            user_info: Some(UserInfo {
                username: Some("mallory".into()),
                groups: vec![],
            }),
        }
    }

    fn req() -> Value {
        json!({"invocationId": "i", "tenant": "agents", "policyVersion": "safe-coding@sha256:ab"})
    }

    fn decided(by: &str, groups: &[&str]) -> Value {
        json!({"spec": {"request": req(), "decision": "approved", "decidedBy": by,
                        "decidedByGroups": groups}})
    }

    fn list(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_target_is_the_stored_request_profile_in_its_tenant() {
        let pending = json!({"spec": {"request": req()}});
        let r = update(decided("mallory", &[]), pending.clone());
        assert_eq!(
            decision_target(&r).unwrap(),
            Some(Target {
                namespace: "agents".into(),
                profile: "safe-coding".into()
            })
        );
        // No new decision: nothing to judge (already decided, or none).
        let r = update(decided("mallory", &[]), decided("carol", &[]));
        assert_eq!(decision_target(&r).unwrap(), None);
        let r = update(pending.clone(), pending.clone());
        assert_eq!(decision_target(&r).unwrap(), None);
        // Fails closed on a request naming no profile or no namespace.
        for bad in [
            json!({"invocationId": "i", "tenant": "agents", "policyVersion": "v1"}),
            json!({"invocationId": "i", "tenant": "../x", "policyVersion": "p@v"}),
        ] {
            let r = update(
                json!({"spec": {"request": bad, "decision": "denied", "decidedBy": "m"}}),
                json!({"spec": {"request": bad}}),
            );
            let err = decision_target(&r).unwrap_err();
            assert_eq!(err.code(), "approver_not_allowed", "{err}");
        }
        // A grant answers to its profile in the Approval's namespace.
        let grant = json!({"profile": "safe-coding", "tool": "bash"});
        let mut r = update(
            json!({"spec": {"grant": grant, "decision": "approved", "decidedBy": "m"}}),
            json!({"spec": {"grant": grant}}),
        );
        r.namespace = Some("agents".into());
        assert_eq!(
            decision_target(&r).unwrap().unwrap().to_string(),
            "PolicyProfile agents/safe-coding"
        );
    }

    #[test]
    fn only_listed_users_and_groups_may_decide() {
        let pending = json!({"spec": {"request": req()}});
        let target = Target {
            namespace: "agents".into(),
            profile: "safe-coding".into(),
        };
        let approvers = list(&["group:platform-oncall", "user:carol"]);
        let judged =
            |by: &str, groups: &[&str], approvers: Option<&[String]>| -> Result<(), WebhookError> {
                judge(
                    &update(decided(by, groups), pending.clone()),
                    &target,
                    approvers,
                )
            };
        judged("carol", &[], Some(&approvers)).unwrap();
        judged("dave", &["platform-oncall"], Some(&approvers)).unwrap();
        let err = judged("mallory", &["helpers"], Some(&approvers)).unwrap_err();
        assert_eq!(
            (err.code(), err.field(), err.http_status()),
            ("approver_not_allowed", Some("spec.decision"), 403)
        );
        assert!(
            err.to_string().contains("`mallory` (groups helpers)"),
            "{err}"
        );
        assert!(err.to_string().contains("agents/safe-coding"), "{err}");
        // An empty list lets anyone RBAC lets write decide, as in the controller.
        judged("mallory", &[], Some(&[])).unwrap();
        // A profile that is not there: refused.
        let err = judged("carol", &[], None).unwrap_err();
        assert!(err.to_string().contains("not found"), "{err}");
    }

    #[tokio::test]
    async fn check_reads_the_profile_and_fails_closed() {
        let pending = json!({"spec": {"request": req()}});
        let profiles = Profiles::fixed([(
            ("agents".to_owned(), "safe-coding".to_owned()),
            list(&["carol"]),
        )]);
        check(&update(decided("carol", &[]), pending.clone()), &profiles)
            .await
            .unwrap();
        let err = check(&update(decided("mallory", &[]), pending.clone()), &profiles)
            .await
            .unwrap_err();
        assert_eq!(err.code(), "approver_not_allowed");
        let err = check(
            &update(decided("carol", &[]), pending.clone()),
            &Profiles::fixed([]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), "approver_not_allowed");
        // Not deciding needs no profile.
        check(&update(pending.clone(), pending), &Profiles::fixed([]))
            .await
            .unwrap();
    }
}
