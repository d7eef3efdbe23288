//! The one reading of a call's arguments that every check shares: rules,
//! hardline globs, egress, flow selectors and the approver's preview.
//!
//! Paths are normalized once ([`crate::paths`]). Then the call becomes its
//! *match texts*: the values that form the text rules see, with every array
//! read element by element (nested arrays flattened). A call whose
//! arguments hold no array has one match text, exactly as before; one with
//! `{"paths": ["a", "b"]}` has two, and is decided as the stricter of the
//! two calls it stands for (deny before escalate before allow), so a value
//! and a one-element array holding it always decide alike, and a glob never
//! has to match an array's JSON spelling.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::compile::{CompiledTool, MatchText};
use crate::digest::canonical_json;
use crate::paths::normalize_args;
use crate::verdict::Reason;

/// Most match texts one call may expand to (the product of its arrays'
/// lengths); a call past it is denied with [`Reason::TooManyValues`].
pub const MAX_MATCH_TEXTS: usize = 16_384;
/// Most bytes a call's match texts may take together (each text is a copy
/// of the values it combines); a call past it is denied with
/// [`Reason::TooManyValues`], before anything is copied.
pub const MAX_MATCH_BYTES: usize = 8 << 20;

/// A call as every check reads it.
#[derive(Debug)]
pub(crate) struct CallView<'a> {
    /// The arguments with their paths normalized.
    pub(crate) args: Cow<'a, Map<String, Value>>,
    /// One text per combination of array elements, in argument order.
    pub(crate) texts: Vec<String>,
    /// When an array held more than one element: every piece in order,
    /// joined by spaces, as an argument vector reads as a command line
    /// (`["rm", "-rf", "/"]` is `rm -rf /` to a hardline command glob).
    pub(crate) joined: Option<String>,
}

impl CompiledTool {
    /// Reads `arguments` of a call to this tool once; the refusal when a
    /// path cannot be normalized or the arrays expand too far.
    pub(crate) fn read<'a>(
        &self,
        action: Option<&str>,
        arguments: &'a Map<String, Value>,
    ) -> Result<CallView<'a>, Reason> {
        let args = normalize_args(&self.path_args, arguments)?;
        let (texts, joined) = match_texts(&self.match_text, action, &args)?;
        Ok(CallView {
            args,
            texts,
            joined,
        })
    }
}

impl CallView<'_> {
    /// What an approver is shown: the one match text, or the texts as a
    /// JSON array when arrays expanded the call.
    pub(crate) fn shown(&self) -> String {
        match self.texts.as_slice() {
            [one] => one.clone(),
            many => serde_json::to_string(many).unwrap_or_default(),
        }
    }
}

/// The pieces `value` contributes to a match text: a string as written,
/// each element of an array (flattened), anything else as canonical JSON.
/// `null` contributes nothing where `skip_null` (named arguments, as an
/// absent one), and the text `null` otherwise.
fn pieces(value: &Value, skip_null: bool, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| pieces(v, skip_null, out)),
        Value::Null if skip_null => {}
        other => out.push(String::from_utf8_lossy(&canonical_json(other)).into_owned()),
    }
}

