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
    .to_text()
}

#[cfg(test)]
mod tests {
    //! The chain hashes these bytes: logs already written keep verifying
    //! only while every message is written exactly as before.

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

    fn budget(rule: Option<&str>) -> Verdict {
        verdict(Decision::Deny, Reason::BudgetExhausted, rule)
    }

    fn shadow(verdict: Decision, rule: Option<&str>) -> ShadowOutcome {
        ShadowOutcome {
            candidate_version: "v2".into(),
            active: Decision::Allow,
            verdict,
            reason: Reason::HardlineCommand,
            rule: rule.map(str::to_owned),
        }
    }

    fn labels(names: &[&str]) -> Vec<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn messages_keep_their_exact_bytes() {
        let changed = shadow(Decision::Deny, Some("hardline:\"rm\" é"));
        let same = shadow(Decision::Allow, None);
        let cases: [(Option<String>, Option<&str>); 8] = [
            (record_message(&allow(), &[], None, None), None),
            (
                record_message(&allow(), &labels(&["private", "web"]), None, None),
                Some(r#"{"flow_labels_set":["private","web"]}"#),
            ),
            (
                record_message(&allow(), &[], Some(&changed), None),
                Some(
                    r#"{"shadow":{"active":"allow","candidate_version":"v2","reason":"hardline_command","rule":"hardline:\"rm\" é","verdict":"deny"},"shadow_changed":true}"#,
                ),
            ),
            (
                record_message(&allow(), &[], Some(&same), None),
                Some(
                    r#"{"shadow":{"active":"allow","candidate_version":"v2","reason":"hardline_command","verdict":"allow"}}"#,
                ),
            ),
            (
                record_message(&allow(), &[], None, Some(SHA)),
                Some(&format!(r#"{{"input_sha256":"{SHA}"}}"#)),
            ),
            (
                record_message(&budget(Some("calls")), &[], Some(&same), Some(SHA)),
                Some(&format!(
                    r#"{{"budget":"run budget used up (calls)","input_sha256":"{SHA}","shadow":{{"active":"allow","candidate_version":"v2","reason":"hardline_command","verdict":"allow"}}}}"#
                )),
            ),
            (
                record_message(&budget(Some("calls")), &[], None, None),
                Some("run budget used up (calls)"),
            ),
            (
                record_message(&budget(None), &[], None, None),
                Some("run budget used up (budget)"),
            ),
        ];
        for (i, (got, want)) in cases.iter().enumerate() {
            assert_eq!(got.as_deref(), *want, "case {i}");
        }
    }

    #[test]
    fn a_reporting_verdict_keeps_its_exact_bytes() {
        let mut warn = allow();
        warn.enforced = false;
        warn.would_verdict = Some(Decision::Deny);
        warn.would_reason = Some(Reason::HardlinePath);
        warn.would_rule = Some("é".repeat(600));
        let rule = "é".repeat(512);
        assert_eq!(
            record_message(
                &warn,
                &labels(&["x"]),
                Some(&shadow(Decision::Deny, None)),
                Some(SHA)
            ),
            Some(format!(
                r#"{{"enforced":false,"flow_labels_set":["x"],"input_sha256":"{SHA}","shadow":{{"active":"allow","candidate_version":"v2","reason":"hardline_command","verdict":"deny"}},"shadow_changed":true,"would_reason":"hardline_path","would_rule":"{rule}","would_verdict":"deny"}}"#
            ))
        );
        // Nothing enforcement would have said is recorded as null, not left out.
        let mut dry = budget(None);
        dry.enforced = false;
        assert_eq!(
            record_message(&dry, &[], None, None).as_deref(),
            Some(
                r#"{"budget":"run budget used up (budget)","enforced":false,"would_reason":null,"would_rule":null,"would_verdict":null}"#
            )
        );
    }
}
