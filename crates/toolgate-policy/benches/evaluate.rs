//! One evaluation on a 100-rule profile; compiling a 1,000-rule profile;
//! the evaluator curve (one tool, 100 to 50,000 globs) and compiling 50,000.
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

/// One bash tool with `n` deny globs of four realistic shapes, cycling:
/// a domain blocklist (`*.siteN.example`), command prefixes (`toolN -rf *`),
/// path prefixes (`/srv/dataN/*`) and exact paths (`/etc/confN.yaml`).
pub fn curve_spec(n: usize) -> PolicySpec {
    let globs: Vec<String> = (0..n).map(curve_glob).collect();
    let yaml = format!(
        "{{mode: rules, rules: {{bash: {{deny: {}}}}},
           effects: {{bash: {{sideEffect: PROCESS_EXEC, risk: high}}}}}}",
        serde_json::to_string(&globs).unwrap()
    );
    load::from_str(&yaml).expect("curve spec")
}

fn curve_glob(i: usize) -> String {
    match i % 4 {
        0 => format!("*.site{i}.example"),
        1 => format!("tool{i} -rf *"),
        2 => format!("/srv/data{i}/*"),
        _ => format!("/etc/conf{i}.yaml"),
    }
}

/// A command matched by glob `i` of [`curve_glob`] and by no earlier one.
fn curve_text(i: usize) -> String {
    match i % 4 {
        0 => format!("curl.www.site{i}.example"),
        1 => format!("tool{i} -rf /tmp/x"),
        2 => format!("/srv/data{i}/report.csv"),
        _ => format!("/etc/conf{i}.yaml"),
    }
}

/// The evaluator curve: one tool with 100 to 50,000 globs, a call matching
/// a late glob (the one before last) and one matching none (the worst case
/// of a linear search); then compiling 50,000 globs.
fn curve(c: &mut Criterion) {
    let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
    let mut group = c.benchmark_group("curve");
    for n in [100, 1_000, 10_000, 50_000] {
        let policy = CompiledPolicy::compile("curve", &curve_spec(n), &[]).unwrap();
        assert_eq!(policy.rule_count(), n);
        let late = n - 2;
        for (name, text) in [
            ("match", curve_text(late)),
            ("no_match", "tool -rf /srv/data/x.site.example".to_owned()),
        ] {
            let arguments = serde_json::json!({ "command": text });
            let call = Call {
                tool: "bash",
                action: None,
                arguments: arguments.as_object().unwrap(),
            };
            let decision = policy.evaluate(&call, &ctx);
            assert_eq!(decision.verdict, Decision::Deny);
            if name == "match" {
                let want = format!("deny:bash:{}", curve_glob(late));
                assert_eq!(decision.matched_rule.as_deref(), Some(want.as_str()));
            } else {
                assert_eq!(decision.matched_rule, None);
            }
            group.bench_function(format!("evaluate/{n}_globs/{name}"), |b| {
                b.iter(|| black_box(policy.evaluate(black_box(&call), &ctx)))
            });
        }
    }
    let spec = curve_spec(50_000);
    group.sample_size(10);
    group.bench_function("compile/50000_globs", |b| {
        b.iter(|| black_box(CompiledPolicy::compile("curve", black_box(&spec), &[]).unwrap()))
    });
    group.finish();
}

/// `n` hardline networks: IPv4 /24s and /16s and IPv6 /48s, cycling.
fn cidr_spec(n: usize) -> PolicySpec {
    let nets: Vec<String> = (0..n)
        .map(|i| match i % 3 {
            0 => format!("10.{}.{}.0/24", (i >> 8) & 255, i & 255),
            1 => format!("172.{}.0.0/16", 16 + i % 16),
            _ => format!("2001:db8:{:x}::/48", i),
        })
        .collect();
    let yaml = format!(
        "{{mode: rules, rules: {{bash: {{allow: [ls]}}}},
           effects: {{bash: {{sideEffect: PROCESS_EXEC, risk: low}}}},
           hardline: {{cidrs: {}}}}}",
        serde_json::to_string(&nets).unwrap()
    );
    load::from_str(&yaml).expect("cidr spec")
}

/// Hardline CIDRs: whether an address falls in one of 16 to 50,000
/// networks (`refuses_address`, what a gateway asks of every address a
/// name resolves to): one in the last /24 listed, one in none.
fn cidrs(c: &mut Criterion) {
    let mut group = c.benchmark_group("cidrs");
    for n in [16, 1_000, 10_000, 50_000] {
        let policy = CompiledPolicy::compile("cidrs", &cidr_spec(n), &[]).unwrap();
        let last = (0..n).rev().find(|i| i % 3 == 0).unwrap();
        let inside: std::net::IpAddr = format!("10.{}.{}.7", (last >> 8) & 255, last & 255)
            .parse()
            .unwrap();
        let outside: std::net::IpAddr = "192.0.2.7".parse().unwrap();
        assert!(policy.refuses_address(inside));
        assert!(!policy.refuses_address(outside));
        for (name, ip) in [("match", inside), ("no_match", outside)] {
            group.bench_function(format!("refuses_address/{n}_cidrs/{name}"), |b| {
                b.iter(|| black_box(policy.refuses_address(black_box(ip))))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, curve, cidrs);
criterion_main!(benches);