fn match_texts(
    match_text: &MatchText,
    action: Option<&str>,
    args: &Map<String, Value>,
) -> Result<(Vec<String>, Option<String>), Reason> {
    let mut slots: Vec<Vec<String>> = Vec::new();
    let mut slot = |value: &Value, skip_null: bool| {
        let mut out = Vec::new();
        pieces(value, skip_null, &mut out);
        // An empty array, like an absent argument, adds nothing.
        if !out.is_empty() {
            slots.push(out);
        }
    };
    match match_text {
        MatchText::Named(names) => {
            for name in names {
                if let Some(value) = args.get(name) {
                    slot(value, true);
                }
            }
        }
        MatchText::ActionAndValues => {
            if let Some(action) = action {
                slot(&Value::String(action.to_owned()), false);
            }
            // serde_json's Map iterates in key order unless a dependency
            // turns on `preserve_order`; sort then, so the text never
            // depends on how the caller built the map.
            let mut entries: Vec<(&String, &Value)> = args.iter().collect();
            if !entries.windows(2).all(|w| w[0].0 < w[1].0) {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            for (_, value) in entries {
                slot(value, false);
            }
        }
    }
    let count = slots
        .iter()
        .try_fold(1usize, |n, s| n.checked_mul(s.len()))
        .filter(|&n| n <= MAX_MATCH_TEXTS)
        .ok_or(Reason::TooManyValues)?;
    // Each piece of a slot stands in count / len texts, with a separator.
    let bytes = slots.iter().try_fold(0usize, |total, slot| {
        let per_text = count / slot.len();
        let slot_bytes: usize = slot.iter().map(|p| p.len() + 1).sum();
        total.checked_add(per_text.checked_mul(slot_bytes)?)
    });
    if bytes.is_none_or(|b| b > MAX_MATCH_BYTES) {
        return Err(Reason::TooManyValues);
    }
    let mut texts = Vec::with_capacity(count);
    texts.push(String::new());
    for slot in &slots {
        let mut next = Vec::with_capacity(texts.len() * slot.len());
        for text in &texts {
            for piece in slot {
                let mut t = text.clone();
                // One space between pieces, none before the first (as an
                // empty first piece leaves the text empty).
                if !t.is_empty() {
                    t.push(' ');
                }
                t.push_str(piece);
                next.push(t);
            }
        }
        texts = next;
    }
    let joined = slots.iter().any(|s| s.len() > 1).then(|| {
        let pieces: Vec<&str> = slots.iter().flatten().map(String::as_str).collect();
        pieces.join(" ")
    });
    Ok((texts, joined))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(mt: &MatchText, args: Value) -> Result<Vec<String>, Reason> {
        match_texts(mt, None, args.as_object().unwrap()).map(|(texts, _)| texts)
    }

    #[test]
    fn arrays_expand_element_by_element() {
        let named = MatchText::Named(vec!["paths".into(), "mode".into()]);
        assert_eq!(
            texts(&named, json!({"paths": ["a", ["b"]], "mode": "r"})).unwrap(),
            ["a r", "b r"]
        );
        assert_eq!(
            texts(&named, json!({"paths": [], "mode": "r"})).unwrap(),
            ["r"]
        );
        assert_eq!(texts(&named, json!({"paths": null})).unwrap(), [""]);
        let all = MatchText::ActionAndValues;
        assert_eq!(
            texts(&all, json!({"a": [1, {"k": "v"}], "b": "x"})).unwrap(),
            ["1 x", r#"{"k":"v"} x"#]
        );
    }

    #[test]
    fn an_argument_vector_also_reads_as_one_command_line() {
        let named = MatchText::Named(vec!["argv".into()]);
        let args = json!({"argv": ["rm", "-rf", "/"]});
        let (texts, joined) = match_texts(&named, None, args.as_object().unwrap()).unwrap();
        assert_eq!(texts, ["rm", "-rf", "/"]);
        assert_eq!(joined.as_deref(), Some("rm -rf /"));
        let one = json!({"argv": ["ls"]});
        assert_eq!(
            match_texts(&named, None, one.as_object().unwrap())
                .unwrap()
                .1,
            None
        );
    }

    #[test]
    fn a_value_and_a_one_element_array_read_alike() {
        for mt in [
            MatchText::Named(vec!["v".into()]),
            MatchText::ActionAndValues,
        ] {
            for v in [
                json!("/w/id.pem"),
                json!(7),
                json!(null),
                json!({"a": 1}),
                json!([]),
            ] {
                assert_eq!(
                    texts(&mt, json!({"v": v})),
                    texts(&mt, json!({"v": [v.clone()]})),
                    "{v}"
                );
            }
        }
    }

    #[test]
    fn expansion_is_bounded_in_count_and_bytes() {
        let many: Vec<Value> = (0..200).map(|i| json!(i.to_string())).collect();
        let mt = MatchText::ActionAndValues;
        assert_eq!(texts(&mt, json!({"a": many.clone()})).unwrap().len(), 200);
        assert_eq!(
            texts(&mt, json!({"a": many.clone(), "b": many})),
            Err(Reason::TooManyValues)
        );
        // One large value beside a long array would be copied into every text.
        let wide: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
        let big = "x".repeat(1 << 20);
        assert_eq!(
            texts(&mt, json!({"a": wide.clone(), "b": big})),
            Err(Reason::TooManyValues)
        );
        // A long numeric array alone (an embedding) is fine.
        let embedding: Vec<Value> = (0..4096).map(|i| json!(i as f64 / 7.0)).collect();
        assert_eq!(texts(&mt, json!({"v": embedding})).unwrap().len(), 4096);
    }
}
