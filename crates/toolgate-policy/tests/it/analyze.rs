//! `analyze` against a table of profiles with known answers, and
//! `compare` witnesses re-checked by evaluating them under both profiles.

use serde_json::Value;
use toolgate_policy::analyze::{Relation, Severity, analyze, compare};
use toolgate_policy::{Call, CompiledPolicy, Context, Decision, load};

fn compile(yaml: &str) -> CompiledPolicy {
    CompiledPolicy::compile("p", &load::from_str(yaml).expect("parses"), &[]).expect("compiles")
}

/// The (code, field) pairs analyze reports.
fn codes(yaml: &str) -> Vec<(String, String)> {
    analyze(&compile(yaml))
        .findings
        .into_iter()
        .map(|f| (f.code.to_owned(), f.field))
        .collect()
}

const EFFECTS: &str = "effects: {bash: {sideEffect: PROCESS_EXEC, risk: high}, \
                       fetch: {sideEffect: NONE, risk: low}}";

#[test]
fn each_code_is_reported_exactly_where_it_applies() {
    // (rules and extras, expected (code, field) pairs; fetch has rules
    // unless the case is about it)
    let table: &[(&str, &[(&str, &str)])] = &[
        (
            "rules: {bash: {allow: ['git *'], escalate: ['git push *']}, fetch: {allow: ['*']}}",
            &[("shadowed_escalate", "spec.rules.bash.escalate[0]")],
        ),
        (
            // Not covered: only `git status` is allowed.
            "rules: {bash: {allow: ['git status'], escalate: ['git *']}, fetch: {allow: ['*']}}",
            &[("escalate_partly_allowed", "spec.rules.bash.escalate[0]")],
        ),
        (
            "rules: {bash: {allow: ['ls *'], escalate: ['git *']}, fetch: {allow: ['*']}}",
            &[],
        ),
        (
            "rules: {bash: {deny: ['mkfs *'], allow: ['ls']}, fetch: {allow: ['*']}}\n\
             hardline: {commands: ['mkfs*']}",
            &[("shadowed_by_hardline", "spec.rules.bash.deny[0]")],
        ),
        (
            // A hardline that only partly covers the glob shadows nothing.
            "rules: {bash: {deny: ['mk*'], allow: ['ls']}, fetch: {allow: ['*']}}\n\
             hardline: {commands: ['mkfs*']}",
            &[],
        ),
        (
            "rules: {bash: {allow: ['git *', 'git log*']}, fetch: {allow: ['*']}}",
            &[("shadowed_in_tier", "spec.rules.bash.allow[1]")],
        ),
        (
            "rules: {bash: {allow: ['git log*', 'git *']}, fetch: {allow: ['*']}}",
            &[],
        ),
        (
            "rules: {bash: {allow: ['ls', 'ls']}, fetch: {allow: ['*']}}",
            &[("duplicate_glob", "spec.rules.bash.allow[1]")],
        ),
        (
            // An allow under a deny is dead, but not by its own tier.
            "rules: {bash: {deny: ['rm *'], allow: ['rm -i *']}, fetch: {allow: ['*']}}",
            &[("shadowed", "spec.rules.bash.allow[0]")],
        ),
        (
            // Shell control denies `*;*` before any allow rule.
            "rules: {bash: {allow: ['*;*']}, fetch: {allow: ['*']}}",
            &[("shadowed", "spec.rules.bash.allow[0]")],
        ),
        (
            "rules: {bash: {deny: ['*'], allow: ['ls']}, fetch: {allow: ['*']}}",
            &[("match_all_first", "spec.rules.bash.deny[0]")],
        ),
        (
            // A catch-all escalate after the allow list is the usual shape.
            "rules: {bash: {allow: ['ls'], escalate: ['*']}, fetch: {allow: ['*']}}",
            &[],
        ),
        (
            // `*` rules after a tool's own match-all are not "others".
            "rules: {bash: {deny: ['*']}, fetch: {allow: ['*']}, '*': {deny: ['*x*']}}",
            &[],
        ),
        (
            "rules: {bash: {deny: ['[z-a]'], allow: ['ls']}, fetch: {allow: ['*']}}",
            &[("glob_matches_nothing", "spec.rules.bash.deny[0]")],
        ),
        (
            "rules: {bash: {allow: ['ls']}}",
            &[("effect_unused", "spec.effects.fetch")],
        ),
        (
            // `*` rules name every tool.
            "rules: {'*': {allow: ['ls']}}",
            &[],
        ),
    ];
    for (rules, want) in table {
        let yaml = format!("mode: rules\n{rules}\n{EFFECTS}");
        let got = codes(&yaml);
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(c, f)| ((*c).to_owned(), (*f).to_owned()))
            .collect();
        assert_eq!(got, want, "profile:\n{yaml}");
    }
}

