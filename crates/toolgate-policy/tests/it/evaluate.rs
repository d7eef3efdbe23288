//! Evaluation order, content addresses and validation, through the public API.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate_policy::{
    Call, CompiledPolicy, Context, Decision, Grant, PolicySpec, Reason, compile_manifest, load,
};

fn spec(yaml: &str) -> PolicySpec {
    load::from_str(yaml).expect("test spec parses")
}

fn compile(yaml: &str) -> CompiledPolicy {
    CompiledPolicy::compile("p", &spec(yaml), &[]).expect("test spec compiles")
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("object")
}

fn eval(policy: &CompiledPolicy, tool: &str, arguments: Value) -> toolgate_policy::Verdict {
    let arguments = args(arguments);
    policy.evaluate(
        &Call {
            tool,
            action: None,
            arguments: &arguments,
        },
        &Context::at(jiff::Timestamp::UNIX_EPOCH),
    )
}

const BASH: &str = "bash: {sideEffect: PROCESS_EXEC, risk: high}";

#[test]
fn issue_example_manifest_loads_and_decides() {
    let policy = compile_manifest(
        r#"
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: coding, namespace: agents}
spec:
  mode: rules
  aliases: {bash_tool: bash}
  rules:
    bash: {deny: ["rm *"], allow: ["git status", "ls *"], escalate: ["*"]}
    "*": {deny: ["*secret*"]}
  hardline:
    commands: ["mkfs*"]
    paths: ["**/.env"]
    cidrs: ["169.254.0.0/16"]
  egress: {allowHosts: ["api.github.com"]}
  effects:
    bash:   {sideEffect: PROCESS_EXEC, risk: high, readOnly: false, allowParallel: false, matchArgs: [command]}
    reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
  approvals: {ttlSeconds: 900}
"#,
    )
    .unwrap();
    assert!(policy.version().version.starts_with("coding@"));
    let v = eval(&policy, "bash_tool", json!({"command": "ls -la"}));
    assert_eq!((v.verdict, v.reason), (Decision::Allow, Reason::AllowRule));
    assert_eq!(v.matched_rule.as_deref(), Some("allow:bash:ls *"));
    assert!(v.intent_required, "allowed high-risk calls need an intent");
    let v = eval(&policy, "bash", json!({"command": "cat my_secret"}));
    assert_eq!(v.matched_rule.as_deref(), Some("deny:*:*secret*"));
    let v = eval(&policy, "bash", json!({"command": "make"}));
    assert_eq!(
        (v.verdict, v.matched_rule.as_deref()),
        (Decision::Escalate, Some("escalate:bash:*"))
    );
    assert!(!v.intent_required);
    let v = eval(&policy, "reader", json!({"path": "x/.env"}));
    assert_eq!(v.matched_rule.as_deref(), Some("hardline:paths:**/.env"));
    let v = eval(&policy, "reader", json!({"path": "x/y"}));
    assert_eq!(v.reason, Reason::NoMatchingRule);
}

#[test]
fn verdict_json_has_the_stable_field_names() {
    let policy = compile(&format!(
        "{{mode: rules, rules: {{bash: {{allow: [ls]}}}}, effects: {{{BASH}}}}}"
    ));
    let v = serde_json::to_value(eval(&policy, "bash", json!({"command": "ls"}))).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "args_digest",
            "call_digest",
            "enforced",
            "intent_required",
            "matched_rule",
            "policy_version",
            "reason",
            "risk",
            "verdict"
        ]
    );
    assert_eq!(v["verdict"], "allow");
    assert_eq!(v["reason"], "allow_rule");
    assert_eq!(v["risk"], "high");
    assert_eq!(v["matched_rule"], "allow:bash:ls");
}

