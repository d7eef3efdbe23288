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
