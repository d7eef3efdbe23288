//! The index against the linear search it replaces: unit cases for each
//! table, then generated glob lists, texts and whole profiles.

use proptest::prelude::*;
use serde_json::json;

use super::{GlobIndex, LINEAR_ONLY, OrderedGlobs, Shape, shape};
use crate::{Call, CompiledPolicy, Context, PolicySpec, load};

fn globs(patterns: &[&str]) -> OrderedGlobs {
    OrderedGlobs::build(
        patterns
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("g[{i}]"), (*p).to_owned(), format!("l:{p}")))
            .collect(),
    )
    .expect("test globs compile")
}

/// The index's answer, asserted equal to the linear search's.
fn first(patterns: &[&str], text: &str) -> Option<usize> {
    let list = globs(patterns);
    let index = GlobIndex::build(patterns.iter().copied());
    let indexed = index.first_match(&list.matchers, text);
    assert_eq!(
        indexed,
        list.first_match_linear(text),
        "{patterns:?} on {text:?}"
    );
    assert_eq!(list.first_match(text), indexed, "OrderedGlobs itself");
    indexed
}

#[test]
fn shapes() {
    let other = |runs: &[&'static str], head, tail| Shape::Other {
        runs: runs.to_vec(),
        head,
        tail,
    };
    assert_eq!(shape("git status"), Shape::Exact("git status"));
    assert_eq!(shape("{a,b}\\"), Shape::Exact("{a,b}\\"));
    assert_eq!(shape("x[ab"), Shape::Exact("x[ab"), "unclosed [");
    assert_eq!(shape("*"), Shape::Any);
    assert_eq!(shape("***"), Shape::Any);
    assert_eq!(shape("rm **"), Shape::Prefix("rm "));
    assert_eq!(shape("*.evil.com"), Shape::Suffix(".evil.com"));
    assert_eq!(shape("*secret*"), other(&["secret"], false, false));
    assert_eq!(shape("a*b"), other(&["a", "b"], true, true));
    assert_eq!(shape("**/.env"), other(&[".env"], false, true));
    assert_eq!(shape("**/"), other(&[], false, false));
    assert_eq!(shape("id_[rd]sa"), other(&["id_", "sa"], true, true));
    assert_eq!(shape("caf?"), other(&["caf"], true, false));
    assert_eq!(shape("[]]x"), other(&["x"], false, true));
    assert_eq!(shape("[!a]"), other(&[], false, false));
}

#[test]
fn empty_text_and_the_match_everything_glob() {
    assert_eq!(first(&["a*", "*b", "ab", "*"], ""), Some(3));
    assert_eq!(first(&["a*", "*b", "ab", "**"], "x"), Some(3));
    assert_eq!(first(&["a*", "*b", "*"], "ab"), Some(0));
    assert_eq!(first(&["?*", "[!a]"], ""), None);
    assert_eq!(first(&["**/*"], ""), Some(0));
    assert_eq!(first(&[], "anything"), None);
}

#[test]
fn duplicates_keep_the_first_index() {
    for dup in ["ls", "ls*", "*ls", "*l*", "l?", "l[s]", "*"] {
        let patterns = ["x", dup, "y", dup, dup];
        assert_eq!(first(&patterns, "ls"), Some(1), "{dup}");
    }
    // A later, shorter key of the same table must not win over an earlier.
    assert_eq!(first(&["abc*", "ab*", "a*"], "abcd"), Some(0));
    assert_eq!(first(&["a*", "ab*", "abc*"], "abcd"), Some(0));
    assert_eq!(first(&["zz", "*cd", "*d"], "abcd"), Some(1));
}

#[test]
fn uppercase_text_matches_through_its_lowercase_copy() {
    assert_eq!(first(&["rm *"], "RM -rf /"), Some(0));
    assert_eq!(first(&["RM *", "rm *"], "RM -rf /"), Some(0));
    assert_eq!(first(&["rm *", "RM *"], "RM -rf /"), Some(0));
    assert_eq!(first(&["x", "*.evil.com"], "WWW.EVIL.COM"), Some(1));
    assert_eq!(first(&["x", "café"], "CAFÉ"), Some(1));
    assert_eq!(first(&["x", "*secret*"], "a SECRET b"), Some(1));
    assert_eq!(first(&["RM"], "rm"), None, "the glob itself is not lowered");
    // The lowercase copy can be longer than the text (İ lowers to two chars).
    assert_eq!(first(&["i?"], "İ"), Some(0));
    assert_eq!(first(&["i\u{307}x*"], "İX"), Some(0));
}