#[test]
fn only_shadowed_escalate_is_an_error() {
    let yaml = format!(
        "mode: rules\nrules: {{bash: {{allow: ['*'], escalate: ['rm *']}}, fetch: {{allow: ['*']}}}}\n{EFFECTS}"
    );
    let analysis = analyze(&compile(&yaml));
    assert!(analysis.has_errors());
    let error = &analysis.findings[0];
    assert_eq!(error.code, "shadowed_escalate");
    assert_eq!(error.severity, Severity::Error);
    // The witness is a call the escalate glob names that is allowed.
    let witness = error.witness.clone().expect("a witness");
    assert!(witness.starts_with("rm "));
    let policy = compile(&yaml);
    let args = serde_json::json!({"command": witness});
    let verdict = policy.evaluate(
        &Call {
            tool: "bash",
            action: None,
            arguments: args.as_object().expect("object"),
        },
        &Context::at(jiff::Timestamp::UNIX_EPOCH),
    );
    assert_eq!(verdict.verdict, Decision::Allow);
    // `*` first in allow is also reported, as a warning.
    assert!(
        analysis.findings[1..]
            .iter()
            .all(|f| f.severity != Severity::Error)
    );
    assert!(
        analysis
            .findings
            .iter()
            .any(|f| f.code == "match_all_first")
    );
    let fine = format!("mode: rules\nrules: {{'*': {{allow: ['ls']}}}}\n{EFFECTS}");
    assert!(!analyze(&compile(&fine)).has_errors());
}

#[test]
fn mode_enforcement_and_flow_findings() {
    let all = format!("mode: allowAll\n{EFFECTS}");
    let got = analyze(&compile(&all)).findings;
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].code, got[0].severity),
        ("allow_all_profile", Severity::Warning)
    );

    let dry =
        format!("mode: rules\nenforcement: dryRun\nrules: {{'*': {{allow: ['ls']}}}}\n{EFFECTS}");
    assert_eq!(
        codes(&dry),
        [("dry_run_profile".to_owned(), "spec.enforcement".to_owned())]
    );

    // `secret` is set by `vault`, which no rule allows; `web` by fetch.
    let flows = "mode: rules\n\
        rules: {fetch: {allow: ['*']}, bash: {allow: ['ls']}}\n\
        effects: {bash: {sideEffect: PROCESS_EXEC, risk: high}, \
                  fetch: {sideEffect: NETWORK_READ, risk: low}, \
                  vault: {sideEffect: NONE, risk: low}}\n\
        egress: {allowHosts: ['*']}\n\
        flows:\n  labels: {secret: {tools: [vault]}, web: {tools: [fetch]}, \
                           lsd: {tools: [bash], match: ['ls']}, \
                           rmd: {tools: [bash], match: ['rm *']}}\n  \
        rules:\n  - {when: [web], deny: {tools: [bash]}}\n  \
                  - {when: [secret, web], deny: {tools: [fetch]}}\n  \
                  - {when: [lsd], deny: {tools: [fetch]}}\n  \
                  - {when: [rmd], deny: {tools: [fetch]}}";
    let got = codes(flows);
    let unsettable: Vec<&str> = got
        .iter()
        .filter(|(c, _)| c == "flow_label_unsettable")
        .map(|(_, f)| f.as_str())
        .collect();
    assert_eq!(
        unsettable,
        ["spec.flows.rules[1]", "spec.flows.rules[3]"],
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|(c, f)| c == "effect_unused" && f == "spec.effects.vault")
    );
}

