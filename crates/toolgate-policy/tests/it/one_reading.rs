//! One reading of every argument: rules, hardline commands and paths,
//! egress, flow labels and previews see an array element by element, so a
//! value and a one-element array holding it decide alike, and an array
//! decides as its strictest element.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use toolgate_policy::{Call, CompiledPolicy, Context, LabelSet, Reason, compile_manifest};

const PROFILE: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: one-reading}
spec:
  mode: rules
  hardline:
    commands: ["rm -rf *"]
    paths: ["*/.env", "/w/secrets/*"]
    cidrs: [169.254.0.0/16]
  egress: {allowHosts: [ok.example]}
  rules:
    fs.read_multiple_files: {deny: ["*/private/*"], allow: ["/w/*"], escalate: ["/tmp/*"]}
    run: {allow: ["git *"], escalate: ["kubectl *"]}
    web.get: {allow: ["*"]}
    notes: {allow: ["hello*"], escalate: ["*"]}
  effects:
    fs.read_multiple_files: {sideEffect: NONE, risk: low, pathArgs: [paths], matchArgs: [paths]}
    run: {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [argv]}
    web.get: {sideEffect: NETWORK_READ, risk: low, urlArgs: [urls]}
    notes: {sideEffect: NONE, risk: low}
  flows:
    labels:
      private: {match: ["*.pem", "*/.ssh/*"]}
    rules:
      - name: no-exfiltration
        when: [private]
        deny: {sideEffects: [NETWORK_READ, NETWORK_WRITE]}
"#;

/// (tool, argument) pairs: one for every kind of selector.
const SELECTED: [(&str, &str); 4] = [
    ("fs.read_multiple_files", "paths"),
    ("run", "argv"),
    ("web.get", "urls"),
    ("notes", "text"),
];

fn policy() -> CompiledPolicy {
    compile_manifest(PROFILE).expect("profile compiles")
}

fn call_args(arg: &str, value: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(arg.to_owned(), value);
    m
}

fn decide(
    p: &CompiledPolicy,
    tool: &str,
    args: &Map<String, Value>,
    labels: LabelSet,
) -> (String, String, Option<String>) {
    let mut ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
    ctx.labels = labels;
    let v = p.evaluate(
        &Call {
            tool,
            action: None,
            arguments: args,
        },
        &ctx,
    );
    (
        v.verdict.as_str().to_owned(),
        v.reason.as_str().to_owned(),
        v.matched_rule,
    )
}

fn values() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/w/notes.txt".to_owned()),
        Just("/w/.env".to_owned()),
        Just("/w/x/../.env".to_owned()),
        Just("/w/secrets/id.pem".to_owned()),
        Just("/home/a/.ssh/id_ed25519".to_owned()),
        Just("/w/private/a".to_owned()),
        Just("/tmp/x".to_owned()),
        Just("../up".to_owned()),
        Just("git status".to_owned()),
        Just("rm -rf /".to_owned()),
        Just("kubectl delete ns x".to_owned()),
        Just("git log; id".to_owned()),
        Just("http://ok.example/".to_owned()),
        Just("http://169.254.169.254/".to_owned()),
        Just("http://ok.example\\@169.254.169.254/".to_owned()),
        Just("hello there".to_owned()),
        "[a-z./@:*-]{0,16}",
    ]
}

proptest! {
    #[test]
    fn a_value_and_a_one_element_array_decide_alike(value in values(), private in any::<bool>()) {
        let p = policy();
        let labels = if private { p.flow_labels(["private"]) } else { LabelSet::EMPTY };
        for (tool, arg) in SELECTED {
            let one = call_args(arg, json!(value));
            let array = call_args(arg, json!([value]));
            let nested = call_args(arg, json!([[value]]));
            let expected = decide(&p, tool, &one, labels);
            prop_assert_eq!(&decide(&p, tool, &array, labels), &expected, "{} {:?}", tool, value);
            prop_assert_eq!(&decide(&p, tool, &nested, labels), &expected, "{} {:?}", tool, value);
            let call = |a| Call { tool, action: None, arguments: a };
            prop_assert_eq!(p.flow_labels_set_by(&call(&one), None), p.flow_labels_set_by(&call(&array), None));
            // What an approver is shown of an escalation.
            if expected.0 == "escalate" {
                prop_assert_eq!(p.preview(&call(&one)), p.preview(&call(&array)));
            }
        }
    }

    #[test]
    fn an_array_decides_as_its_strictest_element(a in values(), b in values()) {
        let p = policy();
        for (tool, arg) in SELECTED {
            let strictness = |d: &str| ["allow", "escalate", "deny"].iter().position(|x| *x == d);
            let each: Vec<_> = [&a, &b]
                .iter()
                .map(|v| decide(&p, tool, &call_args(arg, json!(v)), LabelSet::EMPTY))
                .collect();
            let both = decide(&p, tool, &call_args(arg, json!([a, b])), LabelSet::EMPTY);
            let strictest = each.iter().map(|d| strictness(&d.0)).max().unwrap();
            prop_assert_eq!(strictness(&both.0), strictest, "{} {:?} {:?}", tool, a, b);
        }
    }
}

/// The attack of the issue: a key read through an array argument sets the
/// label, so the egress after it is refused.
#[test]
fn a_key_read_through_an_array_labels_the_run() {
    let p = policy();
    let read = call_args("paths", json!(["/w/notes.txt", "/home/a/.ssh/id_ed25519"]));
    let set = p.flow_labels_set_by(
        &Call {
            tool: "fs.read_multiple_files",
            action: None,
            arguments: &read,
        },
        None,
    );
    assert_eq!(p.flow_label_names(set), ["private"]);
    let post = call_args("urls", json!(["http://ok.example/"]));
    let (verdict, reason, _) = decide(&p, "web.get", &post, set);
    assert_eq!(
        (verdict.as_str(), reason.as_str()),
        ("deny", Reason::FlowRule.as_str())
    );
    // A hardline command sees an argument vector as its command line.
    let argv = call_args("argv", json!(["rm", "-rf", "/"]));
    let (verdict, reason, _) = decide(&p, "run", &argv, LabelSet::EMPTY);
    assert_eq!(
        (verdict.as_str(), reason.as_str()),
        ("deny", "hardline_command")
    );
    // Hardline paths see every element, normalized.
    let env = call_args("paths", json!(["/w/notes.txt", ["/w/x/../.env"]]));
    let (verdict, reason, _) = decide(&p, "fs.read_multiple_files", &env, LabelSet::EMPTY);
    assert_eq!(
        (verdict.as_str(), reason.as_str()),
        ("deny", "hardline_path")
    );
}