#[test]
fn literal_globs_with_braces_backslashes_and_brackets() {
    assert_eq!(first(&["{a,b}", "a"], "a"), Some(1));
    assert_eq!(first(&["{a,b}", "a"], "{a,b}"), Some(0));
    assert_eq!(first(&["x", r"C:\tmp\*"], r"C:\tmp\a"), Some(1));
    assert_eq!(first(&["x", "*${IFS}*"], "cat${IFS}/etc"), Some(1));
    assert_eq!(first(&["x", "a[b"], "a[b"), Some(1));
    assert_eq!(first(&["x", "a[b]"], "a[b]"), None);
    assert_eq!(first(&["x", "a[b]"], "ab"), Some(1));
}

#[test]
fn every_table_at_once() {
    let patterns = [
        "git status",  // exact
        "ls *",        // prefix
        "*.evil.com",  // suffix
        "*secret*",    // gram
        "cat *.pem",   // prefix, checked
        "*/id_[rd]sa", // suffix, checked
        "**/.env",     // suffix, checked
        "[a-c]?",      // scan
        "*x*y*",       // scan: no literal of 3 bytes, none anchored
    ];
    let want: [(&str, Option<usize>); 12] = [
        ("git status", Some(0)),
        ("ls -la", Some(1)),
        ("api.evil.com", Some(2)),
        ("echo $SECRET", Some(3)),
        ("cat key.pem", Some(4)),
        ("cat key.pen", None),
        ("/home/u/.ssh/id_rsa", Some(5)),
        (".env", Some(6)),
        ("a/b/.env", Some(6)),
        ("bz", Some(7)),
        ("axbyc", Some(8)),
        ("ls secret.evil.com", Some(1)),
    ];
    for (text, index) in want {
        assert_eq!(first(&patterns, text), index, "{text}");
    }
}

/// Characters chosen to collide: few letters, both cases, a multibyte
/// letter and the characters other glob dialects treat specially.
const TEXT_CHARS: &[char] = &[
    'a', 'b', 'c', 'A', 'B', 'é', 'É', 'İ', '/', '.', '-', ' ', '{', '}', '\\',
];

fn literal(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TEXT_CHARS), 0..=max)
        .prop_map(|cs| cs.into_iter().collect())
}

fn glob() -> impl Strategy<Value = String> {
    let lit = || literal(6);
    prop_oneof![
        2 => lit().prop_filter("not empty", |l| !l.is_empty()),
        3 => lit().prop_map(|l| format!("{l}*")),
        3 => lit().prop_map(|l| format!("*{l}")),
        2 => lit().prop_map(|l| format!("*{l}*")),
        2 => (lit(), lit()).prop_map(|(a, b)| format!("{a}*{b}")),
        1 => lit().prop_map(|l| format!("**/{l}")),
        3 => "[abcAé/.*?!\\[\\]-]{1,8}",
        1 => (lit(), lit()).prop_map(|(a, b)| format!("{a}?{b}")),
        1 => (lit(), lit()).prop_map(|(a, b)| format!("{a}[!a-c]{b}*")),
    ]
}

/// A text matching `glob` more often than not: its wildcards filled in,
/// some letters' case flipped.
fn instance(glob: &str, seed: &[u8]) -> String {
    let mut seed = seed.iter().cycle().copied();
    let mut next = move |bound: usize| usize::from(seed.next().unwrap_or(0)) % bound;
    let mut out = String::new();
    for c in glob.chars() {
        match c {
            '*' => (0..next(3)).for_each(|_| out.push(TEXT_CHARS[next(TEXT_CHARS.len())])),
            '?' | '[' | ']' | '!' if next(2) == 0 => out.push(TEXT_CHARS[next(TEXT_CHARS.len())]),
            '[' | ']' | '!' | '-' if next(2) == 0 => {}
            c if next(4) == 0 => out.extend(c.to_uppercase()),
            c => out.push(c),
        }
    }
    out
}

