//! The one validation of toolgate's custom resources, in Rust.
//!
//! The admission webhook calls these functions on every write; the
//! controller calls them on what it reads, so an object that reached the
//! cluster without the webhook is judged by the same rules. The CEL rules
//! on the CRDs (see [`crd`](crate::crd)) restate the Approval rules for the
//! API server itself, as defence in depth where the webhook is not
//! installed.

use serde_json::Value;
use toolgate_policy::{CompiledPolicy, PolicyError, PolicySpec};

use crate::crd::{ApprovalSpec, Decision};
use crate::error::K8sError;

/// Checks a PolicyProfile spec the way the controller and the sidecar will
/// load it: it must compile on its own (standing grants are judged
/// separately, one by one, so a bad grant never takes the profile down).
/// Returns the compiled policy so the caller need not compile it again.
///
/// `spec.candidate` must name another profile by a valid object name; that
/// the profile exists and compiles is the controller's to report, since it
/// may be applied after this one.
pub fn validate_profile(name: &str, spec: &PolicySpec) -> Result<CompiledPolicy, PolicyError> {
    if let Some(candidate) = &spec.candidate {
        toolgate_policy::load::validate_object_name("candidate.profile", &candidate.profile)?;
        if candidate.profile == name {
            return Err(PolicyError::InvalidValue {
                field: "candidate.profile".into(),
                message: "a profile cannot shadow itself".into(),
            });
        }
    }
    CompiledPolicy::compile(name, spec, &[])
}

/// The fields of an Approval spec the rules read.
///
/// `request` and `grant` are only tested for presence and compared between
/// the old and the new object, so they are kept as JSON: the webhook judges
/// a half-written object by the same rules as a complete one (the API
/// server's schema validation reports missing request fields by itself).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovalFields {
    /// `spec.request`, when set.
    pub request: Option<Value>,
    /// `spec.grant`, when set.
    pub grant: Option<Value>,
    /// `spec.decision`, when set.
    pub decision: Option<Decision>,
    /// `spec.decidedBy`, when set.
    pub decided_by: Option<String>,
    /// `spec.decidedByGroups`, when set.
    pub decided_by_groups: Option<Vec<String>>,
}

impl From<&ApprovalSpec> for ApprovalFields {
    fn from(spec: &ApprovalSpec) -> Self {
        // Serializing the derived types cannot fail; `Null` would only make
        // the field count as unset.
        let json = |v: Option<Value>| v.filter(|v| !v.is_null());
        Self {
            request: json(
                spec.request
                    .as_ref()
                    .and_then(|r| serde_json::to_value(r).ok()),
            ),
            grant: json(
                spec.grant
                    .as_ref()
                    .and_then(|g| serde_json::to_value(g).ok()),
            ),
            decision: spec.decision,
            decided_by: spec.decided_by.clone(),
            decided_by_groups: spec.decided_by_groups.clone(),
        }
    }
}

/// Who wrote an Approval, as the API server authenticated them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    /// Authenticated username; `None` or empty: nobody, and a decision
    /// cannot be attributed.
    pub username: Option<String>,
    /// Groups the API server authenticated the user in.
    pub groups: Vec<String>,
}