#[test]
fn modes_short_circuit_but_not_hardline() {
    let base = format!(
        "rules: {{bash: {{deny: ['*']}}}}, hardline: {{commands: ['mkfs*']}}, effects: {{{BASH}}}"
    );
    let allow_all = compile(&format!("{{mode: allowAll, {base}}}"));
    let v = eval(&allow_all, "bash", json!({"command": "ls; rm -rf /"}));
    assert_eq!(
        v.reason,
        Reason::ModeAllowAll,
        "allowAll ignores tiers and shell control"
    );
    let v = eval(&allow_all, "bash", json!({"command": "mkfs /dev/sda"}));
    assert_eq!(
        v.reason,
        Reason::HardlineCommand,
        "hardline wins over allowAll"
    );
    let deny_all = compile(&format!("{{mode: denyAll, {base}}}"));
    assert_eq!(
        eval(&deny_all, "bash", json!({"command": "ls"})).reason,
        Reason::ModeDenyAll
    );
    assert_eq!(
        eval(&deny_all, "nope", json!({})).reason,
        Reason::UnknownTool
    );
}

#[test]
fn shell_control_is_denied_before_allow_in_rules_mode() {
    let policy = compile(&format!(
        "{{mode: rules, rules: {{bash: {{allow: ['*']}}}}, effects: {{{BASH}}}}}"
    ));
    for cmd in [
        "ls && rm x",
        "ls || x",
        "a | b",
        "sleep 1 &",
        "`id`",
        "$(id)",
        "echo > f",
        "cat < f",
        "a\nb",
        "a;b",
    ] {
        let v = eval(&policy, "bash", json!({"command": cmd}));
        assert_eq!(
            (v.verdict, v.reason),
            (Decision::Deny, Reason::ShellControl),
            "{cmd:?}"
        );
    }
    assert_eq!(
        eval(&policy, "bash", json!({"command": "echo $HOME"})).reason,
        Reason::AllowRule
    );
}

/// Profiles are written for fnmatch: braces are literal (no alternation),
/// an unclosed `[` is a `[`, and a leading `**/` also covers the top level.
#[test]
fn globs_mean_what_fnmatch_means() {
    let policy = compile(&format!(
        "{{mode: allowAll, hardline: {{commands: ['*${{IFS}}*', '*:(){{ *', 'x[y*'], \
         paths: ['**/.env']}}, effects: {{{BASH}, \
         editor: {{sideEffect: WORKSPACE_WRITE, risk: low}}}}}}"
    ));
    for (cmd, denied) in [
        ("cat${IFS}/etc/shadow", true),
        ("cat$IFS/etc/shadow", false),
        (":(){ :|:& };:", true),
        ("x[y] --now", true),
        ("xy", false),
    ] {
        let v = eval(&policy, "bash", json!({"command": cmd}));
        assert_eq!(
            v.reason == Reason::HardlineCommand,
            denied,
            "{cmd:?}: {:?}",
            v.reason
        );
    }
    for (path, denied) in [(".env", true), ("a/b/.env", true), ("x.env", false)] {
        let v = eval(&policy, "editor", json!({"file_path": path}));
        assert_eq!(v.reason == Reason::HardlinePath, denied, "{path:?}");
    }
    // `?` is one character, not one byte; `*` crosses newlines.
    let policy = compile(&format!(
        "{{mode: rules, rules: {{bash: {{deny: ['rm *', 'caf? *']}}}}, effects: {{{BASH}}}}}"
    ));
    assert_eq!(
        eval(&policy, "bash", json!({"command": "café menu"})).reason,
        Reason::DenyRule
    );
}

