//! The decision log's `message` for a call the gate decided: what
//! enforcement would have answered when it only reports, the labels the
//! call set, what a shadowed candidate decided, the SHA-256 of its recorded
//! input, and which budget refused it. The chain hashes these bytes.

use toolgate_policy::{Reason, Verdict};
use toolgate_store::{DecisionMessage, ShadowOutcome, WouldHave};

use crate::labels::truncate;

/// The decision log's `message` for a verdict (see [`DecisionMessage`]):
/// what enforcement would have answered when it only reports, the labels
/// the call set, what a shadowed candidate decided, the SHA-256 of the
/// call's recorded input, and which budget refused the call.
pub(super) fn record_message(
    verdict: &Verdict,
    flow_labels_set: &[String],
    shadow: Option<&ShadowOutcome>,
    input_sha256: Option<&str>,
) -> Option<String> {
    message(verdict, flow_labels_set, shadow, input_sha256).to_text()
}

/// The message's members; [`DecisionMessage::to_text`] writes their bytes
/// (pinned by the store's tests).
fn message(
    verdict: &Verdict,
    flow_labels_set: &[String],
    shadow: Option<&ShadowOutcome>,
    input_sha256: Option<&str>,
) -> DecisionMessage {
    DecisionMessage {
        would: (!verdict.enforced).then(|| WouldHave {
            verdict: verdict.would_verdict,
            reason: verdict.would_reason,
            rule: verdict
                .would_rule
                .as_deref()
                .map(|r| truncate(r, 512).to_owned()),
        }),
        flow_labels_set: flow_labels_set.to_vec(),
        shadow: shadow.cloned(),
        input_sha256: input_sha256.map(str::to_owned),
        refusal: (verdict.reason == Reason::BudgetExhausted).then(|| {
            format!(
                "run budget used up ({})",
                verdict.matched_rule.as_deref().unwrap_or("budget")
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    //! What the gate puts in the message; the store's tests pin the bytes
    //! [`DecisionMessage`] writes for it.

    use toolgate_policy::{Decision, Risk};

    use super::*;

    fn verdict(verdict: Decision, reason: Reason, rule: Option<&str>) -> Verdict {
        Verdict {
            verdict,
            reason,
            matched_rule: rule.map(str::to_owned),
            policy_version: "v1".into(),
            risk: Risk::Low,
            intent_required: false,
            args_digest: "a".into(),
            call_digest: "c".into(),
            enforced: true,
            would_verdict: None,
            would_reason: None,
            would_rule: None,
            warning: None,
        }
    }

    fn allow() -> Verdict {
        verdict(Decision::Allow, Reason::AllowRule, Some("allow:read"))
    }

    const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn an_enforced_allow_alone_writes_no_message() {
        assert_eq!(
            message(&allow(), &[], None, None),
            DecisionMessage::default()
        );
        assert_eq!(record_message(&allow(), &[], None, None), None);
    }

    #[test]
    fn labels_shadow_and_input_digest_are_carried_as_given() {
        let outcome: ShadowOutcome = serde_json::from_str(
            r#"{"candidate_version":"v2","active":"allow","verdict":"deny","reason":"hardline_command"}"#,
        )
        .unwrap();
        let labels = ["private".to_owned(), "web".to_owned()];
        let got = message(&allow(), &labels, Some(&outcome), Some(SHA));
        let want = DecisionMessage {
            flow_labels_set: labels.to_vec(),
            shadow: Some(outcome),
            input_sha256: Some(SHA.into()),
            ..Default::default()
        };
        assert_eq!(got, want);
        // The text is the one type's.
        assert_eq!(
            record_message(&allow(), &labels, want.shadow.as_ref(), Some(SHA)),
            want.to_text()
        );
    }

    #[test]
    fn a_budget_refusal_names_the_budget() {
        let budget = |rule| verdict(Decision::Deny, Reason::BudgetExhausted, rule);
        let refusal = |v: &Verdict| message(v, &[], None, None).refusal;
        assert_eq!(
            refusal(&budget(Some("calls"))).as_deref(),
            Some("run budget used up (calls)")
        );
        assert_eq!(
            refusal(&budget(None)).as_deref(),
            Some("run budget used up (budget)")
        );
        // Only a budget's denial is a refusal.
        let deny = verdict(Decision::Deny, Reason::DenyRule, Some("deny:x"));
        assert_eq!(message(&deny, &[], None, None), DecisionMessage::default());
    }

    #[test]
    fn a_reporting_verdict_says_what_enforcement_would_have_done() {
        let mut warn = allow();
        warn.enforced = false;
        warn.would_verdict = Some(Decision::Deny);
        warn.would_reason = Some(Reason::HardlinePath);
        warn.would_rule = Some("é".repeat(600));
        let would = message(&warn, &[], None, None).would;
        assert_eq!(
            would,
            Some(WouldHave {
                verdict: Some(Decision::Deny),
                reason: Some(Reason::HardlinePath),
                rule: Some("é".repeat(512)),
            })
        );
        // A reporting verdict with nothing to say still says it reported.
        let mut dry = verdict(Decision::Deny, Reason::BudgetExhausted, None);
        dry.enforced = false;
        assert_eq!(
            message(&dry, &[], None, None).would,
            Some(WouldHave::default())
        );
    }
}