/// Checks an Approval write: `new` against the stored `old` spec (UPDATE)
/// and the authenticated `writer`.
///
/// - exactly one of `spec.request` and `spec.grant`, and on update the same
///   one as before (the kind is immutable), with a request unchanged;
/// - `decidedBy` and `decidedByGroups` only with a decision;
/// - a decision being made now (none in `old`) names the writer as
///   `decidedBy`, and only groups the writer is authenticated in
///   (fails closed when the writer has no username);
/// - once decided, the decision, request, grant and decider are final.
///
/// `writer` is `None` only where there is no write to attribute: the
/// controller judging an object it read back (the attribution was checked
/// when the object was admitted).
pub fn validate_approval(
    old: Option<&ApprovalFields>,
    new: &ApprovalFields,
    writer: Option<&Requester>,
) -> Result<(), K8sError> {
    match (new.request.is_some(), new.grant.is_some()) {
        (true, false) | (false, true) => {}
        (true, true) => {
            return Err(invalid(
                "spec",
                "set exactly one of spec.request (answer one escalated call) or spec.grant (a standing grant), not both",
            ));
        }
        (false, false) => {
            return Err(invalid(
                "spec",
                "set exactly one of spec.request (answer one escalated call) or spec.grant (a standing grant)",
            ));
        }
    }
    // Its kind (a request answering one call, or a standing grant) is fixed
    // at creation: a pending request turned into a grant would become a
    // standing permission nobody could decide as a request. A request's
    // call, written by the controller from the database, never changes.
    if let Some(old) = old {
        let kind = |f: &ApprovalFields| (f.request.is_some(), f.grant.is_some());
        if kind(old) != kind(new) {
            let field = if old.request.is_some() != new.request.is_some() {
                "spec.request"
            } else {
                "spec.grant"
            };
            return Err(K8sError::ApprovalImmutable {
                field: field.into(),
                message: "an Approval stays a request or a grant: spec.request and spec.grant \
                          cannot be added or removed; create a new Approval instead"
                    .into(),
            });
        }
        if old.request.is_some() && new.request != old.request {
            return Err(K8sError::ApprovalImmutable {
                field: "spec.request".into(),
                message: "spec.request is immutable (it mirrors the database row)".into(),
            });
        }
    }
    if new.decision.is_none() {
        let set = [
            ("decidedBy", new.decided_by.is_some()),
            ("decidedByGroups", new.decided_by_groups.is_some()),
        ];
        if let Some((key, _)) = set.into_iter().find(|(_, set)| *set) {
            return Err(invalid(
                &format!("spec.{key}"),
                "is recorded with a decision; set spec.decision in the same write",
            ));
        }
    }
    let old_decision = old.and_then(|o| o.decision);
    // A decision being made now must name the user the API server
    // authenticated, and only groups it authenticated them in, so the
    // controller's approvers check compares real identities rather than
    // whatever a writer typed.
    if let (Some(_), None, Some(writer)) = (new.decision, old_decision, writer) {
        check_decider(new, writer)?;
    }
    let (Some(old), Some(old_decision)) = (old, old_decision) else {
        return Ok(());
    };
    if new.decision != Some(old_decision) {
        let now = new
            .decision
            .map_or_else(|| "removed".to_owned(), |d| format!("changed to \"{d}\""));
        return Err(K8sError::ApprovalImmutable {
            field: "spec.decision".into(),
            message: format!(
                "the approval was already resolved as \"{old_decision}\" and cannot be {now}; create a new Approval instead"
            ),
        });
    }
    let unchanged = [
        ("request", new.request == old.request),
        ("grant", new.grant == old.grant),
        ("decidedBy", new.decided_by == old.decided_by),
        (
            "decidedByGroups",
            new.decided_by_groups == old.decided_by_groups,
        ),
    ];
    if let Some((key, _)) = unchanged.into_iter().find(|(_, same)| !same) {
        return Err(K8sError::ApprovalImmutable {
            field: format!("spec.{key}"),
            message: "a resolved approval cannot be edited; create a new Approval instead".into(),
        });
    }
    Ok(())
}

/// A new decision's `decidedBy` must be the authenticated username and its
/// `decidedByGroups` (optional) a subset of the authenticated groups.
fn check_decider(new: &ApprovalFields, writer: &Requester) -> Result<(), K8sError> {
    let Some(user) = writer.username.as_deref().filter(|u| !u.is_empty()) else {
        return Err(invalid(
            "spec.decision",
            "the admission request names no authenticated user, so the decision cannot be attributed",
        ));
    };
    let decided_by = new.decided_by.as_deref();
    if decided_by != Some(user) {
        return Err(invalid(
            "spec.decidedBy",
            &format!(
                "must be the user making this decision (`{user}`), got {}; `kubectl toolgate approve` sets it",
                decided_by.map_or_else(|| "nothing".to_owned(), |d| format!("`{d}`"))
            ),
        ));
    }
    let groups = new.decided_by_groups.as_deref().unwrap_or_default();
    for (i, name) in groups.iter().enumerate() {
        if !writer.groups.iter().any(|g| g == name) {
            return Err(invalid(
                &format!("spec.decidedByGroups[{i}]"),
                &format!("`{user}` is not authenticated in group `{name}`"),
            ));
        }
    }
    Ok(())
}