#[test]
fn network_targets_hit_cidrs_and_egress() {
    let policy = compile(
        "{mode: allowAll, hardline: {cidrs: ['169.254.0.0/16', '10.0.0.0/8', 'fd00::/8']}, egress: {allowHosts: ['*.example.com']},
          effects: {fetch: {sideEffect: NETWORK_READ, risk: low}}}",
    );
    let cases = [
        (
            json!({"url": "http://169.254.169.254/"}),
            Reason::HardlineCidr,
        ),
        (
            json!({"url": "http://[::ffff:10.1.2.3]/"}),
            Reason::HardlineCidr,
        ),
        (json!({"url": "http://[fd00::1]/"}), Reason::HardlineCidr),
        (json!({"host": "10.9.9.9:22"}), Reason::HardlineCidr),
        (json!({"url": "http://0xA9FEA9FE/"}), Reason::UrlAmbiguous),
        (
            json!({"url": "https://api.example.com/x"}),
            Reason::ModeAllowAll,
        ),
        (
            json!({"url": "https://API.EXAMPLE.COM/x"}),
            Reason::ModeAllowAll,
        ),
        (
            json!({"url": "https://example.com/x"}),
            Reason::EgressHostNotAllowed,
        ),
        (
            json!({"url": "https://api.example.com.evil.io/"}),
            Reason::EgressHostNotAllowed,
        ),
        (json!({"host": "localhost"}), Reason::EgressHostNotAllowed),
        (json!({"url": "https://8.8.8.8/"}), Reason::ModeAllowAll),
        (
            json!({"url": "https://api.example.com/", "host": "10.0.0.1"}),
            Reason::HardlineCidr,
        ),
        (json!({}), Reason::NetworkTargetInvalid),
        (json!({"url": 42}), Reason::NetworkTargetInvalid),
        (json!({"url": "mailto:x"}), Reason::UrlSchemeNotAllowed),
        (json!({"url": "not-a-url"}), Reason::NetworkTargetInvalid),
        (json!({"url": "not a url"}), Reason::UrlAmbiguous),
    ];
    for (arguments, reason) in cases {
        assert_eq!(
            eval(&policy, "fetch", arguments.clone()).reason,
            reason,
            "{arguments}"
        );
    }
}

#[test]
fn match_text_defaults_and_other_tools() {
    let policy = compile(
        "{mode: rules,
          rules: {search: {allow: ['TODO src']}, deploy: {allow: ['apply prod 3']}, custom: {allow: ['a b']}},
          effects: {
            search: {sideEffect: WORKSPACE_READ, risk: low},
            deploy: {sideEffect: EXTERNAL_WRITE, risk: high},
            custom: {sideEffect: NONE, risk: low, matchArgs: [second, first]}}}",
    );
    assert_eq!(
        eval(&policy, "search", json!({"path": "src", "pattern": "TODO"})).reason,
        Reason::AllowRule
    );
    // Other tools: action, then values in key order (replicas < target), numbers as JSON.
    let arguments = args(json!({"target": "3", "replicas": "prod"}));
    let v = policy.evaluate(
        &Call {
            tool: "deploy",
            action: Some("apply"),
            arguments: &arguments,
        },
        &Context::at(jiff::Timestamp::UNIX_EPOCH),
    );
    assert_eq!(v.reason, Reason::AllowRule);
    let arguments = args(json!({"replicas": "prod", "target": 3}));
    let v = policy.evaluate(
        &Call {
            tool: "deploy",
            action: Some("apply"),
            arguments: &arguments,
        },
        &Context::at(jiff::Timestamp::UNIX_EPOCH),
    );
    assert_eq!(
        v.reason,
        Reason::AllowRule,
        "non-string values as canonical JSON"
    );
    assert_eq!(
        eval(&policy, "custom", json!({"first": "b", "second": "a"})).reason,
        Reason::AllowRule
    );
    assert_eq!(
        eval(&policy, "custom", json!({"first": "a", "second": "b"})).reason,
        Reason::NoMatchingRule
    );
}