fn witnesses_reproduce(old: &CompiledPolicy, new: &CompiledPolicy) -> Vec<(String, Relation)> {
    let comparison = compare(old, new);
    let mut out = Vec::new();
    for tool in &comparison.tools {
        for w in &tool.witnesses {
            assert!(w.reproduced, "witness not reproduced: {w:?}");
            // Re-check independently with the real evaluator.
            for (policy, want) in [(old, w.old), (new, w.new)] {
                let verdict = policy.evaluate(
                    &Call {
                        tool: &w.tool,
                        action: None,
                        arguments: &w.arguments,
                    },
                    &Context::at(jiff::Timestamp::UNIX_EPOCH),
                );
                assert_eq!(verdict.verdict, want, "{w:?}");
            }
            assert_ne!((w.old, w.old_reason), (w.new, w.new_reason));
        }
        if tool.relation != Relation::Equivalent {
            assert!(!tool.witnesses.is_empty());
        }
        out.push((tool.tool.clone(), tool.relation));
    }
    out
}

#[test]
fn compare_relations_with_reproduced_witnesses() {
    let base = format!(
        "mode: rules\nrules: {{bash: {{deny: ['rm *'], allow: ['git *', 'ls *'], escalate: ['*']}}, \
         fetch: {{allow: ['*']}}}}\n{EFFECTS}"
    );
    let cases: &[(&str, &str, Relation)] = &[
        // Reordered and rewritten globs with the same languages.
        (
            "bash: {deny: ['rm **'], allow: ['ls *', 'git *'], escalate: ['*']}",
            "bash",
            Relation::Equivalent,
        ),
        (
            "bash: {allow: ['git *', 'ls *', 'rm *'], escalate: ['*']}",
            "bash",
            Relation::MorePermissive,
        ),
        (
            "bash: {deny: ['rm *'], allow: ['git status'], escalate: ['*']}",
            "bash",
            Relation::LessPermissive,
        ),
        (
            "bash: {deny: ['rm *', 'git push*'], allow: ['git *', 'ls *', 'cat *'], escalate: ['*']}",
            "bash",
            Relation::Incomparable,
        ),
    ];
    let old = compile(&base);
    for (bash_rules, tool, want) in cases {
        let new = compile(&format!(
            "mode: rules\nrules: {{{bash_rules}, fetch: {{allow: ['*']}}}}\n{EFFECTS}"
        ));
        let relations = witnesses_reproduce(&old, &new);
        let got = relations.iter().find(|(t, _)| t == tool).map(|(_, r)| *r);
        assert_eq!(got, Some(*want), "{bash_rules}");
        assert!(
            relations
                .iter()
                .any(|(t, r)| t == "fetch" && *r == Relation::Equivalent)
        );
    }
    // The example: `rm -rf x` was deny, is allow.
    let new = compile(&format!(
        "mode: rules\nrules: {{bash: {{allow: ['*']}}, fetch: {{allow: ['*']}}}}\n{EFFECTS}"
    ));
    let comparison = compare(&old, &new);
    let bash = &comparison.tools[0];
    let json = serde_json::to_value(&bash.witnesses).expect("serializes");
    assert!(
        json.as_array().expect("array").iter().any(|w| {
            w["old"] == "deny"
                && w["new"] == "allow"
                && w["argument"].as_str().is_some_and(|a| a.starts_with("rm "))
        }),
        "{json}"
    );
    // Removing a tool denies it (unknown_tool); hardlines and dryRun count.
    let fewer = compile(
        "mode: rules\nrules: {fetch: {allow: ['*']}}\neffects: {fetch: {sideEffect: NONE, risk: low}}",
    );
    assert!(
        witnesses_reproduce(&old, &fewer).contains(&("bash".to_owned(), Relation::LessPermissive))
    );
    let hard = compile(&format!("{base}\nhardline: {{commands: ['git push*']}}"));
    assert!(
        witnesses_reproduce(&old, &hard).contains(&("bash".to_owned(), Relation::LessPermissive))
    );
    let dry = compile(&format!("{base}\nenforcement: dryRun"));
    assert!(
        witnesses_reproduce(&old, &dry).contains(&("bash".to_owned(), Relation::MorePermissive))
    );
    let _: Value = json;
}
