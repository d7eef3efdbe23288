//! `analyze` against a table of profiles with known answers, and
//! `compare` witnesses re-checked by evaluating them under both profiles.

use serde_json::Value;
use toolgate_policy::analyze::{Relation, Severity, analyze, compare};
use toolgate_policy::{Call, CompiledPolicy, Context, Decision, load};

#[path = "analyze_limits.rs"]
mod limits;

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

// ---- Admission (the webhook's cheap checks) --------------------------------

use std::time::{Duration, Instant};
use toolgate_policy::analyze::{
    ADMISSION_LIMITS, MAX_WARNING_CHARS, MAX_WARNINGS, admission_check, admission_warnings,
};

/// A bash (PROCESS_EXEC) and fetch (NONE) profile with these rules.
fn admission_profile(rules: &str) -> CompiledPolicy {
    compile(&format!("mode: rules\nrules: {rules}\n{EFFECTS}"))
}

fn admit(
    policy: &CompiledPolicy,
) -> Result<Vec<toolgate_policy::analyze::Finding>, toolgate_policy::PolicyError> {
    admission_check(policy, Instant::now() + Duration::from_secs(60))
}

/// The verdict of bash on `command`.
fn bash_verdict(policy: &CompiledPolicy, command: &str) -> Decision {
    let args = serde_json::json!({"command": command});
    let call = Call {
        tool: "bash",
        action: None,
        arguments: args.as_object().expect("object"),
    };
    policy
        .evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH))
        .verdict
}

#[test]
fn admission_refuses_an_escalate_glob_the_allow_tier_shadows() {
    let policy = admission_profile(
        "{bash: {allow: ['ls', 'git *'], escalate: ['git push origin*']}, fetch: {allow: ['*']}}",
    );
    let err = admit(&policy).unwrap_err();
    assert_eq!(err.code(), "shadowed_escalate");
    assert_eq!(err.field(), Some("spec.rules.bash.escalate[0]"));
    let message = err.to_string();
    assert!(
        message.contains("`git *` (spec.rules.bash.allow[1])"),
        "{message}"
    );
    assert!(!message.contains("allow[0]"), "{message}");
    // The witness it names is allowed by the evaluator.
    let witness = message
        .split("calls such as `")
        .nth(1)
        .unwrap()
        .split('`')
        .next()
        .unwrap();
    assert!(witness.starts_with("git push origin"), "{witness}");
    assert_eq!(bash_verdict(&policy, witness), Decision::Allow);

    // Not refused: partly allowed, or wholly denied before the allow tier.
    for rules in [
        "{bash: {allow: ['git status*'], escalate: ['git *']}, fetch: {allow: ['*']}}",
        "{bash: {deny: ['git push*'], allow: ['git *'], escalate: ['git push -f*']}, fetch: {allow: ['*']}}",
    ] {
        assert_eq!(admit(&admission_profile(rules)).unwrap(), [], "{rules}");
    }
}

/// The evaluator also tries a text's lowercase copy when it has an
/// uppercase letter: admission judges the globs the same way, checked
/// here against `evaluate` itself.
#[test]
fn admission_agrees_with_the_evaluators_lowercase_fallback() {
    // Shadow created by lowercasing: `GIT x` is allowed through `git *`.
    let policy =
        admission_profile("{bash: {allow: ['git *'], escalate: ['GIT *']}, fetch: {allow: ['*']}}");
    assert_eq!(bash_verdict(&policy, "GIT x"), Decision::Allow);
    let err = admit(&policy).unwrap_err();
    assert_eq!(err.code(), "shadowed_escalate");
    assert_eq!(err.field(), Some("spec.rules.bash.escalate[0]"));
    // `analyze` agrees: `git *` shadows `GIT *`.
    assert!(codes(&format!(
        "mode: rules\nrules: {{bash: {{allow: ['git *'], escalate: ['GIT *']}}, fetch: {{allow: ['*']}}}}\n{EFFECTS}"
    ))
    .iter()
    .any(|(c, _)| c == "shadowed_escalate"));

    // Shadow hidden by lowercasing: every `GIT PUSH…` is denied by its
    // lowercase copy under `git push*`, so nothing is allowed unasked.
    let rules = "{bash: {deny: ['git push*'], allow: ['GIT *'], escalate: ['GIT PUSH*']}, \
                 fetch: {allow: ['*']}}";
    let policy = admission_profile(rules);
    assert_eq!(bash_verdict(&policy, "GIT PUSH x"), Decision::Deny);
    assert_eq!(admit(&policy).unwrap(), []);
    // `analyze` agrees: nothing is allowed unasked.
    assert!(
        !codes(&format!("mode: rules\nrules: {rules}\n{EFFECTS}"))
            .iter()
            .any(|(c, _)| c == "shadowed_escalate")
    );

    // A text without uppercase is never lowercased: `*PUSH*` does not
    // allow `git push`, so the escalate still asks.
    let policy = admission_profile(
        "{bash: {allow: ['*PUSH*'], escalate: ['git push*']}, fetch: {allow: ['*']}}",
    );
    assert_eq!(bash_verdict(&policy, "git push"), Decision::Escalate);
    assert_eq!(admit(&policy).unwrap(), []);
    // Kelvin sign K lowers to ASCII k: `K*` (Kelvin) is shadowed by `k*`.
    let policy = admission_profile(
        "{bash: {allow: ['k*'], escalate: ['\u{212A}*']}, fetch: {allow: ['*']}}",
    );
    assert_eq!(bash_verdict(&policy, "\u{212A}x"), Decision::Allow);
    assert_eq!(admit(&policy).unwrap_err().code(), "shadowed_escalate");
}

