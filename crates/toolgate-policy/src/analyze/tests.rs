//! The glob algebra against the policy's own matcher ([`Matcher`]): every
//! witness is checked by matching it, and `covers` agrees with brute force
//! over all short strings of a small alphabet.

use proptest::prelude::*;

use super::glob_lang::{covers, equivalent, explore, intersection, intersects, witness};
use crate::fnmatch::Matcher;

fn matcher(glob: &str) -> Matcher {
    Matcher::new(glob).expect("glob compiles")
}

fn matches(glob: &str, text: &str) -> bool {
    matcher(glob).is_match(text)
}

/// Glob pieces rich in the syntax fnmatch treats specially.
fn glob_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("*".to_owned()),
        Just("?".to_owned()),
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("/".to_owned()),
        Just("[ab]".to_owned()),
        Just("[!a]".to_owned()),
        Just("[a-c]".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("!".to_owned()),
        Just("-".to_owned()),
        Just("é".to_owned()),
    ];
    (
        prop::bool::weighted(0.15),
        prop::collection::vec(piece, 1..6),
    )
        .prop_map(|(double, pieces)| {
            let body = pieces.concat();
            if double { format!("**/{body}") } else { body }
        })
}

/// Every string over `alphabet` up to `max` characters.
fn all_strings(alphabet: &[char], max: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..max {
        let mut next = Vec::new();
        for s in &layer {
            for c in alphabet {
                let mut t = s.clone();
                t.push(*c);
                next.push(t);
            }
        }
        out.extend(next.iter().cloned());
        layer = next;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn witnesses_are_real(a in glob_strategy(), b in glob_strategy()) {
        match witness(&a, &b).expect("small globs are decidable") {
            Some(w) => prop_assert!(matches(&b, &w) && !matches(&a, &w), "{a:?} {b:?} {w:?}"),
            None => prop_assert!(covers(&a, &b) == Some(true)),
        }
        if let Some(w) = intersection(&a, &b).expect("decidable") {
            prop_assert!(matches(&a, &w) && matches(&b, &w), "{a:?} {b:?} {w:?}");
        }
        // Every class's witness is matched by exactly the globs it names.
        for class in explore(&[&a, &b]).expect("decidable") {
            prop_assert_eq!(class.accepts, vec![matches(&a, &class.witness), matches(&b, &class.witness)]);
        }
    }

    #[test]
    fn covers_agrees_with_brute_force(a in glob_strategy(), b in glob_strategy()) {
        // Symbols the globs name plus one they do not.
        let strings = all_strings(&['a', 'b', 'c', '/', '[', ']', '!', '-', 'é'], 3);
        let (ma, mb) = (matcher(&a), matcher(&b));
        let counterexample = strings.iter().any(|s| mb.is_match(s) && !ma.is_match(s));
        let covered = covers(&a, &b).expect("decidable");
        if covered {
            prop_assert!(!counterexample, "{a:?} claimed to cover {b:?}");
        }
        let overlap = strings.iter().any(|s| ma.is_match(s) && mb.is_match(s));
        if overlap {
            prop_assert!(intersects(&a, &b) == Some(true));
        }
        if !covered {
            // The shortest witness is at most a little longer than the globs.
            let w = witness(&a, &b).flatten().expect("a witness");
            prop_assert!(matches(&b, &w) && !matches(&a, &w));
        }
    }
}

#[test]
fn known_answers() {
    assert_eq!(covers("*", "rm -rf *"), Some(true));
    assert_eq!(covers("git *", "git push *"), Some(true));
    assert_eq!(covers("git push *", "git *"), Some(false));
    assert_eq!(
        witness("git push *", "git *").flatten().as_deref(),
        Some("git ")
    );
    assert_eq!(equivalent("a**b", "a*b"), Some(true));
    assert_eq!(equivalent("[ab]", "[ba]"), Some(true));
    assert_eq!(equivalent("[!a]", "?"), Some(false));
    assert_eq!(covers("?", "[!a]"), Some(true));
    assert_eq!(intersects("[z-a]", "*"), Some(false));
    assert_eq!(covers("**/.env", ".env"), Some(true));
    assert_eq!(covers("*/.env", "**/.env"), Some(false));
    assert_eq!(covers("*", "**/.env"), Some(true));
    // Braces and backslashes are literal.
    assert_eq!(covers("{a,b}", "a"), Some(false));
    assert_eq!(covers("[\\]", "\\"), Some(true));
    // Non-ASCII is one character to `?`.
    assert_eq!(covers("caf?", "café"), Some(true));
}

#[test]
fn witnesses_of_exhaustive_small_globs_match_brute_force() {
    let alphabet = ['a', '*', '?', '[', ']', '!'];
    let globs: Vec<String> = all_strings(&alphabet, 3)
        .into_iter()
        .filter(|g| !g.is_empty())
        .collect();
    let strings = all_strings(&['a', 'b', '*', '?', '[', ']', '!'], 4);
    let matchers: Vec<Matcher> = globs.iter().map(|g| matcher(g)).collect();
    for (a, ma) in globs.iter().zip(&matchers).step_by(7) {
        for (b, mb) in globs.iter().zip(&matchers).step_by(5) {
            let brute = strings.iter().any(|s| mb.is_match(s) && !ma.is_match(s));
            let exact = witness(a, b).expect("decidable");
            assert_eq!(exact.is_some(), brute, "{a:?} vs {b:?}: {exact:?}");
        }
    }
}

// ---- Profiles judged as the evaluator matches ----------------------------
//
// The evaluator tries a match text and, when it holds an uppercase
// character, its lowercase copy (`OrderedGlobs::first_match`): `GIT x` is
// allowed by `git *`. Findings and comparisons must say what it does.

use super::{Relation, analyze, compare};
use crate::compile::CompiledPolicy;
use crate::eval::{Call, Context};
use crate::verdict::Decision;

const EFFECTS: &str = "effects: {bash: {sideEffect: PROCESS_EXEC, risk: high}, \
                       fetch: {sideEffect: NONE, risk: low}}";

fn profile(extra: &str) -> CompiledPolicy {
    let yaml = format!("mode: rules\n{extra}\n{EFFECTS}");
    let spec = crate::load::from_str(&yaml).expect("parses");
    CompiledPolicy::compile("p", &spec, &[]).expect("compiles")
}

/// What the real evaluator decides for bash on `command`.
fn bash(policy: &CompiledPolicy, command: &str) -> Decision {
    let args = serde_json::json!({"command": command});
    let call = Call {
        tool: "bash",
        action: None,
        arguments: args.as_object().expect("object"),
    };
    policy
        .evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH))
        .verdict
}

