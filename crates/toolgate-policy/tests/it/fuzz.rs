//! Property-based fuzzing of the profile loader, compiler and evaluator:
//! arbitrary text, and generated specs built from the real field names with
//! generated values, must load, compile and evaluate to a result or a typed
//! error with a stable code — never a panic. Cases: `TOOLGATE_FUZZ_CASES`
//! (default 256); `scripts/fuzz.sh` runs the long version.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate_policy::{Call, CompiledPolicy, Context, PolicySpec, load};

fn config() -> ProptestConfig {
    let cases = std::env::var("TOOLGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig::with_cases(cases)
}

fn glob() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z*?\\[\\]!/.^-]{1,10}",
        2 => Just("**/.env".to_owned()),
        1 => Just("[".to_owned()),
        1 => ".{0,12}"
    ]
}

fn side_effect() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => Just(json!("NONE")),
        4 => Just(json!("WORKSPACE_READ")),
        4 => Just(json!("WORKSPACE_WRITE")),
        4 => Just(json!("NETWORK_READ")),
        4 => Just(json!("PROCESS_EXEC")),
        1 => Just(json!("TELEPORT")),
        1 => Just(json!(3)),
    ]
}

/// A spec from the real vocabulary, some of it wrong.
fn spec() -> impl Strategy<Value = Value> {
    let tool = prop_oneof![
        3 => Just("bash".to_owned()),
        3 => Just("fetch".to_owned()),
        1 => Just("*".to_owned()),
        1 => "[a-z]{1,4}"
    ];
    let tiers = (
        prop::collection::vec(glob(), 0..3),
        prop::collection::vec(glob(), 0..3),
    )
        .prop_map(|(deny, allow)| json!({"deny": deny, "allow": allow}));
    let effect = (side_effect(), prop_oneof![4 => Just("low"), 4 => Just("high"), 4 => Just("write"), 1 => Just("huge")], any::<bool>(),
                  prop::option::of(prop_oneof![4 => Just("enforce"), 4 => Just("dryRun"), 4 => Just("warn"), 1 => Just("audit")]))
        .prop_map(|(s, r, ro, mode)| {
            let mut e = json!({"sideEffect": s, "risk": r, "readOnly": ro});
            if let Some(m) = mode {
                e["enforcement"] = json!(m);
            }
            e
        });
    (
        prop_oneof![6 => Just("rules"), 2 => Just("allowAll"), 2 => Just("denyAll"), 1 => Just("maybe")],
        prop::collection::btree_map(tool.clone(), tiers, 0..3),
        prop::collection::btree_map(tool, effect, 0..3),
        prop::collection::vec(
            prop_oneof![
                3 => Just("10.0.0.0/8".to_owned()),
                3 => Just("::1/128".to_owned()),
                1 => "[0-9./]{0,18}"
            ],
            0..3
        ),
        prop::collection::vec(glob(), 0..3),
        prop::option::of((prop::option::of(0u64..5), prop::option::of(0u64..4_000_000_000))),
        prop::option::weighted(0.1, "[a-z]{1,6}"),
    )
        .prop_map(|(mode, rules, effects, cidrs, hosts, budgets, unknown)| {
            let mut s = json!({
                "mode": mode, "rules": rules, "effects": effects,
                "hardline": {"cidrs": cidrs, "paths": ["**/.env"]},
                "egress": {"allowHosts": hosts},
            });
            if let Some((calls, secs)) = budgets {
                s["budgets"] = json!({"maxCallsPerRun": calls, "maxRunSeconds": secs});
            }
            if let Some(field) = unknown {
                s[field] = json!(1);
            }
            s
        })
}

fn arguments() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        ".{0,30}".prop_map(Value::String),
        Just(json!("http://2130706433/x")),
        Just(json!("rm -rf / ; id")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::btree_map(
            prop_oneof![
                Just("command".to_owned()),
                Just("url".to_owned()),
                Just("host".to_owned()),
                Just("path".to_owned()),
                "[a-z]{1,5}"
            ],
            inner,
            0..4,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()))
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_panics_the_loader(text in ".{0,400}") {
        if let Err(e) = load::parse_manifest(&text) {
            prop_assert!(!e.code().is_empty());
        }
    }

    #[test]
    fn generated_specs_load_compile_and_evaluate_or_fail_typed(s in spec(), args in arguments(), tool in "[a-z*]{0,5}") {
        let text = serde_json::to_string(&s).unwrap();
        let parsed: Result<PolicySpec, _> = load::from_str(&text);
        let Ok(parsed) = parsed else {
            prop_assert!(!parsed.unwrap_err().code().is_empty());
            return Ok(());
        };
        let policy = match CompiledPolicy::compile("fuzz", &parsed, &[]) {
            Ok(p) => p,
            Err(e) => {
                prop_assert!(!e.code().is_empty());
                return Ok(());
            }
        };
        let arguments = match args {
            Value::Object(m) => m,
            other => [("value".to_owned(), other)].into_iter().collect(),
        };
        for t in [tool.as_str(), "bash", "fetch"] {
            let call = Call { tool: t, action: None, arguments: &arguments };
            let v = policy.evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH));
            // Total and consistent: the reason belongs to the verdict.
            prop_assert_eq!(v.reason.decision(), v.verdict);
            prop_assert_eq!(v.enforced, v.would_verdict.is_none());
            prop_assert!(v.call_digest.starts_with("sha256:"));
        }
    }
}

#[test]
fn the_generator_reaches_the_evaluator() {
    // The property above proves little if its specs rarely compile: count
    // them for a fixed seed.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = spec();
    let mut compiled = 0;
    for _ in 0..200 {
        let s = proptest::strategy::ValueTree::current(&strategy.new_tree(&mut runner).unwrap());
        if let Ok(parsed) = load::from_str::<PolicySpec>(&s.to_string())
            && CompiledPolicy::compile("fuzz", &parsed, &[]).is_ok()
        {
            compiled += 1;
        }
    }
    assert!(
        compiled >= 10,
        "only {compiled}/200 generated specs compiled"
    );
}
