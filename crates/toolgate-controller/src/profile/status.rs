//! Profile status, pure: the conditions and fields a reconcile writes, for
//! a published bundle ([`ready_status`]) or a rejected spec
//! ([`invalid_status`]).

use jiff::Timestamp;
use toolgate_policy::PolicyError;

use super::{PublishedBundle, configmap_name};
use crate::crd::{CandidateStatus, Condition, ConditionType, FleetStatus, PolicyProfileStatus};

/// A condition, keeping `lastTransitionTime` from `previous` when the
/// status did not change.
pub fn condition(
    previous: &[Condition],
    type_: ConditionType,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" };
    condition_of(previous, type_, status, reason, message, generation, now)
}

fn condition_of(
    previous: &[Condition],
    type_: ConditionType,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.is(type_) && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.to_string());
    Condition {
        type_: type_.as_str().into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// Everything the status of a successfully reconciled profile is made of.
#[derive(Debug, Clone)]
pub struct Published<'a> {
    /// The bundle now in the ConfigMap.
    pub bundle: &'a PublishedBundle,
    /// Number of grants compiled in.
    pub grants: usize,
    /// Fleet counts.
    pub fleet: FleetStatus,
    /// Stale pods, for the `Stale` message.
    pub stale_pods: Vec<String>,
    /// What became of `spec.candidate`, when the spec names one.
    pub shadowing: Option<Shadowing>,
    /// The analysis warnings of this generation's spec.
    pub warnings: Vec<String>,
}

/// What became of a profile's `spec.candidate` in a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shadowing {
    /// Signed into the bundle; the fleet's counts so far.
    Signed(CandidateStatus),
    /// Not signed, so nothing is shadowed: the bundle went out without it.
    Unsigned {
        /// The candidate profile's name.
        profile: String,
        /// `CandidateNotFound` or `CandidateInvalid`.
        reason: &'static str,
        /// Why.
        message: String,
    },
}

impl Shadowing {
    /// The `CandidateDisagrees` condition and `status.candidate`.
    fn status(
        &self,
        previous: &[Condition],
        generation: Option<i64>,
        now: Timestamp,
    ) -> (Condition, CandidateStatus) {
        let (status, reason, message, candidate) = match self {
            Shadowing::Signed(c) => {
                let version = c.version.as_deref().unwrap_or("?");
                let (status, reason, message) = if c.disagreements > 0 {
                    let top: Vec<String> = c
                        .transitions
                        .iter()
                        .map(|t| format!("{}→{} {}", t.from, t.to, t.count))
                        .collect();
                    (
                        "True",
                        "Disagrees",
                        format!(
                            "candidate {version} decided {} of {} shadowed call(s) otherwise: {}",
                            c.disagreements,
                            c.shadowed,
                            top.join(", ")
                        ),
                    )
                } else {
                    (
                        "False",
                        "Agrees",
                        format!(
                            "candidate {version} agreed on all {} shadowed call(s)",
                            c.shadowed
                        ),
                    )
                };
                (status, reason, message, c.clone())
            }
            Shadowing::Unsigned {
                profile,
                reason,
                message,
            } => (
                "Unknown",
                *reason,
                format!("candidate {profile} is not shadowed: {message}"),
                CandidateStatus {
                    profile: profile.clone(),
                    ..CandidateStatus::default()
                },
            ),
        };
        let condition = condition_of(
            previous,
            ConditionType::CandidateDisagrees,
            status,
            reason,
            message,
            generation,
            now,
        );
        (condition, candidate)
    }
}

