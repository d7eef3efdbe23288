//! Hardline paths hold for every spelling of a path: arguments that name
//! paths are normalized before any glob sees them (issue #31, item 7).

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate_policy::paths::normalize;
use toolgate_policy::{
    Call, CompiledPolicy, Context, Decision, Enforcement, Reason, Verdict, load,
};

/// `allowAll` with `/w/.env` and `**/secrets/*` hardlined: only a hardline
/// (or a path refusal) can deny here.
const PROFILE: &str = r#"
mode: allowAll
hardline: {paths: ["/w/.env", "**/secrets/*", "**/.env"]}
effects:
  reader:            {sideEffect: WORKSPACE_READ, risk: low}
  editor:            {sideEffect: WORKSPACE_WRITE, risk: write}
  search:            {sideEffect: WORKSPACE_READ, risk: low}
  workspace.read:    {sideEffect: WORKSPACE_READ, risk: low}
  fs.read_text_file: {sideEffect: WORKSPACE_READ, risk: low}
  fs.write_file:     {sideEffect: WORKSPACE_WRITE, risk: write}
  fs.move_file:      {sideEffect: WORKSPACE_WRITE, risk: write, pathArgs: [source, destination]}
  fs.read_multiple_files: {sideEffect: WORKSPACE_READ, risk: low, pathArgs: [paths]}
  fetch_doc:         {sideEffect: NONE, risk: low, pathArgs: [target]}
"#;

fn policy(yaml: &str) -> CompiledPolicy {
    let spec = load::from_str(yaml).expect("test spec parses");
    CompiledPolicy::compile("p", &spec, &[]).expect("test spec compiles")
}

fn eval(policy: &CompiledPolicy, tool: &str, arguments: Value) -> Verdict {
    let arguments: Map<String, Value> = arguments.as_object().cloned().expect("object");
    policy.evaluate(
        &Call {
            tool,
            action: None,
            arguments: &arguments,
        },
        &Context::at(jiff::Timestamp::UNIX_EPOCH),
    )
}

#[test]
fn issue_variants_of_a_hardlined_path_are_denied() {
    let p = policy(PROFILE);
    for path in [
        "/w/.env",
        "/w/.env/",
        "/w//.env//",
        "/w/.env/.",
        "/w/./.env",
        "//w/.env",
        "/w/sub/../.env",
        "/w/sub/.env/.",
        "/w/sub//.env/",
        "/w/secrets//key",
        "/w/secrets/./key/",
    ] {
        for tool in ["reader", "workspace.read", "fs.read_text_file"] {
            let v = eval(&p, tool, json!({"path": path}));
            assert_eq!(v.reason, Reason::HardlinePath, "{tool} {path:?}");
        }
        let v = eval(&p, "editor", json!({"file_path": path, "content": "x"}));
        assert_eq!(v.reason, Reason::HardlinePath, "editor {path:?}");
        let v = eval(&p, "fs.write_file", json!({"path": path, "content": "x"}));
        assert_eq!(v.reason, Reason::HardlinePath, "fs.write_file {path:?}");
        let v = eval(&p, "search", json!({"pattern": "KEY", "path": path}));
        assert_eq!(v.reason, Reason::HardlinePath, "search {path:?}");
    }
    // Other files stay allowed, spelled any way.
    for path in [
        "/w/env",
        "/w/.env.example/",
        "/w//src/./main.rs",
        "/w/a/../b",
    ] {
        let v = eval(&p, "fs.read_text_file", json!({"path": path}));
        assert_eq!(v.verdict, Decision::Allow, "{path:?}");
    }
}

#[test]
fn declared_path_args_are_normalized_and_hardlined() {
    let p = policy(PROFILE);
    let v = eval(
        &p,
        "fs.move_file",
        json!({"source": "/w/notes", "destination": "/w/sub/.env/."}),
    );
    assert_eq!(v.reason, Reason::HardlinePath);
    let v = eval(
        &p,
        "fs.read_multiple_files",
        json!({"paths": ["/w/ok", "/w//.env/"]}),
    );
    assert_eq!(v.reason, Reason::HardlinePath);
    // pathArgs makes hardline paths apply to a tool of any side effect.
    let v = eval(&p, "fetch_doc", json!({"target": "/w/.env/"}));
    assert_eq!(v.reason, Reason::HardlinePath);
    let v = eval(
        &p,
        "fs.move_file",
        json!({"source": "/w/a", "destination": "/w/b//"}),
    );
    assert_eq!(v.verdict, Decision::Allow);
}

#[test]
fn paths_that_climb_out_or_hold_nul_are_denied_in_every_mode() {
    for mode in ["enforce", "warn", "dryRun"] {
        let p = policy(&format!("{PROFILE}enforcement: {mode}\n"));
        assert_eq!(
            p.enforcement("reader"),
            Enforcement::from_wire(mode).unwrap()
        );
        for (tool, args, reason) in [
            (
                "reader",
                json!({"path": "../etc/passwd"}),
                Reason::PathEscapes,
            ),
            ("reader", json!({"path": "a/../../x"}), Reason::PathEscapes),
            (
                "workspace.read",
                json!({"path": "/.."}),
                Reason::PathEscapes,
            ),
            (
                "fs.read_multiple_files",
                json!({"paths": ["ok", "/w/../../x"]}),
                Reason::PathEscapes,
            ),
            (
                "editor",
                json!({"file_path": "/w/.env\u{0}.txt"}),
                Reason::PathInvalid,
            ),
        ] {
            let v = eval(&p, tool, args.clone());
            assert_eq!(
                (v.verdict, v.reason),
                (Decision::Deny, reason),
                "{mode} {tool} {args}"
            );
            assert!(v.enforced);
        }
    }
}