#[test]
fn grants_turn_escalations_into_allows_until_they_expire() {
    let spec = spec(&format!(
        "{{mode: rules, rules: {{bash: {{deny: ['rm *'], escalate: ['*']}}}}, effects: {{{BASH}}}}}"
    ));
    let grant = Grant {
        tool: "bash".into(),
        glob: "cargo *".into(),
        subjects: vec!["team-a".into()],
        expires_at: "2030-01-01T00:00:00Z".into(),
    };
    let plain = CompiledPolicy::compile("p", &spec, &[]).unwrap();
    let granted = CompiledPolicy::compile("p", &spec, std::slice::from_ref(&grant)).unwrap();
    assert_ne!(
        plain.version().version,
        granted.version().version,
        "grants change the version"
    );
    assert_eq!(
        plain.version().hardline_sha256,
        granted.version().hardline_sha256
    );

    let arguments = args(json!({"command": "cargo build"}));
    let call = Call {
        tool: "bash",
        action: None,
        arguments: &arguments,
    };
    let before: jiff::Timestamp = "2029-12-31T23:59:59Z".parse().unwrap();
    let after: jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
    let v = granted.evaluate(
        &call,
        &Context {
            now: before,
            subject: Some("team-a"),
            ..Context::at(before)
        },
    );
    assert_eq!(
        (v.verdict, v.reason),
        (Decision::Allow, Reason::ApprovedByGrant)
    );
    assert_eq!(v.matched_rule.as_deref(), Some("grant:bash:cargo *"));
    let v = granted.evaluate(
        &call,
        &Context {
            now: after,
            subject: Some("team-a"),
            ..Context::at(after)
        },
    );
    assert_eq!(v.verdict, Decision::Escalate, "expired grants do nothing");
    let v = granted.evaluate(
        &call,
        &Context {
            now: before,
            subject: Some("team-b"),
            ..Context::at(before)
        },
    );
    assert_eq!(
        v.verdict,
        Decision::Escalate,
        "grants are scoped to their subjects"
    );
    let arguments = args(json!({"command": "rm -rf x"}));
    let call = Call {
        tool: "bash",
        action: None,
        arguments: &arguments,
    };
    let v = granted.evaluate(
        &call,
        &Context {
            now: before,
            subject: Some("team-a"),
            ..Context::at(before)
        },
    );
    assert_eq!(v.reason, Reason::DenyRule, "grants never override a deny");
}

#[test]
fn invalid_profiles_get_typed_errors_naming_the_field() {
    let cases = [
        (
            format!("{{mode: rules, rules: {{editor: {{allow: ['*']}}}}, effects: {{{BASH}}}}}"),
            "profile_incomplete_effects",
            "spec.rules.editor",
        ),
        (
            "{mode: rules, effects: {m.t: {sideEffect: NONE, risk: low, definitionDigest: 'sha256:ABC'}}}".to_owned(),
            "profile_invalid_value",
            "spec.effects.m.t.definitionDigest",
        ),
        (
            format!("{{mode: rules, rules: {{bash: {{allow: ['']}}}}, effects: {{{BASH}}}}}"),
            "profile_invalid_glob",
            "spec.rules.bash.allow[0]",
        ),
        (
            format!("{{mode: rules, hardline: {{cidrs: [example.com]}}, effects: {{{BASH}}}}}"),
            "profile_invalid_cidr",
            "spec.hardline.cidrs[0]",
        ),
        (
            format!("{{mode: rules, hardline: {{cidrs: ['10.0.0.0/99']}}, effects: {{{BASH}}}}}"),
            "profile_invalid_cidr",
            "spec.hardline.cidrs[0]",
        ),
        (
            format!("{{mode: rules, aliases: {{sh: zsh}}, effects: {{{BASH}}}}}"),
            "profile_incomplete_effects",
            "spec.aliases.sh",
        ),
        (
            format!(
                "{{mode: rules, aliases: {{sh: bash}}, rules: {{sh: {{allow: [a]}}, bash: {{allow: [b]}}}}, effects: {{{BASH}}}}}"
            ),
            "profile_invalid_alias",
            "spec.rules.sh",
        ),
        (
            format!("{{mode: rules, approvals: {{ttlSeconds: 0}}, effects: {{{BASH}}}}}"),
            "profile_invalid_value",
            "spec.approvals.ttlSeconds",
        ),
        (
            format!(
                "{{mode: rules, effects: {{{BASH}, x: {{sideEffect: NONE, risk: low, matchArgs: []}}}}}}"
            ),
            "profile_invalid_value",
            "spec.effects.x.matchArgs",
        ),
    ];
    for (yaml, code, field) in cases {
        let err = CompiledPolicy::compile("p", &spec(&yaml), &[]).unwrap_err();
        assert_eq!(
            (err.code(), err.field()),
            (code, Some(field)),
            "{yaml}: {err}"
        );
        assert!(
            err.to_string().starts_with(field),
            "message names the field: {err}"
        );
    }
    let err = load::from_str::<PolicySpec>(
        "{mode: rules, effects: {bash: {sideEffect: SHELL, risk: high}}}",
    )
    .unwrap_err();
    assert_eq!(
        (err.code(), err.field()),
        ("profile_invalid_value", Some("effects.bash.sideEffect"))
    );
}

