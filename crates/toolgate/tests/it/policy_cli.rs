//! `toolgate check`, `toolgate test` and `toolgate demo` as a user runs them.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn write_temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toolgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_prints_the_verdict() {
    let profile = repo("examples/profiles/safe-coding.yaml");
    let out = toolgate(&[
        "check",
        "--profile",
        profile.to_str().unwrap(),
        "--tool",
        "bash",
        "--args",
        r#"{"command":"rm -rf /"}"#,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["verdict"], "deny");
    assert_eq!(v["reason"], "deny_rule");
    assert_eq!(v["matched_rule"], "deny:bash:rm *");
    assert!(
        v["policy_version"]
            .as_str()
            .unwrap()
            .starts_with("safe-coding@")
    );
    assert!(v["args_digest"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn check_reports_typed_errors_with_exit_2() {
    let profile = repo("examples/profiles/safe-coding.yaml");
    let p = profile.to_str().unwrap();
    let out = toolgate(&["check", "--profile", p, "--tool", "bash", "--args", "[1]"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json(&out)["error"]["code"], "invalid_arguments");

    let cases = [
        (
            "spec: {mode: rules, colour: red}",
            "profile_unknown_field",
            "colour",
        ),
        (
            "spec: {mode: sometimes}",
            "profile_invalid_mode",
            "spec.mode",
        ),
        (
            "spec: {mode: rules, rules: {bash: {allow: [ls]}}}",
            "profile_incomplete_effects",
            "spec.rules.bash",
        ),
        (
            "spec: {mode: rules, rules: {x: {allow: ['']}}, effects: {x: {sideEffect: NONE, risk: low}}}",
            "profile_invalid_glob",
            "spec.rules.x.allow[0]",
        ),
        (
            "spec: {mode: rules, hardline: {cidrs: [nope]}}",
            "profile_invalid_cidr",
            "spec.hardline.cidrs[0]",
        ),
        ("spec: [", "profile_parse", ""),
    ];
    for (spec, code, needle) in cases {
        let text = format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: PolicyProfile\nmetadata: {{name: t}}\n{spec}\n"
        );
        let path = write_temp(&format!("{code}.yaml"), &text);
        let out = toolgate(&["check", "--profile", path.to_str().unwrap(), "--tool", "x"]);
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let v = json(&out);
        assert_eq!(v["error"]["code"], code, "{spec}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{spec}: {v}"
        );
    }
    let out = toolgate(&[
        "check",
        "--profile",
        "/nonexistent/profile.yaml",
        "--tool",
        "x",
    ]);
    assert_eq!(
        (out.status.code(), json(&out)["error"]["code"].as_str()),
        (Some(2), Some("io_error"))
    );
}

#[test]
fn example_case_files_pass() {
    for name in [
        "safe-coding",
        "read-only",
        "strict-trial",
        "claude-code",
        "research-agent",
    ] {
        let profile = repo(&format!("examples/profiles/{name}.yaml"));
        let cases = repo(&format!("examples/cases/{name}.yaml"));
        let out = toolgate(&[
            "test",
            "--profile",
            profile.to_str().unwrap(),
            cases.to_str().unwrap(),
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        let last = stdout.lines().last().unwrap();
        assert!(last.ends_with(" passed, 0 failed"), "{last}");
        assert!(!last.starts_with("0 passed"), "{last}");
    }
}

#[test]
fn test_command_reports_failures_with_expected_and_got() {
    let profile = repo("examples/profiles/safe-coding.yaml");
    let cases = write_temp(
        "cases.yaml",
        "- {name: right, tool: bash, args: {command: ls}, expect: allow}\n- {name: wrong, tool: bash, args: {command: rm x}, expect: allow, reason: allow_rule}\n",
    );
    let out = toolgate(&[
        "test",
        "--profile",
        profile.to_str().unwrap(),
        cases.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "FAIL wrong: expected allow (allow_rule), got deny (deny_rule), matched rule deny:bash:rm *"
        ),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("1 passed, 1 failed"));

    let bad = write_temp("bad-cases.yaml", "- {name: x, tool: bash, expect: maybe}\n");
    let out = toolgate(&[
        "test",
        "--profile",
        profile.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json(&out)["error"]["code"], "profile_invalid_value");
}

#[test]
fn demo_runs_from_any_directory() {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("demo")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("deny:bash:rm *"), "{stdout}");
    assert!(stdout.contains("hardline:cidrs:169.254.0.0/16"), "{stdout}");
    assert!(stdout.contains("url_ambiguous"), "{stdout}");
    assert!(stdout.contains("0 differed"), "{stdout}");
    // The scripted session, MCP gateway scene included, behaved as scripted.
    assert!(stdout.contains("purge_all hidden"), "{stdout}");
    assert!(stdout.contains("session behaved as scripted"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn cases_can_pin_what_a_dry_run_profile_would_answer() {
    let profile = repo("examples/profiles/strict-trial.yaml");
    let wrong = write_temp(
        "would.yaml",
        "- {name: wrong would, tool: bash, args: {command: rm -rf /}, expect: allow, would_verdict: allow}\n\
         - {name: right would, tool: bash, args: {command: rm -rf /}, expect: allow, would_verdict: deny, would_reason: no_matching_rule}\n",
    );
    let out = toolgate(&[
        "test",
        "--profile",
        profile.to_str().unwrap(),
        wrong.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL wrong would: expected allow, would allow (any), got allow (not_enforced), would deny (no_matching_rule)"),
        "{stdout}"
    );
    assert!(stdout.ends_with("1 passed, 1 failed\n"), "{stdout}");
    // A would-field is not a typo-tolerant extra: unknown keys still fail.
    let typo = write_temp(
        "typo.yaml",
        "- {name: t, tool: bash, args: {}, expect: allow, would_verdit: deny}\n",
    );
    let out = toolgate(&[
        "test",
        "--profile",
        profile.to_str().unwrap(),
        typo.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    // The case file's fault, named as such (not the profile's).
    let error = json(&out);
    assert_eq!(error["error"]["code"], "case_unknown_field", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("would_verdit"),
        "{error}"
    );
}

#[test]
fn check_and_test_replay_a_runs_history_for_flow_rules() {
    let profile = repo("examples/profiles/research-agent.yaml");
    let history = write_temp(
        "history.yaml",
        "- {tool: fs.read_text_file, args: {path: /srv/secrets/token}}\n\
         - {tool: web.fetch, args: {url: \"https://news.example/a\"}}\n",
    );
    let post = |history: Option<&std::path::Path>| {
        let mut args = vec![
            "check",
            "--profile",
            profile.to_str().unwrap(),
            "--tool",
            "web.post",
            "--args",
            r#"{"url":"https://hooks.example/x"}"#,
        ];
        if let Some(h) = history {
            args.extend(["--history", h.to_str().unwrap()]);
        }
        json(&toolgate(&args))
    };
    assert_eq!(post(None)["verdict"], "allow");
    let v = post(Some(&history));
    assert_eq!(
        (v["verdict"].as_str(), v["reason"].as_str()),
        (Some("deny"), Some("flow_rule")),
        "{v}"
    );
    assert_eq!(
        v["matched_rule"],
        "flow:no-exfiltration when private+untrusted"
    );

    // A history entry is checked as strictly as a case.
    let typo = write_temp(
        "history-typo.yaml",
        "- name: t\n  tool: web.post\n  args: {url: \"https://hooks.example/x\"}\n  expect: allow\n  history: [{tool: web.fetch, arg: {}}]\n",
    );
    let out = toolgate(&[
        "test",
        "--profile",
        profile.to_str().unwrap(),
        typo.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json(&out)["error"]["code"], "case_unknown_field");
}
