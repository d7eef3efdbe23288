//! The same 100-rule bash policy in toolgate, Rego (regorus) and Cedar,
//! evaluated on the same call in one criterion run.
//!
//! The policy: 40 deny globs `denyN *`, 40 allow globs `allowN *`, 20
//! escalate globs `askN *`; the call `allow20 --verbose src/main.rs` is
//! allowed by rule 61 of 100 in all three engines.

use criterion::{Criterion, black_box, criterion_group, criterion_main};

const DENY: usize = 40;
const ALLOW: usize = 40;
const ASK: usize = 20;
const COMMAND: &str = "allow20 --verbose src/main.rs";

fn globs(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i} *")).collect()
}

fn toolgate_policy_text() -> String {
    let list = |p: &str, n| {
        globs(p, n)
            .iter()
            .map(|g| format!("'{g}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{{mode: rules, rules: {{bash: {{deny: [{}], allow: [{}], escalate: [{}]}}}},
           effects: {{bash: {{sideEffect: PROCESS_EXEC, risk: high}}}}}}",
        list("deny", DENY),
        list("allow", ALLOW),
        list("ask", ASK)
    )
}

fn rego_policy() -> String {
    let list = |p: &str, n| serde_json::to_string(&globs(p, n)).unwrap();
    format!(
        r#"package toolgate

deny_globs := {}
allow_globs := {}
ask_globs := {}

verdict := "deny" if {{
    some g in deny_globs
    glob.match(g, null, input.command)
}} else := "allow" if {{
    some g in allow_globs
    glob.match(g, null, input.command)
}} else := "escalate" if {{
    some g in ask_globs
    glob.match(g, null, input.command)
}} else := "deny"
"#,
        list("deny", DENY),
        list("allow", ALLOW),
        list("ask", ASK)
    )
}

fn cedar_policy() -> String {
    // Cedar has no ordered tiers: forbid overrides permit, which is the
    // deny-before-allow rule; escalation is a second policy set.
    let mut out = String::new();
    for g in globs("deny", DENY) {
        out.push_str(&format!(
            "forbid(principal, action == Action::\"bash\", resource) when {{ context.command like \"{g}\" }};\n"
        ));
    }
    for g in globs("allow", ALLOW) {
        out.push_str(&format!(
            "permit(principal, action == Action::\"bash\", resource) when {{ context.command like \"{g}\" }};\n"
        ));
    }
    for g in globs("ask", ASK) {
        out.push_str(&format!(
            "@tier(\"escalate\") permit(principal, action == Action::\"bash\", resource) when {{ context.command like \"{g}\" }};\n"
        ));
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("evaluate_100_rules");

    // toolgate
    let spec: toolgate_policy::PolicySpec =
        toolgate_policy::load::from_str(&toolgate_policy_text()).unwrap();
    let policy = toolgate_policy::CompiledPolicy::compile("bench", &spec, &[]).unwrap();
    let args = serde_json::json!({ "command": COMMAND });
    let call = toolgate_policy::Call {
        tool: "bash",
        action: None,
        arguments: args.as_object().unwrap(),
    };
    let ctx = toolgate_policy::Context::at(jiff::Timestamp::UNIX_EPOCH);
    assert_eq!(
        policy.evaluate(&call, &ctx).verdict,
        toolgate_policy::Decision::Allow
    );
    group.bench_function("toolgate", |b| {
        b.iter(|| black_box(policy.evaluate(black_box(&call), &ctx)))
    });

    // regorus
    let mut engine = regorus::Engine::new();
    engine
        .add_policy("toolgate.rego".into(), rego_policy())
        .unwrap();
    let input =
        regorus::Value::from_json_str(&serde_json::json!({ "command": COMMAND }).to_string())
            .unwrap();
    engine.set_input(input.clone());
    let got = engine.eval_rule("data.toolgate.verdict".into()).unwrap();
    assert_eq!(got, regorus::Value::from("allow"));
    group.bench_function("regorus", |b| {
        b.iter(|| {
            engine.set_input(input.clone());
            black_box(engine.eval_rule("data.toolgate.verdict".into()).unwrap())
        })
    });

    // Cedar
    use cedar_policy::{Authorizer, Context, Decision, Entities, EntityUid, PolicySet, Request};
    use std::str::FromStr;
    let policies = PolicySet::from_str(&cedar_policy()).unwrap();
    let authorizer = Authorizer::new();
    let entities = Entities::empty();
    let principal = EntityUid::from_str("Agent::\"a\"").unwrap();
    let action = EntityUid::from_str("Action::\"bash\"").unwrap();
    let resource = EntityUid::from_str("Workspace::\"w\"").unwrap();
    let make_request = || {
        let context =
            Context::from_json_value(serde_json::json!({ "command": COMMAND }), None).unwrap();
        Request::new(
            principal.clone(),
            action.clone(),
            resource.clone(),
            context,
            None,
        )
        .unwrap()
    };
    let response = authorizer.is_authorized(&make_request(), &policies, &entities);
    assert_eq!(response.decision(), Decision::Allow);
    group.bench_function("cedar", |b| {
        b.iter(|| {
            black_box(
                authorizer
                    .is_authorized(&make_request(), &policies, &entities)
                    .decision(),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