/// Status after a successful reconcile: `Valid=True/Compiled`,
/// `Ready=True/Published`, `Stale` per the fleet.
pub fn ready_status(
    previous: &PolicyProfileStatus,
    name: &str,
    published: &Published<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> PolicyProfileStatus {
    let b = published.bundle;
    let prev = &previous.conditions;
    let shadowing = published
        .shadowing
        .as_ref()
        .map(|s| s.status(prev, generation, now));
    let stale = published.fleet.stale > 0;
    let stale_message = if stale {
        let mut pods = published.stale_pods.clone();
        let more = pods.len().saturating_sub(5);
        pods.truncate(5);
        let suffix = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!(
            "{} of {} pods are not on {}: {}{suffix}",
            published.fleet.stale,
            published.fleet.total,
            b.version,
            pods.join(", ")
        )
    } else {
        format!(
            "{} of {} pods run {}",
            published.fleet.current, published.fleet.total, b.version
        )
    };
    PolicyProfileStatus {
        version: Some(b.version.clone()),
        bundle_digest: Some(b.digest.clone()),
        bundle_ref: Some(configmap_name(name)),
        sequence: Some(b.sequence),
        issued_at: Some(b.issued_at.to_string()),
        expires_at: Some(b.expires_at.to_string()),
        grants: Some(published.grants as u32),
        observed_generation: generation,
        fleet: Some(published.fleet),
        candidate: shadowing.as_ref().map(|(_, c)| c.clone()),
        warnings: published.warnings.clone(),
        conditions: vec![
            condition(
                prev,
                ConditionType::Valid,
                true,
                "Compiled",
                format!("spec compiles as {}", b.version),
                generation,
                now,
            ),
            condition(
                prev,
                ConditionType::Ready,
                true,
                "Published",
                format!(
                    "bundle sequence {} published in ConfigMap {}",
                    b.sequence,
                    configmap_name(name)
                ),
                generation,
                now,
            ),
            condition(
                prev,
                ConditionType::Stale,
                stale,
                if stale { "PodsBehind" } else { "AllCurrent" },
                stale_message,
                generation,
                now,
            ),
        ]
        .into_iter()
        .chain(shadowing.map(|(c, _)| c))
        .collect(),
    }
}

/// The message of `Valid=False`: error code, field and text.
pub fn rejection_message(err: &PolicyError) -> String {
    match err.field() {
        Some(field) => format!("{} at {field}: {err}", err.code()),
        None => format!("{}: {err}", err.code()),
    }
}

/// What an invalid profile still serves, for its status.
#[derive(Debug, Clone)]
pub enum Serving<'a> {
    /// The verified last good bundle (maybe just re-signed) is in the ConfigMap.
    LastGood {
        /// The bundle now in the ConfigMap.
        bundle: &'a PublishedBundle,
        /// Number of grants compiled into it.
        grants: usize,
    },
    /// Nothing a sidecar would accept: `reason` is `NoValidBundle` (nothing
    /// published) or `LastGoodUnusable` (the ConfigMap's bundle failed
    /// verification).
    Nothing {
        /// `Ready` reason.
        reason: &'static str,
        /// `Ready` message.
        message: String,
    },
}

/// Status after a rejected spec: `Valid=False/InvalidSpec`, and `Ready`
/// says what is still served ([`Serving`]): `Ready=True/ServingLastGood`
/// with the served bundle's version, sequence and expiry in both the
/// message and the status fields, or `Ready=False`. The fleet and the
/// `Stale` condition stay as they were.
pub fn invalid_status(
    previous: &PolicyProfileStatus,
    err: &PolicyError,
    serving: &Serving<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> PolicyProfileStatus {
    let prev = &previous.conditions;
    let mut status = previous.clone();
    status.observed_generation = generation;
    // Those were about a spec that is no longer the one observed.
    status.warnings.clear();
    if !matches!(serving, Serving::LastGood { .. }) {
        // Nothing served, so nothing is shadowed.
        status.candidate = None;
    }
    let gen_text = generation.map_or_else(String::new, |g| format!(" (generation {g})"));
    let ready = match serving {
        Serving::LastGood { bundle, grants } => {
            status.version = Some(bundle.version.clone());
            status.bundle_digest = Some(bundle.digest.clone());
            status.sequence = Some(bundle.sequence);
            status.issued_at = Some(bundle.issued_at.to_string());
            status.expires_at = Some(bundle.expires_at.to_string());
            status.grants = Some(u32::try_from(*grants).unwrap_or(u32::MAX));
            condition(
                prev,
                ConditionType::Ready,
                true,
                "ServingLastGood",
                format!(
                    "spec{gen_text} is invalid; serving last good {} as sequence {} until {} \
                     (re-signed before expiry while the spec stays invalid)",
                    bundle.version, bundle.sequence, bundle.expires_at
                ),
                generation,
                now,
            )
        }
        Serving::Nothing { reason, message } => condition(
            prev,
            ConditionType::Ready,
            false,
            reason,
            format!("spec{gen_text} is invalid; {message}"),
            generation,
            now,
        ),
    };
    let mut conditions = vec![
        condition(
            prev,
            ConditionType::Valid,
            false,
            "InvalidSpec",
            rejection_message(err),
            generation,
            now,
        ),
        ready,
    ];
    conditions.extend(
        previous
            .conditions
            .iter()
            .filter(|c| {
                c.is(ConditionType::Stale)
                    || (c.is(ConditionType::CandidateDisagrees)
                        && matches!(serving, Serving::LastGood { .. }))
            })
            .cloned(),
    );
    status.conditions = conditions;
    status
}
