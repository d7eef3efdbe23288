//! Why a call was escalated, read back from what the store already holds:
//! the escalating decision in the decision log (its reason, matched rule
//! and policy version; the approval row names it and was written at the
//! same instant), for a flow rule the labels it requires from the run's (or
//! pod's) flow labels with the decisions that set them, and the run's last
//! few decisions, masked as previews are.

use jiff::{SignedDuration, Timestamp};
use toolgate_policy::FlowScope;
use toolgate_store::{DecisionRecord, Store};

use crate::crd::{Escalation, FlowLabelCause, PastDecision};
use crate::error::ControllerError;

/// How many earlier decisions of the run an escalation carries.
pub const HISTORY: usize = 5;

/// How far back the run's history is read (the log is searched by time).
const HISTORY_WINDOW: SignedDuration = SignedDuration::from_hours(24);

/// How long the mirror waits for the escalating decision's record (most
/// are written in the background, just after the approval row) before it
/// creates the Approval without the why.
pub const WAIT_FOR_RECORD: SignedDuration = SignedDuration::from_secs(10);

/// The why of `row`'s escalation; `None` when the decision log does not
/// (yet) hold the escalating decision.
pub async fn escalation_of(
    store: &Store,
    row: &toolgate_store::Approval,
) -> Result<Option<Escalation>, ControllerError> {
    let decisions = store.decisions();
    let Some(decision) = decisions
        .at(&row.tenant, &row.decision_id, row.created_at)
        .await?
    else {
        return Ok(None);
    };
    let flow_labels = match decision.matched_rule.as_deref().and_then(flow_rule_labels) {
        Some(wanted) => label_causes(store, row, &wanted).await?,
        None => Vec::new(),
    };
    let since = row
        .created_at
        .checked_sub(HISTORY_WINDOW)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let mut earlier: Vec<DecisionRecord> = decisions
        .run_history(
            &row.tenant,
            &row.run_id,
            since,
            row.created_at,
            u32::try_from(HISTORY + 1).unwrap_or(u32::MAX),
        )
        .await?
        .into_iter()
        .filter(|d| d.decision_id != row.decision_id)
        .take(HISTORY)
        .collect();
    earlier.reverse();
    Ok(Some(Escalation {
        decision_id: decision.decision_id,
        reason: decision.reason,
        matched_rule: decision.matched_rule.map(|r| cut(&r, 1024)),
        flow_labels,
        history: earlier.iter().map(past).collect(),
    }))
}

/// The labels a flow rule's `matched_rule` requires (`flow:NAME when a+b`).
pub fn flow_rule_labels(matched_rule: &str) -> Option<Vec<String>> {
    toolgate_policy::flows::rule_name(matched_rule)?;
    let (_, when) = matched_rule.split_once(" when ")?;
    Some(
        when.split('+')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .take(toolgate_k8s::MAX_ESCALATION_LABELS)
            .map(str::to_owned)
            .collect(),
    )
}

/// Each wanted label with the decision that set it: on the run, or on the
/// pod that asked (`sidecar:NS/POD`) for a label the run does not carry.
async fn label_causes(
    store: &Store,
    row: &toolgate_store::Approval,
    wanted: &[String],
) -> Result<Vec<FlowLabelCause>, ControllerError> {
    let labels = store.flow_labels();
    let mut found = labels.of(&row.tenant, FlowScope::Run, &row.run_id).await?;
    let missing = |found: &[toolgate_store::FlowLabel]| {
        wanted.iter().any(|w| !found.iter().any(|f| &f.label == w))
    };
    if missing(&found)
        && let Some(pod) = pod_of(&row.requested_by)
    {
        for label in labels.of(&row.tenant, FlowScope::Pod, pod).await? {
            if !found.iter().any(|f| f.label == label.label) {
                found.push(label);
            }
        }
    }
    let mut causes = Vec::new();
    for label in found.into_iter().filter(|f| wanted.contains(&f.label)) {
        let setter = store
            .decisions()
            .at(&row.tenant, &label.decision_id, label.set_at)
            .await?;
        causes.push(FlowLabelCause {
            tool: setter.map(|d| cut(&mask(&d.tool), 512)),
            label: label.label,
            decision_id: label.decision_id,
            set_at: label.set_at.to_string(),
        });
    }
    Ok(causes)
}

/// The pod name of a sidecar identity, `sidecar:NAMESPACE/POD`.
fn pod_of(requested_by: &str) -> Option<&str> {
    let (_, pod) = requested_by.strip_prefix("sidecar:")?.split_once('/')?;
    (!pod.is_empty()).then_some(pod)
}

fn past(d: &DecisionRecord) -> PastDecision {
    PastDecision {
        at: d.created_at.to_string(),
        tool: cut(&mask(&d.tool), 512),
        verdict: cut(&d.verdict, 32),
        reason: cut(&d.reason, 64),
        matched_rule: d.matched_rule.as_deref().map(|r| cut(&mask(r), 1024)),
    }
}

/// `text` with secret-looking values masked, as an approval's preview is.
fn mask(text: &str) -> String {
    toolgate_policy::preview::preview(text)
}

/// At most `max` characters (the CRD's bounds).
fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_rule_names_its_labels() {
        assert_eq!(
            flow_rule_labels("flow:no-exfil when private+untrusted"),
            Some(vec!["private".to_owned(), "untrusted".to_owned()])
        );
        assert_eq!(flow_rule_labels("rules[2]: bash git push*"), None);
        assert_eq!(pod_of("sidecar:agents/pod-1"), Some("pod-1"));
        assert_eq!(pod_of("alice"), None);
        assert_eq!(
            mask("curl -H 'Authorization: Bearer abcdefghijkl'"),
            "curl -H 'Authorization: Bearer ****'"
        );
    }
}
