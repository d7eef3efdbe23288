//! Shadow mode: the bundle's candidate policy decides every call beside
//! the active one, and is never enforced. Its verdict is recorded in the
//! decision's `message` (member `shadow`, plus `shadow_changed` when it
//! differs, which the chain covers and `toolgate audit log
//! --shadow-changed` selects by) and counted in
//! `toolgate_shadow_decisions_total`.
//!
//! The candidate sees the same call at the same instant as the same
//! subject. It sees the flow labels the run carries under the active
//! policy, by name: labels only the candidate declares are never set in
//! shadow mode (the run is labelled by what is enforced).

use toolgate_policy::{Context, LabelSet, Verdict};
use toolgate_store::ShadowOutcome;

use crate::labels::truncate;
use crate::metrics::Metrics;
use crate::{AuthorizeRequest, Enforced};

/// The candidate's verdict on a call the active policy gave `active`;
/// `None` without a candidate.
pub(super) fn shadow_of(
    enforced: &Enforced,
    req: &AuthorizeRequest,
    active: &Verdict,
    context: &Context<'_>,
) -> Option<ShadowOutcome> {
    let candidate = enforced.candidate.as_ref()?;
    let labels = if context.labels.is_empty() {
        LabelSet::EMPTY
    } else {
        candidate.flow_labels(enforced.policy.flow_label_names(context.labels))
    };
    let verdict = candidate.evaluate(&req.call(), &Context { labels, ..*context });
    // Both by what the policy judged, whatever their enforcement modes.
    let (decision, reason, rule) = verdict.judged();
    Some(ShadowOutcome {
        candidate_version: candidate.version().version.clone(),
        active: active.judged().0,
        verdict: decision,
        reason,
        rule: rule.map(|r| truncate(r, 512).to_owned()),
    })
}

/// Counts a shadowed decision.
pub(super) fn count(
    metrics: &Metrics,
    profile: &str,
    active_version: &str,
    shadow: &ShadowOutcome,
) {
    metrics
        .shadow_decisions
        .with_label_values(&[profile, shadow.active.as_str(), shadow.verdict.as_str()])
        .inc();
    metrics.shadow_tallies.record(active_version, shadow);
}
