//! What the analysis does at its limits: admission stops on time however
//! many tools and globs a profile has, and a glob telling `σ` from `ς`
//! (which the evaluator's lowercase copy picks by context) is named
//! wherever it leaves something unjudged.

use std::time::{Duration, Instant};

use toolgate_policy::CompiledPolicy;
use toolgate_policy::analyze::{admission_check, analyze};

use super::{EFFECTS, compile};

/// `tools` PROCESS_EXEC tools (`t0`, `t1`, …) and these rules.
fn many_tools(tools: usize, rules: &str) -> CompiledPolicy {
    let effects: Vec<String> = (0..tools)
        .map(|i| format!("t{i}: {{sideEffect: PROCESS_EXEC, risk: high}}"))
        .collect();
    compile(&format!(
        "mode: rules\nrules: {rules}\neffects: {{{}}}",
        effects.join(", ")
    ))
}

/// Distinct `*` globs: `*w0*`, `*w1*`, ….
fn words(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("'*{tag}{i}*'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Admission answers by its deadline (plus a step): thousands of distinct
/// `*` globs read by every tool (once quadratic per tool: tens of seconds
/// in a debug build), and many tools each under the caps.
#[test]
fn admission_stops_on_time_with_many_tools_and_globs() {
    let deadline = Duration::from_millis(200);
    let profiles = [
        many_tools(
            60,
            &format!(
                "{{'*': {{deny: [{}], allow: [{}], escalate: [{}]}}}}",
                words(1500, "d"),
                words(1500, "a"),
                words(1500, "e")
            ),
        ),
        many_tools(
            400,
            &format!(
                "{{'*': {{allow: [{}], escalate: [{}]}}}}",
                words(120, "a"),
                words(120, "e")
            ),
        ),
    ];
    for (k, policy) in profiles.iter().enumerate() {
        let started = Instant::now();
        let findings = admission_check(policy, started + deadline)
            .unwrap_or_else(|e| panic!("profile {k}: refused: {e}"));
        let took = started.elapsed();
        println!("profile {k}: {took:?}, {} findings", findings.len());
        // Generous for a loaded 2-core CI machine; the old loops took far longer.
        assert!(took < Duration::from_secs(2), "profile {k}: {took:?}");
        assert!(
            findings.iter().any(|f| f.code == "analysis_skipped"),
            "profile {k}: {:?}",
            &findings[..findings.len().min(3)]
        );
    }
    // The per-tool cap is what skips the first one, before any walk.
    let first = admission_check(&profiles[0], Instant::now() + deadline).unwrap();
    assert!(
        first
            .iter()
            .any(|f| f.code == "analysis_skipped" && f.message.contains("more than the 256")),
        "{:?}",
        &first[..first.len().min(3)]
    );
}

/// A shadowed `*` escalate glob is refused only when every tool was
/// judged: a deadline cutting the tools short admits it with a warning.
#[test]
fn a_catch_all_escalate_is_not_refused_on_a_partial_judgement() {
    let policy = many_tools(30, "{'*': {allow: ['*'], escalate: ['git push*']}}");
    let refused = admission_check(&policy, Instant::now() + Duration::from_secs(60));
    assert_eq!(refused.unwrap_err().code(), "shadowed_escalate");
    let findings = admission_check(&policy, Instant::now()).unwrap();
    assert!(
        findings
            .iter()
            .all(|f| f.code == "analysis_skipped" && f.message.contains("out of time")),
        "{findings:?}"
    );
    assert_eq!(findings.len(), 30);
}

#[test]
fn a_hardline_glob_telling_sigmas_apart_is_named() {
    let policy = compile(&format!(
        "mode: rules\nhardline: {{commands: ['mkfs*', 'echo σ*']}}\n\
         rules: {{bash: {{allow: ['git *'], escalate: ['git push*']}}, fetch: {{allow: ['*']}}}}\n\
         {EFFECTS}"
    ));
    let findings = analyze(&policy).findings;
    let incomplete: Vec<_> = findings
        .iter()
        .filter(|f| f.code == "analysis_incomplete")
        .collect();
    assert_eq!(incomplete.len(), 1, "{findings:?}");
    let f = incomplete[0];
    assert_eq!(f.tool.as_deref(), Some("bash"));
    assert_eq!(f.field, "spec.hardline.commands[1]");
    assert_eq!(f.glob.as_deref(), Some("echo σ*"));
    assert!(f.message.contains("σ from ς"), "{}", f.message);
    // Admission skips the tool, naming the same entry.
    let warnings = admission_check(&policy, Instant::now() + Duration::from_secs(60)).unwrap();
    let skipped: Vec<_> = warnings
        .iter()
        .filter(|f| f.code == "analysis_skipped")
        .collect();
    assert_eq!(skipped.len(), 1, "{warnings:?}");
    assert!(
        skipped[0].message.contains("(spec.hardline.commands[1])"),
        "{}",
        skipped[0].message
    );
    // A glob of the tool's own rules is named the same way.
    let own = compile(&format!(
        "mode: rules\nrules: {{bash: {{allow: ['ls', '[!ς]x']}}, fetch: {{allow: ['*']}}}}\n{EFFECTS}"
    ));
    let f = analyze(&own).findings;
    assert_eq!(
        (f[0].code, f[0].field.as_str(), f[0].glob.as_deref()),
        (
            "analysis_incomplete",
            "spec.rules.bash.allow[1]",
            Some("[!ς]x")
        ),
        "{f:?}"
    );
}

/// A flow label whose selector cannot be judged is `analysis_incomplete`
/// on the flow rule, never silently settable; a label some other tool
/// surely sets is still judged.
#[test]
fn a_flow_label_that_cannot_be_judged_is_said_so() {
    let flows = |hardline: &str, labels: &str| {
        compile(&format!(
            "mode: rules\nhardline: {{commands: [{hardline}]}}\n\
             rules: {{fetch: {{allow: ['*']}}, bash: {{allow: ['ls']}}}}\n{EFFECTS}\n\
             flows:\n  labels: {{{labels}}}\n  rules:\n  - {{when: [l], deny: {{tools: [fetch]}}}}"
        ))
    };
    let got = analyze(&flows("", "l: {tools: [bash], match: ['σ*']}")).findings;
    let on_rule: Vec<_> = got
        .iter()
        .filter(|f| f.field == "spec.flows.rules[0]")
        .collect();
    assert_eq!(on_rule.len(), 1, "{got:?}");
    assert_eq!(on_rule[0].code, "analysis_incomplete");
    assert_eq!(on_rule[0].glob.as_deref(), Some("σ*"));
    assert_eq!(on_rule[0].tool.as_deref(), Some("bash"));
    assert!(on_rule[0].message.contains("label `l`"));

    // fetch sets it whatever bash's σ hardline glob means: nothing to
    // report on the flow rule (bash's own finding names the glob).
    let got = analyze(&flows("'echo σ*'", "l: {tools: [bash, fetch]}")).findings;
    assert!(
        got.iter()
            .any(|f| f.code == "analysis_incomplete" && f.field == "spec.hardline.commands[0]"),
        "{got:?}"
    );
    assert!(
        got.iter().all(|f| f.field != "spec.flows.rules[0]"),
        "{got:?}"
    );
    // No σ: an unsettable label is still reported as such.
    let got = analyze(&flows("", "l: {tools: [bash], match: ['rm *']}")).findings;
    let codes: Vec<_> = got
        .iter()
        .filter(|f| f.field == "spec.flows.rules[0]")
        .map(|f| f.code)
        .collect();
    assert_eq!(codes, ["flow_label_unsettable"], "{got:?}");
}
