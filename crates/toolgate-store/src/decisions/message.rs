//! The `message` of a decision: what the gate records beside the verdict,
//! in text the chain covers. One type writes it ([`DecisionMessage::to_text`],
//! the gate) and reads it ([`DecisionMessage::parse`], the audit log,
//! recorded inputs and replay).
//!
//! The text is a JSON object whose members are, in this order: `budget`
//! (which budget refused the call, when other members are recorded),
//! `enforced` (`false`, for a verdict that only reports), `flow_labels_set`,
//! [`INPUT_SHA256_MEMBER`], `shadow`, `shadow_changed` (`true` only) and
//! `would_reason`, `would_rule`, `would_verdict` (present, maybe `null`,
//! whenever `enforced` is). A message with none of them is no text, or the
//! budget's refusal alone as plain text. Logs already written keep these
//! bytes, and `--shadow-changed` selects rows by [`SHADOW_CHANGED_MARK`]
//! in the text: the member order is fixed by [`Members`], not by how
//! serde_json orders a map.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use toolgate_policy::{Decision, Reason};

/// The member holding the hex SHA-256 of the call's recorded input.
pub const INPUT_SHA256_MEMBER: &str = "input_sha256";

/// The member that marks a disagreeing shadow decision, which
/// `--shadow-changed` selects by (a JSON key: text in a string value has
/// its quotes escaped, so only the gate's own member matches).
pub const SHADOW_CHANGED_MARK: &str = "\"shadow_changed\":true";

/// What a bundle's candidate policy (shadow mode) decided for a call
/// beside the active policy, as the gate records it in the decision's
/// `message` (member `shadow`; the chain covers it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowOutcome {
    /// The candidate's policy version.
    pub candidate_version: String,
    /// The active policy's verdict, before anything but policy changed it.
    pub active: Decision,
    /// The candidate's verdict.
    pub verdict: Decision,
    /// The candidate's reason code.
    pub reason: Reason,
    /// The candidate's matched rule, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl ShadowOutcome {
    /// Whether the candidate would have decided otherwise.
    pub fn disagrees(&self) -> bool {
        self.active != self.verdict
    }
}

/// What enforcement would have answered a call decided under `warn` or
/// `dryRun` (the verdict recorded is the one that only reported).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WouldHave {
    /// `would_verdict`.
    pub verdict: Option<Decision>,
    /// `would_reason`.
    pub reason: Option<Reason>,
    /// `would_rule`.
    pub rule: Option<String>,
}

/// A decision's `message`; every member is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionMessage {
    /// What enforcement would have answered, for a verdict that only
    /// reports (written with `enforced: false`).
    pub would: Option<WouldHave>,
    /// The flow labels the call set (why a later call of its run was
    /// refused starts here); none is no member.
    pub flow_labels_set: Vec<String>,
    /// What the bundle's candidate decided.
    pub shadow: Option<ShadowOutcome>,
    /// Hex SHA-256 of the call's recorded input, so the chain vouches for it.
    pub input_sha256: Option<String>,
    /// Why a budget refused the call: the whole message when nothing else
    /// is recorded (older logs may hold other plain text: it reads back
    /// here), else member `budget`.
    pub refusal: Option<String>,
}

impl DecisionMessage {
    /// Whether the candidate this message records decided otherwise (the
    /// `shadow_changed` member).
    pub fn shadow_changed(&self) -> bool {
        self.shadow.as_ref().is_some_and(ShadowOutcome::disagrees)
    }

    /// The text recorded in the decision log; `None` for an empty message.
    pub fn to_text(&self) -> Option<String> {
        let has_members = self.would.is_some()
            || !self.flow_labels_set.is_empty()
            || self.shadow.is_some()
            || self.input_sha256.is_some();
        if !has_members {
            return self.refusal.clone();
        }
        let would = self.would.as_ref();
        let members = Members {
            budget: self.refusal.as_deref(),
            enforced: would.map(|_| false),
            flow_labels_set: &self.flow_labels_set,
            input_sha256: self.input_sha256.as_deref(),
            shadow: self.shadow.as_ref().map(|s| ShadowMembers {
                active: s.active,
                candidate_version: &s.candidate_version,
                reason: s.reason,
                rule: s.rule.as_deref(),
                verdict: s.verdict,
            }),
            shadow_changed: self.shadow_changed().then_some(true),
            would_reason: would.map(|w| w.reason),
            would_rule: would.map(|w| w.rule.as_deref()),
            would_verdict: would.map(|w| w.verdict),
        };
        // Strings, booleans and wire enums only: this cannot fail.
        serde_json::to_string(&members).ok()
    }