#[test]
fn a_catch_all_escalate_is_refused_only_when_every_tool_shadows_it() {
    let with = |escalate: &str, reader_allow: &str| {
        admission_profile(&format!(
            "{{bash: {{allow: ['git *']}}, fetch: {{allow: [{reader_allow}]}}, '*': {{escalate: [{escalate}]}}}}"
        ))
    };
    // fetch allows everything, but `*` still asks for the rest of bash.
    assert_eq!(admit(&with("'*'", "'*'")).unwrap(), []);
    // Only bash shadows `git push*`: fetch still asks for it.
    assert_eq!(admit(&with("'git push*'", "'ls'")).unwrap(), []);
    // Every tool allows `git push*` first: nobody is ever asked.
    let err = admit(&with("'git push*'", "'*'")).unwrap_err();
    assert_eq!(err.code(), "shadowed_escalate");
    assert_eq!(err.field(), Some("spec.rules.*.escalate[0]"));
}

#[test]
fn other_findings_are_warnings_escaped_and_capped() {
    let yaml = format!(
        "mode: rules\nhardline: {{commands: ['rm -rf *']}}\n\
         rules: {{bash: {{deny: ['rm -rf /*', 'curl *'], allow: ['ls *', 'ls *'], escalate: ['make']}}}}\n{EFFECTS}"
    );
    let findings = admit(&compile(&yaml)).unwrap();
    let got: Vec<(&str, &str)> = findings
        .iter()
        .map(|f| (f.code, f.field.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("duplicate_glob", "spec.rules.bash.allow[1]"),
            ("shadowed_by_hardline", "spec.rules.bash.deny[0]"),
            ("effect_unused", "spec.effects.fetch"),
        ]
    );
    let warnings = admission_warnings(&findings);
    assert!(warnings[0].starts_with(
        "spec.rules.bash.allow[1]: `ls *` is the same glob as spec.rules.bash.allow[0]"
    ));
    assert!(warnings[0].ends_with("[duplicate_glob]"), "{}", warnings[0]);

    // Many findings, long and hostile text: capped, one line each, ASCII.
    let allow: Vec<String> = (0..30)
        .map(|_| format!("'x\\n\u{202E}{}'", "é".repeat(300)))
        .collect();
    let yaml = format!(
        "mode: rules\nrules: {{bash: {{allow: [{}]}}, fetch: {{allow: ['*']}}}}\n{EFFECTS}",
        allow.join(", ")
    );
    let warnings = admission_warnings(&admit(&compile(&yaml)).unwrap());
    assert_eq!(warnings.len(), MAX_WARNINGS);
    assert!(
        warnings.last().unwrap().contains("more findings not shown"),
        "{warnings:?}"
    );
    for w in &warnings {
        assert!(w.chars().count() <= MAX_WARNING_CHARS, "{w}");
        assert!(w.chars().all(|c| c == ' ' || c.is_ascii_graphic()), "{w:?}");
    }
}

