//! `spec.candidate`: the PolicyProfile a profile shadows. The controller
//! reads it from the same namespace, compiles its spec with this profile's
//! grants (the grants a sidecar would apply to both) and signs it into the
//! bundle's candidate section; sidecars then evaluate every call under it
//! too and never enforce it. A candidate that is missing or does not
//! compile is left out of the bundle, and the status says why.

use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use toolgate_policy::{CompiledPolicy, Grant, PolicySpec};

use super::rejection_message;
use super::status::Shadowing;
use crate::context::Context;
use crate::crd::{CandidateStatus, PolicyProfile};
use crate::error::ControllerError;

/// A candidate ready to be signed into a bundle.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The candidate profile's name (the prefix of its version).
    pub name: String,
    /// Its spec, without a candidate of its own.
    pub spec: PolicySpec,
    /// Its policy version with the bundle's grants.
    pub version: String,
}

/// What `spec.candidate` resolved to.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// Goes into the bundle.
    Signed(Box<Candidate>),
    /// Stays out of it (the status says why).
    Unsigned(Shadowing),
}

impl Resolved {
    /// The candidate to sign, if any.
    pub fn signed(&self) -> Option<&Candidate> {
        match self {
            Resolved::Signed(c) => Some(c),
            Resolved::Unsigned(_) => None,
        }
    }
}

/// Reads and compiles candidate `name` of namespace `ns` with `grants`.
pub async fn resolve(
    ctx: &Context,
    ns: &str,
    name: &str,
    grants: &[Grant],
) -> Result<Resolved, ControllerError> {
    let api: Api<PolicyProfile> = Api::namespaced(ctx.client.clone(), ns);
    let Some(profile) = api.get_opt(name).await? else {
        return Ok(unsigned(
            name,
            "CandidateNotFound",
            format!("no PolicyProfile {ns}/{name}"),
        ));
    };
    if profile.metadata.deletion_timestamp.is_some() {
        return Ok(unsigned(
            name,
            "CandidateNotFound",
            format!("PolicyProfile {ns}/{name} is being deleted"),
        ));
    }
    Ok(compile(name, profile.spec.clone().into(), grants))
}

/// Compiles a candidate's spec (its own `candidate` dropped: only one
/// level is shadowed) with the bundle's grants.
pub fn compile(name: &str, mut spec: PolicySpec, grants: &[Grant]) -> Resolved {
    spec.candidate = None;
    match CompiledPolicy::compile(name, &spec, grants) {
        Ok(policy) => Resolved::Signed(Box::new(Candidate {
            name: name.to_owned(),
            version: policy.version().version.clone(),
            spec,
        })),
        Err(e) => unsigned(name, "CandidateInvalid", rejection_message(&e)),
    }
}

fn unsigned(name: &str, reason: &'static str, message: String) -> Resolved {
    Resolved::Unsigned(Shadowing::Unsigned {
        profile: name.to_owned(),
        reason,
        message,
    })
}

/// The counts to write: `fresh`, unless the status already holds counts of
/// the same candidate version read less than `every` before `now` and the
/// candidate still agrees (or still disagrees): then those. Every status
/// write wakes the reconcile again, so counts that follow each heartbeat
/// would reconcile the profile as often as its pods beat.
pub fn throttled(
    previous: Option<&CandidateStatus>,
    mut fresh: CandidateStatus,
    now: Timestamp,
    every: SignedDuration,
) -> CandidateStatus {
    let recent = |p: &CandidateStatus| {
        p.counted_at
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .is_some_and(|at| at <= now && now.duration_since(at) < every)
    };
    match previous {
        Some(p)
            if p.profile == fresh.profile
                && p.version == fresh.version
                && (p.disagreements > 0) == (fresh.disagreements > 0)
                && recent(p) =>
        {
            p.clone()
        }
        _ => {
            fresh.counted_at = Some(now.to_string());
            fresh
        }
    }
}

/// The profiles of `profiles` that shadow `changed` (same namespace,
/// `spec.candidate.profile` naming it): a change to a candidate must
/// re-sign the bundles that carry it.
pub fn shadowing(
    profiles: impl IntoIterator<Item = std::sync::Arc<PolicyProfile>>,
    changed: &PolicyProfile,
) -> Vec<kube::runtime::reflector::ObjectRef<PolicyProfile>> {
    use kube::ResourceExt;
    let (Some(ns), name) = (changed.namespace(), changed.name_any()) else {
        return Vec::new();
    };
    profiles
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.spec.candidate.as_ref().is_some_and(|c| c.profile == name)
        })
        .map(|p| kube::runtime::reflector::ObjectRef::from_obj(p.as_ref()))
        .collect()
}