    /// Reads a decision's `message`. Plain text is a refusal; a JSON
    /// object is read member by member, so one unreadable member (a reason
    /// code this release does not know, say) hides none of the others;
    /// text that is neither holds nothing.
    pub fn parse(message: Option<&str>) -> Self {
        let Some(text) = message else {
            return Self::default();
        };
        if !text.starts_with('{') {
            return Self {
                refusal: Some(text.to_owned()),
                ..Self::default()
            };
        }
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(members)) => Self::from_members(&members),
            _ => Self::default(),
        }
    }

    fn from_members(members: &Map<String, Value>) -> Self {
        let text = |name: &str| members.get(name).and_then(Value::as_str);
        let reporting = ["enforced", "would_verdict", "would_reason", "would_rule"]
            .iter()
            .any(|name| members.contains_key(*name));
        Self {
            would: reporting.then(|| WouldHave {
                verdict: text("would_verdict").and_then(Decision::from_wire),
                reason: text("would_reason").and_then(Reason::from_wire),
                rule: text("would_rule").map(str::to_owned),
            }),
            flow_labels_set: members
                .get("flow_labels_set")
                .and_then(Value::as_array)
                .map(|labels| {
                    labels
                        .iter()
                        .filter_map(|l| l.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            shadow: members
                .get("shadow")
                .and_then(|s| ShadowOutcome::deserialize(s).ok()),
            input_sha256: text(INPUT_SHA256_MEMBER).map(str::to_owned),
            refusal: text("budget").map(str::to_owned),
        }
    }
}

/// The message's members as written: declared in the order the text has
/// them, absent ones skipped; a reporting verdict's `would_*` are written
/// even when `null`.
#[derive(Serialize)]
struct Members<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforced: Option<bool>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    flow_labels_set: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    input_sha256: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow: Option<ShadowMembers<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow_changed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_reason: Option<Option<Reason>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_rule: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_verdict: Option<Option<Decision>>,
}

/// The `shadow` member as written: its keys in name order (the gate wrote
/// it as a serde_json map), which is not [`ShadowOutcome`]'s field order.
#[derive(Serialize)]
struct ShadowMembers<'a> {
    active: Decision,
    candidate_version: &'a str,
    reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    verdict: Decision,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

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

    /// Messages the gate writes, with their exact text: the one place
    /// these bytes are pinned (the gate's tests check the members it sets).
    fn written() -> Vec<(DecisionMessage, Option<String>)> {
        let budget = || Some("run budget used up (calls)".to_owned());
        let same = r#"{"active":"allow","candidate_version":"v2","reason":"hardline_command","verdict":"allow"}"#;
        vec![
            (DecisionMessage::default(), None),
            (
                DecisionMessage {
                    flow_labels_set: labels(&["private", "web"]),
                    ..Default::default()
                },
                Some(r#"{"flow_labels_set":["private","web"]}"#.into()),
            ),
            (
                DecisionMessage {
                    shadow: Some(shadow(Decision::Deny, Some("hardline:\"rm\" é"))),
                    ..Default::default()
                },
                Some(r#"{"shadow":{"active":"allow","candidate_version":"v2","reason":"hardline_command","rule":"hardline:\"rm\" é","verdict":"deny"},"shadow_changed":true}"#.into()),
            ),
            (
                DecisionMessage {
                    shadow: Some(shadow(Decision::Allow, None)),
                    ..Default::default()
                },
                Some(format!(r#"{{"shadow":{same}}}"#)),
            ),
            (
                DecisionMessage {
                    input_sha256: Some(SHA.into()),
                    ..Default::default()
                },
                Some(format!(r#"{{"input_sha256":"{SHA}"}}"#)),
            ),
            (
                DecisionMessage {
                    shadow: Some(shadow(Decision::Allow, None)),
                    input_sha256: Some(SHA.into()),
                    refusal: budget(),
                    ..Default::default()
                },
                Some(format!(
                    r#"{{"budget":"run budget used up (calls)","input_sha256":"{SHA}","shadow":{same}}}"#
                )),
            ),
            (
                DecisionMessage {
                    refusal: budget(),
                    ..Default::default()
                },
                budget(),
            ),
            (
                DecisionMessage {
                    would: Some(WouldHave {
                        verdict: Some(Decision::Deny),
                        reason: Some(Reason::HardlinePath),
                        rule: Some("hardline:/etc/**".into()),
                    }),
                    flow_labels_set: labels(&["x"]),
                    shadow: Some(shadow(Decision::Deny, None)),
                    input_sha256: Some(SHA.into()),
                    refusal: None,
                },
                Some(format!(
                    r#"{{"enforced":false,"flow_labels_set":["x"],"input_sha256":"{SHA}","shadow":{{"active":"allow","candidate_version":"v2","reason":"hardline_command","verdict":"deny"}},"shadow_changed":true,"would_reason":"hardline_path","would_rule":"hardline:/etc/**","would_verdict":"deny"}}"#
                )),
            ),
            (
                DecisionMessage {
                    would: Some(WouldHave::default()),
                    refusal: Some("run budget used up (budget)".into()),
                    ..Default::default()
                },
                Some(r#"{"budget":"run budget used up (budget)","enforced":false,"would_reason":null,"would_rule":null,"would_verdict":null}"#.into()),
            ),
        ]
    }

    #[test]
    fn messages_are_written_with_their_exact_bytes() {
        for (i, (message, text)) in written().iter().enumerate() {
            assert_eq!(message.to_text(), *text, "case {i}");
        }
    }

    #[test]
    fn written_messages_read_back_as_written() {
        for (i, (message, text)) in written().into_iter().enumerate() {
            let read = DecisionMessage::parse(text.as_deref());
            assert_eq!(read, message, "case {i}");
            assert_eq!(read.to_text(), text, "case {i}");
            assert_eq!(
                text.as_deref()
                    .is_some_and(|t| t.contains(SHADOW_CHANGED_MARK)),
                read.shadow_changed(),
                "case {i}"
            );
        }
    }

    #[test]
    fn older_and_foreign_texts_read_as_before() {
        // Plain text, from a budget alone or a writer of old.
        let plain = DecisionMessage::parse(Some("message 3"));
        assert_eq!(plain.refusal.as_deref(), Some("message 3"));
        assert_eq!(plain.to_text().as_deref(), Some("message 3"));
        assert!(plain.flow_labels_set.is_empty() && plain.input_sha256.is_none());
        // Before budgets were kept beside other members, they were dropped.
        let old = DecisionMessage::parse(Some(&format!(r#"{{"input_sha256":"{SHA}"}}"#)));
        assert_eq!(old.input_sha256.as_deref(), Some(SHA));
        assert_eq!(old.refusal, None);
        // Unreadable text holds nothing.
        for text in [None, Some("{not json"), Some("{}")] {
            assert_eq!(DecisionMessage::parse(text), DecisionMessage::default());
        }
        // One unreadable member hides none of the others.
        let mixed = DecisionMessage::parse(Some(&format!(
            r#"{{"flow_labels_set":["a",1,"b"],"input_sha256":"{SHA}","shadow":{{"active":"allow","candidate_version":"v9","reason":"from_the_future","verdict":"deny"}},"shadow_changed":true,"would_verdict":"maybe","would_reason":"deny_rule"}}"#
        )));
        assert_eq!(mixed.flow_labels_set, ["a", "b"]);
        assert_eq!(mixed.input_sha256.as_deref(), Some(SHA));
        assert_eq!(mixed.shadow, None);
        assert_eq!(
            mixed.would,
            Some(WouldHave {
                verdict: None,
                reason: Some(Reason::DenyRule),
                rule: None
            })
        );
        // A digest that is not text is no digest.
        let number = DecisionMessage::parse(Some(r#"{"input_sha256":7,"budget":"b"}"#));
        assert_eq!(number.input_sha256, None);
        assert_eq!(number.refusal.as_deref(), Some("b"));
    }
}