#[test]
fn digests_ignore_key_order_and_format() {
    let yaml = "apiVersion: toolgate.dev/v1alpha1\nkind: PolicyProfile\nmetadata: {name: p}\nspec:\n  mode: rules\n  effects: {b: {sideEffect: NONE, risk: low}, a: {risk: low, sideEffect: NONE}}\n  hardline: {paths: ['x'], commands: ['y']}\n";
    let json = r#"{"spec":{"hardline":{"commands":["y"],"paths":["x"]},"effects":{"a":{"sideEffect":"NONE","risk":"low"},"b":{"risk":"low","sideEffect":"NONE"}},"mode":"rules"},"metadata":{"name":"p"},"kind":"PolicyProfile","apiVersion":"toolgate.dev/v1alpha1"}"#;
    assert_eq!(
        compile_manifest(yaml).unwrap().version(),
        compile_manifest(json).unwrap().version()
    );
    let changed = yaml.replace("paths: ['x']", "paths: ['z']");
    let (a, b) = (
        compile_manifest(yaml).unwrap(),
        compile_manifest(&changed).unwrap(),
    );
    assert_eq!(
        a.version().spec_sha256,
        b.version().spec_sha256,
        "hardline is hashed apart"
    );
    assert_ne!(a.version().hardline_sha256, b.version().hardline_sha256);
}

// ---- properties ----

fn word() -> impl Strategy<Value = String> {
    "[a-z]{1,6}"
}

fn command() -> impl Strategy<Value = String> {
    prop::collection::vec(word(), 1..4).prop_map(|w| w.join(" "))
}

/// Every tier of every source holds a glob that matches `cmd` exactly; the
/// flags decide which ones exist.
fn tiered_policy(cmd: &str, flags: [bool; 7]) -> CompiledPolicy {
    let [hard, deny_t, deny_any, allow_t, allow_any, esc_t, esc_any] = flags;
    let list = |on: bool| {
        if on {
            format!("['{cmd}']")
        } else {
            "[]".into()
        }
    };
    let yaml = format!(
        "{{mode: rules, hardline: {{commands: {}}},
           rules: {{bash: {{deny: {}, allow: {}, escalate: {}}}, '*': {{deny: {}, allow: {}, escalate: {}}}}},
           effects: {{{BASH}}}}}",
        list(hard), list(deny_t), list(allow_t), list(esc_t), list(deny_any), list(allow_any), list(esc_any)
    );
    compile(&yaml)
}

