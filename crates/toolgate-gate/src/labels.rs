//! Metric labels: bounded by the profile, never by agent text.

use toolgate_policy::CompiledPolicy;

/// Longest label value a metric series may carry.
pub const MAX_LABEL_CHARS: usize = 128;
/// Metric label for a tool the held profile does not declare.
pub const OTHER_TOOL: &str = "<other>";
/// Metric label for "no profile loaded".
pub const NO_PROFILE: &str = "<none>";

/// `text` cut to at most `max` characters.
pub fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// The `tool` label of a call: the canonical name when the held profile
/// declares it, else [`OTHER_TOOL`]. Agent text never becomes a label, so
/// label cardinality is bounded by the profile.
pub fn metric_tool_label<'a>(policy: &'a CompiledPolicy, tool: &'a str) -> &'a str {
    if policy.effect(tool).is_some() {
        truncate(policy.canonical_tool(tool), MAX_LABEL_CHARS)
    } else {
        OTHER_TOOL
    }
}

/// The `tool` and `profile` labels of a decision on `tool` under the held
/// bundle `enforced` (none held: [`OTHER_TOOL`], [`NO_PROFILE`]).
pub fn decision_labels<'a>(
    enforced: Option<&'a crate::Enforced>,
    tool: &'a str,
) -> (&'a str, &'a str) {
    match enforced {
        Some(e) => (
            metric_tool_label(&e.policy, tool),
            truncate(&e.profile, MAX_LABEL_CHARS),
        ),
        None => (OTHER_TOOL, NO_PROFILE),
    }
}