#[test]
fn rule_globs_see_the_normalized_path() {
    let p = policy(
        r#"
mode: rules
rules:
  reader: {allow: ["src/*"], escalate: ["docs/*"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low}
"#,
    );
    let v = eval(&p, "reader", json!({"path": "src//main.rs"}));
    assert_eq!(v.matched_rule.as_deref(), Some("allow:reader:src/*"));
    let v = eval(&p, "reader", json!({"path": "src/../docs/x"}));
    assert_eq!(v.reason, Reason::EscalateRule);
    // The verdict stays bound to the arguments as sent.
    let raw = eval(&p, "reader", json!({"path": "src//main.rs"}));
    let plain = eval(&p, "reader", json!({"path": "src/main.rs"}));
    assert_ne!(raw.args_digest, plain.args_digest);
}

#[test]
fn hardline_globs_no_normalized_path_can_match_are_refused() {
    for glob in ["/w/.env/", "/w//.env", "/w/./.env", "**/../x", "./x"] {
        let yaml = format!(
            "{{mode: allowAll, hardline: {{paths: ['{glob}']}}, effects: {{reader: {{sideEffect: WORKSPACE_READ, risk: low}}}}}}"
        );
        let spec = load::from_str(&yaml).unwrap();
        let err = CompiledPolicy::compile("p", &spec, &[]).unwrap_err();
        assert_eq!(err.code(), "profile_invalid_glob", "{glob}");
        assert_eq!(err.field(), Some("spec.hardline.paths[0]"));
    }
    for glob in ["/", "**/.env", "/w/*", ".", "*.pem"] {
        let yaml = format!(
            "{{mode: allowAll, hardline: {{paths: ['{glob}']}}, effects: {{reader: {{sideEffect: WORKSPACE_READ, risk: low}}}}}}"
        );
        let spec = load::from_str(&yaml).unwrap();
        assert!(CompiledPolicy::compile("p", &spec, &[]).is_ok(), "{glob}");
    }
    let yaml = "{mode: allowAll, effects: {t: {sideEffect: NONE, risk: low, pathArgs: []}}}";
    let err = CompiledPolicy::compile("p", &load::from_str(yaml).unwrap(), &[]).unwrap_err();
    assert_eq!(err.field(), Some("spec.effects.t.pathArgs"));
}

/// One way of spelling a path segment boundary differently.
#[derive(Debug, Clone)]
enum Detour {
    ExtraSlash,
    Dot,
    UpAndBack(String),
}

fn detour() -> impl Strategy<Value = Detour> {
    prop_oneof![
        Just(Detour::ExtraSlash),
        Just(Detour::Dot),
        "[a-z.]{1,4}"
            .prop_filter("a real segment", |s| s != "." && s != "..")
            .prop_map(Detour::UpAndBack),
    ]
}

/// `segments` joined by `/`, with `detours` inserted before the segments
/// they are paired with, and optional trailing noise.
fn spelled(absolute: bool, segments: &[&str], detours: &[Option<Detour>], tail: u8) -> String {
    let mut out = String::new();
    if absolute {
        out.push('/');
    }
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        match detours.get(i).cloned().flatten() {
            None => {}
            Some(Detour::ExtraSlash) => out.push('/'),
            Some(Detour::Dot) => out.push_str("./"),
            Some(Detour::UpAndBack(s)) => {
                out.push_str(&s);
                out.push_str("/../");
            }
        }
        out.push_str(segment);
    }
    match tail % 4 {
        1 => out.push('/'),
        2 => out.push_str("/."),
        3 => out.push_str("//"),
        _ => {}
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("TOOLGATE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// No normalization variant of a hardlined path is allowed, through
    /// any path-bearing tool.
    #[test]
    fn no_variant_of_a_hardlined_path_is_allowed(
        dirs in prop::collection::vec("[a-z]{1,5}", 0..3),
        detours in prop::collection::vec(prop::option::weighted(0.6, detour()), 0..6),
        tail in any::<u8>(),
        target in prop::sample::select(vec![".env", "secrets/key"]),
        tool in prop::sample::select(vec!["reader", "workspace.read", "fs.read_text_file", "fs.write_file"]),
    ) {
        let p = policy(PROFILE);
        let mut segments: Vec<&str> = dirs.iter().map(String::as_str).collect();
        segments.extend(target.split('/'));
        let path = spelled(true, &segments, &detours, tail);
        let v = eval(&p, tool, json!({"path": path, "content": "x"}));
        prop_assert_eq!(v.reason, Reason::HardlinePath, "{} {:?}", tool, path);
        let v = eval(&p, "fs.move_file", json!({"source": "/w/a", "destination": path}));
        prop_assert_eq!(v.reason, Reason::HardlinePath, "move {:?}", path);
    }

    /// Normalization is idempotent, never grows a path, and leaves no
    /// empty, `.` or `..` segment.
    #[test]
    fn normal_form_is_a_fixed_point(raw in "/?([a-z.]{0,3}/{0,2}){0,6}") {
        if let Ok(once) = normalize(&raw) {
            let twice = normalize(&once).unwrap();
            prop_assert_eq!(&twice, &once);
            prop_assert!(once.len() <= raw.len().max(1));
            let body = once.strip_prefix('/').unwrap_or(&once);
            if !body.is_empty() && body != "." {
                prop_assert!(body.split('/').all(|s| !matches!(s, "" | "." | "..")), "{:?}", once);
            }
        }
    }
}