#[test]
fn past_a_cap_the_check_is_skipped_with_a_warning_never_refused() {
    // ~27 KB of distinct CJK characters (the reviewed worst case): over the
    // glob-length cap, skipped before anything is built for it.
    let cjk: String = (0x4E00u32..0x4E00 + 9_000)
        .filter_map(char::from_u32)
        .collect();
    let rules = format!("{{bash: {{allow: ['*'], escalate: ['{cjk}']}}, fetch: {{allow: ['*']}}}}");
    let started = Instant::now();
    let findings = admit(&admission_profile(&rules)).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].code, "analysis_skipped");
    assert!(
        findings[0].message.contains("bytes long"),
        "{}",
        findings[0].message
    );

    // Too many distinct characters, within the length cap.
    let chunk = |k: u32| -> String {
        (0..150)
            .filter_map(|i| char::from_u32(0x4E00 + k * 150 + i))
            .collect()
    };
    let rules = format!(
        "{{bash: {{allow: ['*{}*'], escalate: ['*{}*']}}, fetch: {{allow: ['*']}}}}",
        chunk(0),
        chunk(1)
    );
    let findings = admit(&admission_profile(&rules)).unwrap();
    assert_eq!(findings[0].code, "analysis_skipped", "{findings:?}");
    assert!(findings[0].message.contains("distinct characters"));

    // A shadowed profile past its deadline: skipped, admitted.
    let policy = admission_profile(
        "{bash: {allow: ['git *'], escalate: ['git push*']}, fetch: {allow: ['*']}}",
    );
    let findings = admission_check(&policy, Instant::now()).unwrap();
    assert_eq!(findings[0].code, "analysis_skipped", "{findings:?}");
    assert!(findings[0].message.contains("out of time"));
}

/// Every example profile is admitted (elapsed printed; no timing assert).
#[test]
fn example_profiles_pass_admission() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/profiles");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let manifest = load::parse_manifest(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let policy = CompiledPolicy::compile(&manifest.metadata.name, &manifest.spec, &[]).unwrap();
        let started = Instant::now();
        let findings = admit(&policy).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        println!(
            "admission {}: {:?}, {findings:?}",
            file.display(),
            started.elapsed()
        );
        assert!(
            findings.iter().all(|f| f.code != "analysis_skipped"),
            "{}: {findings:?}",
            file.display()
        );
    }
}