proptest! {
    #[test]
    fn precedence_is_hardline_deny_allow_escalate_then_default(cmd in command(), flags in any::<[bool; 7]>()) {
        let policy = tiered_policy(&cmd, flags);
        let v = eval(&policy, "bash", json!({"command": cmd}));
        let [hard, deny_t, deny_any, allow_t, allow_any, esc_t, esc_any] = flags;
        let expected = if hard {
            (Decision::Deny, Reason::HardlineCommand, format!("hardline:commands:{cmd}"))
        } else if deny_t {
            (Decision::Deny, Reason::DenyRule, format!("deny:bash:{cmd}"))
        } else if deny_any {
            (Decision::Deny, Reason::DenyRule, format!("deny:*:{cmd}"))
        } else if allow_t {
            (Decision::Allow, Reason::AllowRule, format!("allow:bash:{cmd}"))
        } else if allow_any {
            (Decision::Allow, Reason::AllowRule, format!("allow:*:{cmd}"))
        } else if esc_t {
            (Decision::Escalate, Reason::EscalateRule, format!("escalate:bash:{cmd}"))
        } else if esc_any {
            (Decision::Escalate, Reason::EscalateRule, format!("escalate:*:{cmd}"))
        } else {
            (Decision::Deny, Reason::NoMatchingRule, String::new())
        };
        prop_assert_eq!(v.verdict, expected.0);
        prop_assert_eq!(v.reason, expected.1);
        prop_assert_eq!(v.matched_rule.unwrap_or_default(), expected.2);
    }

    #[test]
    fn hardline_wins_in_every_mode(cmd in command(), mode in prop::sample::select(vec!["allowAll", "denyAll", "rules"])) {
        let policy = compile(&format!(
            "{{mode: {mode}, hardline: {{commands: ['{cmd}*']}}, rules: {{bash: {{allow: ['*']}}}}, effects: {{{BASH}}}}}"
        ));
        let v = eval(&policy, "bash", json!({"command": cmd.to_uppercase()}));
        prop_assert_eq!(v.reason, Reason::HardlineCommand);
    }

    #[test]
    fn nothing_matched_is_always_deny(cmd in command(), other in command()) {
        prop_assume!(cmd != other);
        let policy = compile(&format!("{{mode: rules, rules: {{bash: {{allow: ['{other}'], escalate: ['{other}']}}}}, effects: {{{BASH}}}}}"));
        let v = eval(&policy, "bash", json!({"command": cmd}));
        prop_assert_eq!((v.verdict, v.reason), (Decision::Deny, Reason::NoMatchingRule));
    }

    #[test]
    fn args_digest_is_independent_of_key_order(pairs in prop::collection::btree_map(word(), word(), 0..8), seed in any::<u64>()) {
        let mut entries: Vec<(String, String)> = pairs.into_iter().collect();
        let forward = entries.iter().map(|(k, v)| format!("\"{k}\":\"{v}\"")).collect::<Vec<_>>().join(",");
        // A deterministic shuffle of the same entries.
        let n = entries.len().max(1);
        entries.rotate_left((seed as usize) % n);
        entries.reverse();
        let shuffled = entries.iter().map(|(k, v)| format!("\"{k}\":\"{v}\"")).collect::<Vec<_>>().join(",");
        let a: Map<String, Value> = serde_json::from_str(&format!("{{{forward}}}")).unwrap();
        let b: Map<String, Value> = serde_json::from_str(&format!("{{{shuffled}}}")).unwrap();
        prop_assert_eq!(toolgate_policy::args_digest(&a), toolgate_policy::args_digest(&b));
    }

    #[test]
    fn evaluation_never_panics_on_arbitrary_arguments(tool in "[a-z_*]{0,8}", key in "[a-z_]{0,6}", value in any::<String>()) {
        let policy = toolgate_policy::compile_manifest(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/profiles/safe-coding.yaml"))).unwrap();
        let mut arguments = Map::new();
        arguments.insert(key, Value::String(value));
        let v = policy.evaluate(&Call { tool: &tool, action: None, arguments: &arguments }, &Context::at(jiff::Timestamp::UNIX_EPOCH));
        prop_assert!(v.args_digest.starts_with("sha256:"));
    }
}

/// The verdict binds the whole call: the same arguments under another
/// action (or another spelling of the tool, via an alias) give another
/// call digest, while the alias resolves to the same one.
#[test]
fn call_digest_binds_tool_action_and_arguments() {
    let policy = compile(
        "{mode: rules, aliases: {deploy_tool: deploy}, rules: {deploy: {escalate: ['*']}}, \
         effects: {deploy: {sideEffect: EXTERNAL_WRITE, risk: high}}}",
    );
    let args = json!({"service": "api"});
    let args = args.as_object().unwrap();
    let at = |tool, action| {
        policy.evaluate(
            &Call {
                tool,
                action,
                arguments: args,
            },
            &Context::at(jiff::Timestamp::UNIX_EPOCH),
        )
    };
    let status = at("deploy", Some("status"));
    let destroy = at("deploy", Some("destroy"));
    assert_eq!(status.args_digest, destroy.args_digest);
    assert_ne!(status.call_digest, destroy.call_digest);
    assert_eq!(
        status.call_digest,
        at("deploy_tool", Some("status")).call_digest
    );
    assert_eq!(
        status.call_digest,
        toolgate_policy::call_digest("deploy", Some("status"), args)
    );
}

#[test]
fn may_permit_says_which_tools_a_gateway_can_offer() {
    let yaml = format!(
        "{{mode: rules, aliases: {{sh: bash}}, rules: {{bash: {{deny: ['rm *'], allow: ['ls*']}}, \
         reader: {{deny: ['*']}}, deploy: {{escalate: ['*']}}}}, \
         effects: {{{BASH}, reader: {{sideEffect: WORKSPACE_READ, risk: low}}, \
         deploy: {{sideEffect: EXTERNAL_WRITE, risk: write}}, \
         quiet: {{sideEffect: NONE, risk: low}}}}}}"
    );
    let policy = compile(&yaml);
    assert!(policy.may_permit("bash"));
    assert!(policy.may_permit("sh"), "aliases apply");
    assert!(policy.may_permit("deploy"), "escalate counts");
    assert!(!policy.may_permit("reader"), "deny-only");
    assert!(!policy.may_permit("quiet"), "declared but no rule");
    assert!(!policy.may_permit("undeclared"));
    let all = compile(&format!("{{mode: allowAll, effects: {{{BASH}}}}}"));
    assert!(all.may_permit("bash") && !all.may_permit("reader"));
    let none = compile(&format!("{{mode: denyAll, effects: {{{BASH}}}}}"));
    assert!(!none.may_permit("bash"));
}

#[test]
fn egress_refusal_applies_the_network_rules_to_a_url() {
    let policy = compile(&format!(
        "{{mode: rules, hardline: {{cidrs: ['169.254.0.0/16']}}, \
         egress: {{allowHosts: ['*.example.com']}}, effects: {{{BASH}}}}}"
    ));
    assert_eq!(policy.egress_refusal("http://mcp.example.com/mcp"), None);
    assert_eq!(policy.egress_refusal("http://127.0.0.1:8000/mcp"), None);
    assert_eq!(
        policy.egress_refusal("http://evil.test/mcp"),
        Some(Reason::EgressHostNotAllowed)
    );
    assert_eq!(
        policy.egress_refusal("http://169.254.169.254/"),
        Some(Reason::HardlineCidr)
    );
    assert_eq!(
        policy.egress_refusal("not-a-url"),
        Some(Reason::NetworkTargetInvalid)
    );
}

const MODES: &str = r#"
mode: rules
enforcement: dryRun
rules:
  bash: {deny: ["rm *"], allow: ["ls *"], escalate: ["git push *"]}
hardline: {commands: ["mkfs*"]}
egress: {allowHosts: ["api.github.com"]}
effects:
  bash: {sideEffect: PROCESS_EXEC, risk: high}
  fetch: {sideEffect: NETWORK_READ, risk: low, enforcement: enforce}
  shout: {sideEffect: NONE, risk: low, enforcement: warn}
"#;

#[test]
fn dry_run_allows_and_reports_what_enforce_would_answer() {
    let policy = compile(MODES);
    let denied = eval(&policy, "bash", json!({"command": "rm -rf /tmp/x"}));
    assert_eq!(denied.verdict, Decision::Allow);
    assert_eq!(denied.reason, Reason::NotEnforced);
    assert!(!denied.enforced);
    assert_eq!(denied.would_verdict, Some(Decision::Deny));
    assert_eq!(denied.would_reason, Some(Reason::DenyRule));
    assert_eq!(denied.would_rule.as_deref(), Some("deny:bash:rm *"));
    assert!(denied.warning.is_none(), "dryRun only records");
    assert!(
        denied.intent_required,
        "an allowed high-risk call still needs its intent"
    );

    let escalated = eval(&policy, "bash", json!({"command": "git push origin"}));
    assert_eq!(
        (escalated.verdict, escalated.would_verdict),
        (Decision::Allow, Some(Decision::Escalate))
    );
    // A would-allow is reported too, so the whole population is visible.
    let allowed = eval(&policy, "bash", json!({"command": "ls -la"}));
    assert_eq!(
        (allowed.enforced, allowed.would_reason),
        (false, Some(Reason::AllowRule))
    );
    // Shell control is a rules-mode check, softened like the rules.
    let chained = eval(&policy, "bash", json!({"command": "ls; id"}));
    assert_eq!(chained.would_reason, Some(Reason::ShellControl));
    assert_eq!(chained.verdict, Decision::Allow);
}

#[test]
fn hardline_and_unknown_tools_bind_in_every_mode() {
    let policy = compile(MODES);
    let hard = eval(&policy, "bash", json!({"command": "mkfs.ext4 /dev/sda"}));
    assert_eq!(
        (hard.verdict, hard.reason, hard.enforced),
        (Decision::Deny, Reason::HardlineCommand, true)
    );
    assert!(hard.would_verdict.is_none());
    let unknown = eval(&policy, "nope", json!({}));
    assert_eq!(
        (unknown.verdict, unknown.reason, unknown.enforced),
        (Decision::Deny, Reason::UnknownTool, true)
    );
    let all_binding: Vec<Reason> = Reason::ALL
        .into_iter()
        .filter(|r| r.always_enforced())
        .collect();
    assert!(all_binding.contains(&Reason::HardlinePath));
    assert!(all_binding.contains(&Reason::HardlineCidr));
    assert!(all_binding.contains(&Reason::RunCancelled));
    assert!(!Reason::BudgetExhausted.always_enforced());
}

#[test]
fn a_tool_may_override_the_profile_mode() {
    let policy = compile(MODES);
    // fetch is `enforce` although the profile is dryRun.
    let fetch = eval(&policy, "fetch", json!({"url": "https://evil.example/"}));
    assert_eq!(
        (fetch.verdict, fetch.reason, fetch.enforced),
        (Decision::Deny, Reason::EgressHostNotAllowed, true)
    );
    // shout is `warn`: allowed, with a warning naming what would happen.
    let shout = eval(&policy, "shout", json!({"text": "hi"}));
    assert_eq!(shout.verdict, Decision::Allow);
    assert_eq!(shout.would_reason, Some(Reason::NoMatchingRule));
    let warning = shout.warning.expect("warn mode warns");
    assert!(
        warning.contains("would deny (no_matching_rule)"),
        "{warning}"
    );
    assert_eq!(
        policy.enforcement("shout"),
        toolgate_policy::Enforcement::Warn
    );
    assert!(policy.reports_only_somewhere());
    // Enforce is the default.
    let strict = compile(&MODES.replace("enforcement: dryRun\n", ""));
    let denied = eval(&strict, "bash", json!({"command": "rm -rf /"}));
    assert_eq!((denied.verdict, denied.enforced), (Decision::Deny, true));
}

#[test]
fn modes_and_budgets_are_part_of_the_policy_version() {
    let base = compile(MODES);
    let enforcing = compile(&MODES.replace("enforcement: dryRun", "enforcement: enforce"));
    assert_ne!(base.version().version, enforcing.version().version);
    let budgeted = compile(&format!("{MODES}budgets: {{maxCallsPerRun: 10}}\n"));
    assert_ne!(base.version().version, budgeted.version().version);
    assert_eq!(budgeted.budgets().max_calls_per_run, Some(10));
    assert!(base.budgets().is_unlimited());
}

#[test]
fn budgets_are_validated() {
    for (budgets, field) in [
        ("{maxCallsPerRun: 0}", "spec.budgets.maxCallsPerRun"),
        ("{maxRunSeconds: 0}", "spec.budgets.maxRunSeconds"),
        ("{maxRunSeconds: 999999999}", "spec.budgets.maxRunSeconds"),
    ] {
        let err = CompiledPolicy::compile("p", &spec(&format!("{MODES}budgets: {budgets}\n")), &[])
            .expect_err(budgets);
        assert!(err.to_string().contains(field), "{err}");
    }
    // Zero high-risk calls is a real limit: it forbids them.
    compile(&format!("{MODES}budgets: {{maxHighRiskCallsPerRun: 0}}\n"));
    // Unknown budget fields and modes are load errors.
    assert!(load::from_str::<PolicySpec>(&format!("{MODES}budgets: {{maxCalls: 1}}\n")).is_err());
    assert!(load::from_str::<PolicySpec>(&MODES.replace("dryRun", "audit")).is_err());
}

#[test]
fn applying_a_mode_twice_changes_nothing() {
    let policy = compile(MODES);
    let once = eval(&policy, "bash", json!({"command": "rm x"}));
    let twice = once.clone().under(toolgate_policy::Enforcement::Warn);
    assert_eq!(once, twice);
}
