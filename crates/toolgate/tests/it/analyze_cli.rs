//! `toolgate analyze` as a user runs it: exit codes, the JSON document and
//! the table, for one profile and for a comparison.

use std::path::PathBuf;
use std::process::{Command, Output};

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate")
}

fn write_temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-analyze-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write profile");
    path
}

fn profile(name: &str, bash_rules: &str) -> PathBuf {
    write_temp(
        &format!("{name}.yaml"),
        &format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: PolicyProfile\nmetadata: {{name: {name}}}\n\
             spec:\n  mode: rules\n  rules: {{bash: {bash_rules}}}\n  \
             effects: {{bash: {{sideEffect: PROCESS_EXEC, risk: high}}}}\n"
        ),
    )
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn a_loosening_escalate_fails_with_exit_3_and_a_witness() {
    let bad = profile("loose", "{allow: ['git *'], escalate: ['git push *']}");
    let path = bad.to_str().expect("utf-8 path");
    let out = toolgate(&["analyze", "--profile", path, "--format", "json"]);
    assert_eq!(out.status.code(), Some(3));
    let doc = json(&out);
    assert_eq!(doc["profile"], "loose");
    let finding = &doc["findings"][0];
    assert_eq!(finding["code"], "shadowed_escalate");
    assert_eq!(finding["severity"], "error");
    assert_eq!(finding["field"], "spec.rules.bash.escalate[0]");
    assert_eq!(finding["witness"], "git push ");

    let table = toolgate(&["analyze", "--profile", path]);
    assert_eq!(table.status.code(), Some(3));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("SEVERITY"), "{text}");
    assert!(text.contains("shadowed_escalate"), "{text}");
    assert!(
        text.contains("loose: 1 error(s), 0 other finding(s)"),
        "{text}"
    );

    let good = profile("tidy", "{allow: ['git status'], escalate: ['git *']}");
    let out = toolgate(&["analyze", "--profile", good.to_str().expect("utf-8")]);
    // escalate_partly_allowed is a warning: exit 0.
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("escalate_partly_allowed"));
}

#[test]
fn bad_input_exits_2() {
    let missing = toolgate(&["analyze", "--profile", "/nonexistent/profile.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    let invalid = write_temp(
        "invalid.yaml",
        "apiVersion: toolgate.dev/v1alpha1\nkind: Nope\n",
    );
    let out = toolgate(&["analyze", "--profile", invalid.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    // Neither --profile nor --compare: clap's usage error.
    assert_eq!(toolgate(&["analyze"]).status.code(), Some(2));
}

#[test]
fn compare_reports_relation_and_witness_calls() {
    let old = profile("old", "{deny: ['rm *'], allow: ['git *']}");
    let new = profile("new", "{allow: ['git *', 'rm *']}");
    let (old, new) = (old.to_str().expect("utf-8"), new.to_str().expect("utf-8"));
    let out = toolgate(&["analyze", "--compare", old, new, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc = json(&out);
    let bash = &doc["tools"][0];
    assert_eq!(bash["tool"], "bash");
    assert_eq!(bash["relation"], "more_permissive");
    let w = &bash["witnesses"][0];
    assert_eq!(
        (&w["argument"], &w["old"], &w["new"], &w["reproduced"]),
        (
            &serde_json::json!("rm "),
            &serde_json::json!("deny"),
            &serde_json::json!("allow"),
            &serde_json::json!(true)
        )
    );
    assert_eq!(w["arguments"], serde_json::json!({"command": "rm "}));
    // Reversed, the change is a tightening; the table says so.
    let table = toolgate(&["analyze", "--compare", new, old]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("less_permissive"), "{text}");
    assert!(
        text.contains("\"rm \" was allow (allow_rule), is deny (deny_rule)"),
        "{text}"
    );
}

/// Globs are judged as the evaluator matches them: a text with an
/// uppercase letter is also tried in lowercase, so `git *` allows `GIT x`.
#[test]
fn globs_are_judged_with_the_evaluators_lowercase_copy() {
    // `GIT *` never asks: every call it matches is allowed by `git *`.
    let shadowed = profile("upper", "{allow: ['git *'], escalate: ['GIT *']}");
    let out = toolgate(&[
        "analyze",
        "--profile",
        shadowed.to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let finding = &json(&out)["findings"][0];
    assert_eq!(
        (&finding["code"], &finding["field"]),
        (
            &serde_json::json!("shadowed_escalate"),
            &serde_json::json!("spec.rules.bash.escalate[0]")
        )
    );

    // `git *` allows all `Git *` did and more (`git x`, `GIT x`): a
    // loosening, with a witness the evaluator reproduces.
    let old = profile("titled", "{allow: ['Git *']}");
    let new = profile("lowered", "{allow: ['git *']}");
    let (old, new) = (old.to_str().expect("utf-8"), new.to_str().expect("utf-8"));
    let doc = json(&toolgate(&[
        "analyze",
        "--compare",
        old,
        new,
        "--format",
        "json",
    ]));
    let bash = &doc["tools"][0];
    assert_eq!(bash["relation"], "more_permissive", "{doc}");
    let witnesses = bash["witnesses"].as_array().expect("witnesses");
    assert!(!witnesses.is_empty(), "{doc}");
    for w in witnesses {
        assert_eq!(
            (&w["old"], &w["new"]),
            (&serde_json::json!("deny"), &serde_json::json!("allow"))
        );
        assert_eq!(w["reproduced"], true, "{w}");
    }

    // `GIT *` beside `git *` changes nothing.
    let both = profile("both", "{allow: ['git *', 'GIT *']}");
    let doc = json(&toolgate(&[
        "analyze",
        "--compare",
        new,
        both.to_str().expect("utf-8"),
        "--format",
        "json",
    ]));
    assert_eq!(doc["tools"][0]["relation"], "equivalent", "{doc}");
    assert_eq!(doc["tools"][0]["witnesses"], serde_json::json!([]));
}