/// Profiles at the caps that make admission work hardest: the most bytes
/// and distinct characters per tool, globs whose automata blow up, many
/// tools sharing one budget.
fn worst_profiles() -> Vec<CompiledPolicy> {
    let l = ADMISSION_LIMITS;
    // 250 distinct characters, ASCII and two-byte Latin: ~5,000 set pieces.
    let alphabet: Vec<char> = ('!'..='~')
        .chain('¡'..='ÿ')
        .chain('Ā'..='ž')
        .take(250)
        .collect();
    let quote = |g: String| format!("'{}'", g.replace('\'', "''"));
    let filler = |seed: usize, bytes: usize| -> String {
        let mut g = String::from("*");
        let mut i = seed;
        while g.len() + 4 < bytes {
            let c = alphabet[i % alphabet.len()];
            if c != '\'' && c != '[' && c != ']' {
                g.push(c);
                g.push('?');
            }
            i += 7;
        }
        g.push('*');
        g
    };
    let per = l.max_bytes_per_tool / 16 - 8;
    let wide = |n: usize, k: usize| {
        (0..n)
            .map(|i| quote(filler(i * 31 + k, per)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Classic blow-up: `*a?????????*` needs 2^10 states per glob.
    let blowup = |n: usize, tail: &str| {
        (0..n)
            .map(|i| quote(format!("*{}{}{tail}*", alphabet[i], "?".repeat(12))))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let effects = "effects: {bash: {sideEffect: PROCESS_EXEC, risk: high}, fetch: {sideEffect: NONE, risk: low}}";
    let hardline = format!("hardline: {{commands: [{}]}}\n", wide(2, 3));
    vec![
        compile(&format!(
            "mode: rules\nrules: {{bash: {{allow: [{}], escalate: [{}]}}, fetch: {{allow: ['*']}}}}\n{effects}",
            wide(7, 0),
            wide(7, 1)
        )),
        compile(&format!(
            "mode: rules\n{hardline}rules: {{bash: {{deny: [{}], allow: [{}], escalate: [{}]}}, \
             '*': {{allow: [{}], escalate: [{}]}}}}\n{effects}",
            wide(3, 5),
            blowup(40, ""),
            blowup(40, "x"),
            blowup(20, "y"),
            blowup(20, "z")
        )),
    ]
}

/// Run by `admission_memory_stays_bounded` in a child process of its own,
/// so the process's peak RSS is this work's.
#[test]
fn admission_memory_worker() {
    if std::env::var_os("TOOLGATE_ADMISSION_MEMORY_WORKER").is_none() {
        return;
    }
    let base = peak_rss_kib();
    for policy in worst_profiles() {
        let started = Instant::now();
        let result = admission_check(&policy, Instant::now() + Duration::from_secs(600));
        let codes: Vec<&str> = match &result {
            Ok(f) => f.iter().map(|f| f.code).collect(),
            Err(e) => vec![e.code()],
        };
        println!("worst profile: {:?} {codes:?}", started.elapsed());
    }
    println!("PEAK_KIB {} BASE_KIB {base}", peak_rss_kib());
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The worst inputs under the caps, run to the end of the work budget
/// (no deadline), keep the process far below the webhook's 128 MiB limit.
#[test]
fn admission_memory_stays_bounded() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "analyze::admission_memory_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TOOLGATE_ADMISSION_MEMORY_WORKER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    let peak: u64 = stdout
        .split("PEAK_KIB ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("the worker's report")
        .parse()
        .unwrap();
    assert!(peak < 48 * 1024, "peak RSS {peak} KiB");
}

/// docs/policy.md ("At admission") states the caps the code applies.
#[test]
fn the_docs_state_the_admission_caps() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/policy.md");
    let text = std::fs::read_to_string(path).unwrap();
    let section = text.split("### At admission").nth(1).expect("the section");
    let words = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let l = ADMISSION_LIMITS;
    for claim in [
        format!("at most {} globs", l.max_globs_per_tool),
        format!("{} bytes a glob", l.max_glob_bytes),
        format!(
            "{} KiB and {} distinct characters",
            l.max_bytes_per_tool / 1024,
            l.max_distinct_chars
        ),
        format!("at most {MAX_WARNINGS}, each at most {MAX_WARNING_CHARS} characters"),
    ] {
        assert!(words.contains(&claim), "{claim:?} in docs/policy.md");
    }
}

/// Random small profiles over letters whose case matters (Kelvin sign `K`
/// lowers to `k`): whenever admission refuses, the witness it names is
/// allowed by `evaluate`, and no text of up to four characters is
/// escalated by the glob it calls shadowed.
#[test]
fn admission_refusals_hold_under_the_evaluator() {
    const PIECES: &[&str] = &["a", "A", "k", "K", "\u{212A}", "*", "?", "[aB]", "[!a]"];
    const TEXT: &[char] = &['a', 'A', 'b', 'k', 'K', '\u{212A}', 'x'];
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let mut texts = vec![String::new()];
    for len in 1..=4 {
        let start = texts
            .iter()
            .position(|t| t.chars().count() == len - 1)
            .unwrap();
        let prefixes: Vec<String> = texts[start..].to_vec();
        for p in prefixes {
            texts.extend(TEXT.iter().map(|c| format!("{p}{c}")));
        }
    }
    let mut refused = 0;
    for _ in 0..120 {
        let (denies, allows) = (next(2), 1 + next(2));
        let mut glob = || {
            (0..1 + next(3))
                .map(|_| PIECES[next(PIECES.len())])
                .collect::<String>()
        };
        let deny: Vec<String> = (0..denies).map(|_| format!("'{}'", glob())).collect();
        let allow: Vec<String> = (0..allows).map(|_| format!("'{}'", glob())).collect();
        let (deny, allow) = (deny.join(", "), allow.join(", "));
        let escalate = glob();
        let rules = format!(
            "{{bash: {{deny: [{deny}], allow: [{allow}], escalate: ['{escalate}']}}, fetch: {{allow: ['*']}}}}"
        );
        let policy = admission_profile(&rules);
        let Err(err) = admit(&policy) else { continue };
        refused += 1;
        assert_eq!(err.code(), "shadowed_escalate", "{rules}");
        let label = format!("escalate:bash:{escalate}");
        for text in &texts {
            let args = serde_json::json!({"command": text});
            let call = Call {
                tool: "bash",
                action: None,
                arguments: args.as_object().unwrap(),
            };
            let verdict = policy.evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH));
            assert_ne!(
                verdict.matched_rule.as_deref(),
                Some(label.as_str()),
                "{rules}: {text:?}"
            );
        }
        let message = err.to_string();
        let witness = message
            .split("calls such as `")
            .nth(1)
            .unwrap()
            .split('`')
            .next()
            .unwrap();
        // Escaped for the message: read `\u{…}` back.
        let witness = unescape(witness);
        assert_eq!(
            bash_verdict(&policy, &witness),
            Decision::Allow,
            "{rules}: {witness:?}"
        );
    }
    assert!(
        refused >= 5,
        "only {refused} refusals: the table tests too little"
    );
}

/// Reads back the `\u{…}` escapes of [`toolgate_policy::analyze::clean`].
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\\u{") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find('}').unwrap() + at;
        let code = u32::from_str_radix(&rest[at + 3..end], 16).unwrap();
        out.push(char::from_u32(code).unwrap());
        rest = &rest[end + 1..];
    }
    out + rest
}