#[test]
fn findings_follow_the_evaluators_lowercase_fallback() {
    // (bash rules and extras, expected (code, field), a text and its verdict)
    type Case = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static str,
        Decision,
    );
    let table: &[Case] = &[
        (
            // `GIT x` is allowed through its copy `git x`: never asks.
            "rules: {bash: {allow: ['git *'], escalate: ['GIT *']}}",
            &[("shadowed_escalate", "spec.rules.bash.escalate[0]")],
            "GIT x",
            Decision::Allow,
        ),
        (
            // Every `GIT PUSH…` is denied by its copy first: nothing leaks.
            "rules: {bash: {deny: ['git push*'], allow: ['GIT *'], escalate: ['GIT PUSH*']}}",
            &[("shadowed", "spec.rules.bash.escalate[0]")],
            "GIT PUSH x",
            Decision::Deny,
        ),
        (
            "rules: {bash: {allow: ['git *', 'GIT *']}}",
            &[("shadowed_in_tier", "spec.rules.bash.allow[1]")],
            "GIT x",
            Decision::Allow,
        ),
        (
            // Hardline globs are matched the same way.
            "rules: {bash: {deny: ['MKFS*'], allow: ['ls']}}\nhardline: {commands: ['mkfs*']}",
            &[("shadowed_by_hardline", "spec.rules.bash.deny[0]")],
            "MKFS x",
            Decision::Deny,
        ),
        (
            // `GIT status` is allowed by `git status`; the rest asks.
            "rules: {bash: {allow: ['git status'], escalate: ['GIT *']}}",
            &[("escalate_partly_allowed", "spec.rules.bash.escalate[0]")],
            "GIT status",
            Decision::Allow,
        ),
        (
            // A text without uppercase is never lowered: `git push` asks,
            // but `GIT PUSH` reaches the escalate glob only by its copy
            // and is allowed by `*PUSH*` first.
            "rules: {bash: {allow: ['*PUSH*'], escalate: ['git push']}}",
            &[("escalate_partly_allowed", "spec.rules.bash.escalate[0]")],
            "git push",
            Decision::Escalate,
        ),
        (
            // Kelvin sign K lowers to ASCII k.
            "rules: {bash: {allow: ['k*'], escalate: ['\u{212A}*']}}",
            &[("shadowed_escalate", "spec.rules.bash.escalate[0]")],
            "\u{212A}x",
            Decision::Allow,
        ),
    ];
    for (rules, want, text, verdict) in table {
        let policy = profile(&rules.replace("}}", "}, fetch: {allow: ['*']}}"));
        assert_eq!(bash(&policy, text), *verdict, "{rules}: {text:?}");
        let findings = analyze(&policy).findings;
        let got: Vec<(&str, &str)> = findings
            .iter()
            .map(|f| (f.code, f.field.as_str()))
            .collect();
        assert_eq!(got, *want, "{rules}");
        // A witness of a loosening is a call the evaluator allows.
        for f in findings.iter().filter(|f| f.glob.is_some()) {
            if let Some(w) = &f.witness {
                assert_eq!(bash(&policy, w), Decision::Allow, "{rules}: {f:?}");
            }
        }
    }
}

