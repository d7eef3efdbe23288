//! One evaluation on a 100-rule profile; compiling a 1,000-rule profile.
//! Peer engines (regorus, Cedar) run against the same policy in
//! `benches/peers`, a separate workspace kept out of the default build.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use toolgate_policy::{Call, CompiledPolicy, Context, Decision, PolicySpec, load};

/// A bash policy with `n` rules: 40% deny, 40% allow, 20% escalate.
pub fn rules_spec(n: usize) -> PolicySpec {
    let globs = |prefix: &str, count: usize| -> String {
        (0..count)
            .map(|i| format!("'{prefix}{i} *'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let deny = n * 2 / 5;
    let allow = n * 2 / 5;
    let escalate = n - deny - allow;
    let yaml = format!(
        "{{mode: rules, rules: {{bash: {{deny: [{}], allow: [{}], escalate: [{}]}}}},
           effects: {{bash: {{sideEffect: PROCESS_EXEC, risk: high}}}}}}",
        globs("deny", deny),
        globs("allow", allow),
        globs("ask", escalate)
    );
    load::from_str(&yaml).expect("bench spec")
}

fn bench(c: &mut Criterion) {
    let policy = CompiledPolicy::compile("bench", &rules_spec(100), &[]).unwrap();
    assert_eq!(policy.rule_count(), 100);
    let arguments = serde_json::json!({"command": "allow20 --verbose src/main.rs"});
    let arguments = arguments.as_object().unwrap();
    let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
    let call = Call {
        tool: "bash",
        action: None,
        arguments,
    };
    assert_eq!(policy.evaluate(&call, &ctx).verdict, Decision::Allow);
    c.bench_function("evaluate/100_rules", |b| {
        b.iter(|| black_box(policy.evaluate(black_box(&call), &ctx)))
    });

    let spec = rules_spec(1000);
    c.bench_function("compile/1000_rules", |b| {
        b.iter(|| black_box(CompiledPolicy::compile("bench", black_box(&spec), &[]).unwrap()))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