fn case() -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    prop::collection::vec(glob(), 0..40).prop_flat_map(|globs| {
        let n = globs.len();
        let text = prop_oneof![
            1 => literal(10).boxed(),
            3 => (0..n.max(1), prop::collection::vec(any::<u8>(), 1..16))
                .prop_map({
                    let globs = globs.clone();
                    move |(i, seed)| globs.get(i).map(|g| instance(g, &seed)).unwrap_or_default()
                })
                .boxed(),
        ];
        (Just(globs), prop::collection::vec(text, 1..12))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The property the whole module rests on.
    #[test]
    fn index_agrees_with_the_linear_search((patterns, texts) in case()) {
        let list = OrderedGlobs::build(
            patterns.iter().map(|p| (String::new(), p.clone(), String::new())).collect(),
        ).unwrap();
        let index = GlobIndex::build(patterns.iter().map(String::as_str));
        for text in &texts {
            let linear = list.first_match_linear(text);
            prop_assert_eq!(index.first_match(&list.matchers, text), linear, "text {:?}", text);
            prop_assert_eq!(list.first_match(text), linear);
        }
    }
}

/// The generator makes matches happen, late ones included.
#[test]
fn the_generator_finds_matches() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = case();
    let (mut found, mut late, mut total) = (0, 0, 0);
    for _ in 0..500 {
        let (patterns, texts) =
            proptest::strategy::ValueTree::current(&strategy.new_tree(&mut runner).unwrap());
        let list = globs(&patterns.iter().map(String::as_str).collect::<Vec<_>>());
        for text in &texts {
            total += 1;
            if let Some(i) = list.first_match_linear(text) {
                found += 1;
                late += usize::from(i >= 16);
            }
        }
    }
    assert!(found * 3 > total, "{found} matches in {total} texts");
    assert!(late > 100, "{late} matches past the 16th glob");
}

/// Bash and fetch get a tier each of `rules` (deny, allow, escalate), `"*"`
/// some of each, the hardlines the first two; `paths` false leaves out the
/// hardline paths (a profile refuses path globs no normal path matches).
fn profile(rules: &[Vec<String>; 3], hosts: &[String], paths: bool) -> PolicySpec {
    let [deny, allow, escalate] = rules;
    let spec = json!({
        "mode": "rules",
        "rules": {
            "bash": {"deny": deny, "allow": allow, "escalate": escalate},
            "fetch": {"allow": allow, "escalate": escalate},
            "*": {"deny": &deny[..deny.len().min(3)], "escalate": &escalate[..escalate.len().min(3)]},
        },
        "hardline": {"commands": deny, "paths": if paths { allow.clone() } else { Vec::new() }},
        "egress": {"allowHosts": hosts},
        "effects": {
            "bash": {"sideEffect": "PROCESS_EXEC", "risk": "high"},
            "reader": {"sideEffect": "WORKSPACE_READ", "risk": "low"},
            "fetch": {"sideEffect": "NETWORK_READ", "risk": "low", "hostArgs": ["host"]},
        },
    });
    load::from_str(&spec.to_string()).expect("generated profile loads")
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c]{1,3}(\\.[a-c]{1,3}){0,2}",
        "\\*\\.[a-c]{1,3}\\.example",
        "[a-c]{1,3}\\.\\*",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whole profiles, evaluated with the index and with the linear search,
    /// give the same verdict, reason and matched rule (the whole verdict).
    #[test]
    fn profiles_decide_the_same_with_and_without_the_index(
        (patterns, texts) in case(),
        more in prop::collection::vec(glob(), 0..40),
        hosts in prop::collection::vec(host(), 0..30),
        call_hosts in prop::collection::vec("[a-cA-C.]{1,9}(\\.example)?", 1..4),
    ) {
        let patterns: Vec<String> = patterns.iter().chain(&more).cloned().collect();
        let third = patterns.len() / 3;
        let rules = [
            patterns[..third].to_vec(),
            patterns[third..2 * third].to_vec(),
            patterns[2 * third..].to_vec(),
        ];
        let policy = CompiledPolicy::compile("p", &profile(&rules, &hosts, true), &[])
            .or_else(|_| CompiledPolicy::compile("p", &profile(&rules, &hosts, false), &[]))
            .expect("generated profile compiles");
        let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
        let mut calls = Vec::new();
        for text in &texts {
            calls.push(("bash", json!({"command": text})));
            calls.push(("reader", json!({"path": text})));
        }
        for host in &call_hosts {
            calls.push(("fetch", json!({"host": host})));
        }
        for (tool, arguments) in calls {
            let call = Call { tool, action: None, arguments: arguments.as_object().unwrap() };
            let indexed = policy.evaluate(&call, &ctx);
            LINEAR_ONLY.set(true);
            let linear = policy.evaluate(&call, &ctx);
            LINEAR_ONLY.set(false);
            prop_assert_eq!(indexed, linear, "{} {}", tool, arguments);
        }
    }
}