#[test]
fn comparisons_follow_the_evaluators_lowercase_fallback() {
    // (old bash rules, new bash rules, relation, a (text, old, new) change)
    type Change = Option<(&'static str, Decision, Decision)>;
    let table: &[(&str, &str, Relation, Change)] = &[
        // `GIT *` adds nothing `git *` does not already allow.
        (
            "{allow: ['git *']}",
            "{allow: ['git *', 'GIT *']}",
            Relation::Equivalent,
            None,
        ),
        // `git *` also allows `Git x`: a loosening, not an incomparable change.
        (
            "{allow: ['Git *']}",
            "{allow: ['git *']}",
            Relation::MorePermissive,
            Some(("git x", Decision::Deny, Decision::Allow)),
        ),
        // A lowercase deny now catches `RM x` too.
        (
            "{allow: ['*']}",
            "{deny: ['rm *'], allow: ['*']}",
            Relation::LessPermissive,
            Some(("RM x", Decision::Allow, Decision::Deny)),
        ),
    ];
    for (old_rules, new_rules, relation, change) in table {
        let rules = |r: &str| format!("rules: {{bash: {r}, fetch: {{allow: ['*']}}}}");
        let (old, new) = (profile(&rules(old_rules)), profile(&rules(new_rules)));
        if let Some((text, was, is)) = change {
            assert_eq!(
                (bash(&old, text), bash(&new, text)),
                (*was, *is),
                "{text:?}"
            );
        }
        let comparison = compare(&old, &new);
        let tool = &comparison.tools[0];
        assert_eq!(tool.tool, "bash");
        assert_eq!(
            tool.relation, *relation,
            "{old_rules} -> {new_rules}: {tool:?}"
        );
        assert_eq!(tool.witnesses.is_empty(), change.is_none(), "{tool:?}");
        for w in &tool.witnesses {
            assert!(w.reproduced, "{w:?}");
            // Re-checked here with the real evaluator, not the flag.
            let text = w.arguments["command"].as_str().expect("a string");
            assert_eq!(
                (bash(&old, text), bash(&new, text)),
                (w.old, w.new),
                "{w:?}"
            );
        }
    }
}

/// Lowercasing never adds or removes a shell-control character, so the
/// shell-control union may be matched with the fallback like the rest.
#[test]
fn lowercasing_keeps_shell_control_characters() {
    let control = |c: char| ";&|`><\n\r$(".contains(c);
    for c in (0..0x11_0000u32).filter_map(char::from_u32) {
        if c.is_uppercase() || c.to_lowercase().ne([c]) {
            assert!(!control(c) && !c.to_lowercase().any(control), "{c:?}");
        }
    }
}

/// Glob pieces whose case matters (Kelvin sign, dotted capital I).
fn cased_glob() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "*", "?", "a", "A", "k", "K", "\u{212A}", "i", "\u{130}", "[aB]", "[!a]", "[A-Z]",
    ]);
    prop::collection::vec(piece, 1..5).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// As the evaluator matches: every class's witness is matched by
    /// exactly the unions it names, and every combination some short text
    /// realizes is a class.
    #[test]
    fn evaluated_classes_agree_with_the_evaluators_matching(
        a in cased_glob(), b in cased_glob(), c in cased_glob(),
    ) {
        use super::bounded::explore_evaluated;
        let unions = vec![vec![a.as_str()], vec![b.as_str(), c.as_str()]];
        let compiled: Vec<Vec<Matcher>> =
            unions.iter().map(|u| u.iter().map(|g| matcher(g)).collect()).collect();
        // The evaluator's rule: the text, or its copy when it has uppercase.
        let accepts = |text: &str| -> Vec<bool> {
            let lower = text.chars().any(char::is_uppercase).then(|| text.to_lowercase());
            compiled
                .iter()
                .map(|u| {
                    u.iter().any(|m| {
                        m.is_match(text) || lower.as_deref().is_some_and(|l| m.is_match(l))
                    })
                })
                .collect()
        };
        let classes = explore_evaluated(&unions).expect("small globs are decidable");
        for class in &classes {
            prop_assert_eq!(&class.accepts, &accepts(&class.witness), "{:?}", class);
        }
        let texts = all_strings(&['a', 'A', 'b', 'k', 'K', '\u{212A}', 'i', '\u{130}', '\u{307}'], 3);
        for text in &texts {
            let got = accepts(text);
            prop_assert!(classes.iter().any(|c| c.accepts == got), "{text:?}: {got:?} missing");
        }
    }
}