/// Reads the [`ApprovalFields`] of an Approval `spec` given as JSON (the
/// webhook's view), naming the field whose shape is wrong. `null` counts as
/// unset, as the API server treats it.
pub fn approval_fields(spec: &serde_json::Map<String, Value>) -> Result<ApprovalFields, K8sError> {
    let get = |key: &str| spec.get(key).filter(|v| !v.is_null());
    let decision = match get("decision") {
        None => None,
        Some(value) => Some(
            value
                .as_str()
                .and_then(Decision::from_wire)
                .ok_or_else(|| {
                    let names: Vec<&str> = Decision::ALL.iter().map(|d| d.as_str()).collect();
                    invalid(
                        "spec.decision",
                        &format!("must be one of {}; got {value}", names.join(", ")),
                    )
                })?,
        ),
    };
    let decided_by = match get("decidedBy") {
        None => None,
        Some(value) => Some(
            value
                .as_str()
                .ok_or_else(|| invalid("spec.decidedBy", "must be a string"))?
                .to_owned(),
        ),
    };
    let decided_by_groups = match get("decidedByGroups") {
        None => None,
        Some(value) => {
            let list = value
                .as_array()
                .ok_or_else(|| invalid("spec.decidedByGroups", "must be a list of group names"))?;
            let mut groups = Vec::with_capacity(list.len());
            for (i, group) in list.iter().enumerate() {
                let name = group.as_str().ok_or_else(|| {
                    invalid(&format!("spec.decidedByGroups[{i}]"), "must be a string")
                })?;
                groups.push(name.to_owned());
            }
            Some(groups)
        }
    };
    Ok(ApprovalFields {
        request: get("request").cloned(),
        grant: get("grant").cloned(),
        decision,
        decided_by,
        decided_by_groups,
    })
}

fn invalid(field: &str, message: &str) -> K8sError {
    K8sError::InvalidApproval {
        field: field.into(),
        message: message.into(),
    }
}

/// One entry of a profile's `spec.approvals.approvers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver<'a> {
    /// `user:NAME`, or a bare `NAME`: an authenticated username.
    User(&'a str),
    /// `group:NAME`: a group the API server authenticated the decider in.
    Group(&'a str),
}

impl<'a> Approver<'a> {
    /// Reads one entry. A bare name is a user, so Kubernetes usernames that
    /// contain colons (`system:serviceaccount:ns:sa`) keep working.
    pub fn parse(entry: &'a str) -> Self {
        if let Some(group) = entry.strip_prefix("group:") {
            Approver::Group(group)
        } else {
            Approver::User(entry.strip_prefix("user:").unwrap_or(entry))
        }
    }
}

/// Whether a decider (authenticated `user`, in `groups`) may answer for a
/// profile whose `spec.approvals.approvers` is `approvers`: anyone when the
/// list is empty, otherwise a listed user or a member of a listed group
/// (exact, case-sensitive; an unset user is nobody). `user` and `groups`
/// come from `spec.decidedBy` / `spec.decidedByGroups`, which
/// [`validate_approval`] pins to what the API server authenticated. The one
/// rule of the controller (which records a decision only if it holds) and
/// the validating webhook (which refuses a decision that does not).
pub fn approver_allowed(approvers: &[String], user: Option<&str>, groups: &[String]) -> bool {
    if approvers.is_empty() {
        return true;
    }
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return false;
    };
    approvers.iter().any(|entry| match Approver::parse(entry) {
        Approver::User(name) => name == user,
        Approver::Group(name) => groups.iter().any(|g| g == name),
    })
}
