//! Run governance over real HTTP: budgets shared by sidecars of one
//! database, durable cancellation, parallel admission and the enforcement
//! modes, against SQLite and PostgreSQL.

use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};

fn budgeted() -> String {
    format!("{SPEC}budgets: {{maxCallsPerRun: 5, maxHighRiskCallsPerRun: 2}}\n")
}

#[tokio::test]
async fn budgets_are_one_per_run_across_sidecars_and_restarts() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        eprintln!("backend: {name}");
        let dir = scratch.path().join(&name);
        let (mut one, mut two) = pair(&dir, &url, &budgeted()).await;
        let run = unique("run");
        // Two high-risk calls, one on each sidecar, use that budget up.
        for h in [&one, &two] {
            let v = h.authorize("bash", json!({"command": "ls"}), &run).await;
            assert_eq!(outcome(&v), ("allow", "allow_rule"), "{v}");
        }
        let third = one.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&third), ("deny", "budget_exhausted"), "{third}");
        assert_eq!(third["matched_rule"], "budget:maxHighRiskCallsPerRun=2");
        assert_eq!(third["intent_required"], false);
        // Refused calls count nothing: three more low-risk calls fit.
        for h in [&two, &one, &two] {
            let v = h.authorize("reader", json!({"path": "a"}), &run).await;
            assert_eq!(outcome(&v), ("allow", "allow_rule"), "{v}");
        }
        // A restart resets nothing (same bundle: a re-signed sequence 1
        // would be refused as a rollback).
        two.stop().await;
        let two_dir = dir.join("two");
        let bytes = std::fs::read(two_dir.join("bundle.json")).unwrap();
        two = Harness::start_as(&two_dir, &url, Some(&bytes), &one.tenant).await;
        let sixth = two.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(outcome(&sixth), ("deny", "budget_exhausted"), "{sixth}");
        assert_eq!(sixth["matched_rule"], "budget:maxCallsPerRun=5");
        // Denied calls are never charged, and another run has its own budget.
        let other = two
            .authorize("reader", json!({"path": "a"}), &unique("run"))
            .await;
        assert_eq!(outcome(&other), ("allow", "allow_rule"));

        let (status, state) = one.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(status, 200, "{state}");
        assert_eq!(state["cancel_requested"], false);
        assert_eq!(
            state["budgets"]["calls"],
            json!({"used": 5, "limit": 5, "left": 0})
        );
        assert_eq!(
            state["budgets"]["high_risk_calls"],
            json!({"used": 2, "limit": 2, "left": 0})
        );
        assert_eq!(state["budgets"]["run_seconds"]["limit"], Value::Null);

        // The refused high-risk call is in the decision log, with its budget.
        let log = one.tenant_log().await;
        let refused = log
            .iter()
            .find(|d| d.record.decision_id == third["decision_id"].as_str().unwrap())
            .expect("the refusal was recorded with the charge");
        assert_eq!(refused.record.reason, "budget_exhausted");
        assert!(
            refused
                .record
                .message
                .as_deref()
                .unwrap()
                .contains("maxHighRiskCallsPerRun"),
        );
        one.stop().await;
        two.stop().await;
    }
}

#[tokio::test]
async fn a_cancelled_run_is_refused_everywhere_and_its_waiters_woken() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        eprintln!("backend: {name}");
        let dir = scratch.path().join(&name);
        let (mut one, mut two) = pair(&dir, &url, SPEC).await;
        let run = unique("run");
        // An open intent, and an escalation waiting for a human on sidecar two.
        let allowed = one.authorize("bash", json!({"command": "ls"}), &run).await;
        let (status, _) = one
            .post(
                "/v1/intents",
                json!({"decision_id": allowed["decision_id"], "run_id": run, "step_id": "s1",
                       "tool": "bash", "args_digest": allowed["args_digest"]}),
            )
            .await;
        assert_eq!(status, 201);
        let escalated = two.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&escalated), ("escalate", "escalate_rule"));
        let approval = escalated["approval_id"].as_str().unwrap().to_owned();
        let waiter = {
            let (client, base) = (two.client.clone(), two.base.clone());
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let body: Value = client
                    .get(format!("{base}/v1/approvals/{approval}?wait=30"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                (body, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;

        // The agent itself cancels, through sidecar one.
        let (status, cancel) = one
            .post(
                &format!("/v1/runs/{run}/cancel"),
                json!({"reason": "user pressed stop"}),
            )
            .await;
        assert_eq!(status, 200, "{cancel}");
        assert_eq!(cancel["newly_cancelled"], true);
        assert_eq!(cancel["approvals_cancelled"], 1);
        let (body, waited) = waiter.await.unwrap();
        assert_eq!(body["status"], "cancelled", "{body}");
        assert!(waited < Duration::from_secs(10), "woken after {waited:?}");

        // Sidecar one refuses at once, low or high risk.
        for (tool, args) in [
            ("reader", json!({"path": "a"})),
            ("bash", json!({"command": "ls"})),
        ] {
            let v = one.authorize(tool, args, &run).await;
            assert_eq!(outcome(&v), ("deny", "run_cancelled"), "{v}");
        }
        // Sidecar two refuses a high-risk call at once (it reaches the
        // database) and a low-risk one once its poll has seen it.
        let v = two.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&v), ("deny", "run_cancelled"), "{v}");
        let mut seen = false;
        for _ in 0..60 {
            let v = two.authorize("reader", json!({"path": "a"}), &run).await;
            if outcome(&v) == ("deny", "run_cancelled") {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(seen, "the other sidecar never learned of the cancellation");
        // A fresh escalation of the cancelled run asks nobody.
        let v = two
            .authorize("deploy", json!({"env": "staging"}), &run)
            .await;
        assert_eq!(outcome(&v), ("deny", "run_cancelled"), "{v}");
        assert!(v.get("approval_id").is_none() || v["approval_id"].is_null());

        // The heartbeat: cancelled, and the open intent kept for resume.
        let (_, state) = two.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(state["cancel_requested"], true, "{state}");
        assert_eq!(state["cancel_reason"], "user pressed stop");
        let open = state["open_intents"].as_array().unwrap();
        assert_eq!(open.len(), 1, "{state}");
        assert_eq!(open[0]["resume"], "safe_to_retry");
        // Other runs are untouched; cancelling twice is harmless.
        let v = one
            .authorize("reader", json!({"path": "a"}), &unique("run"))
            .await;
        assert_eq!(outcome(&v), ("allow", "allow_rule"));
        let (status, again) = two.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
        assert_eq!((status, &again["newly_cancelled"]), (200, &json!(false)));
        // Bad input is a typed 400.
        let (status, bad) = two
            .post(
                &format!("/v1/runs/{run}/cancel"),
                json!({"reason": "x", "extra": 1}),
            )
            .await;
        assert_eq!(
            (status, bad["error"]["code"].as_str()),
            (400, Some("invalid_request"))
        );
        one.stop().await;
        two.stop().await;
    }
}

#[tokio::test]
async fn a_run_cancelled_from_outside_is_refused_and_dry_run_does_not_soften_it() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        eprintln!("backend: {name}");
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = format!("{SPEC}enforcement: dryRun\n");
        let mut h = Harness::start(&dir, &url, Some(&bundle(&spec, 1, day(), &key()))).await;
        let run = unique("run");
        // The CLI and the controller cancel through the store.
        h.store
            .runs()
            .cancel(
                &h.tenant,
                &toolgate_policy::RunId::parse(&run).unwrap(),
                None,
                "user:alice",
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
        let v = h
            .authorize("bash", json!({"command": "rm -rf /"}), &run)
            .await;
        assert_eq!(outcome(&v), ("deny", "run_cancelled"), "{v}");
        assert_eq!(v["enforced"], true);
        h.stop().await;
    }
}

#[tokio::test]
async fn dry_run_and_warn_allow_and_report_what_enforce_would_do() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        eprintln!("backend: {name}");
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = format!("{SPEC}enforcement: dryRun\n").replace(
            "deploy: {sideEffect: EXTERNAL_WRITE, risk: write}",
            "deploy: {sideEffect: EXTERNAL_WRITE, risk: write, enforcement: warn}",
        );
        let mut h = Harness::start(&dir, &url, Some(&bundle(&spec, 1, day(), &key()))).await;
        let run = unique("run");
        let v = h
            .authorize("bash", json!({"command": "rm -rf /tmp/x"}), &run)
            .await;
        assert_eq!(outcome(&v), ("allow", "not_enforced"), "{v}");
        assert_eq!(v["enforced"], false);
        assert_eq!(v["would_verdict"], "deny");
        assert_eq!(v["would_reason"], "deny_rule");
        assert_eq!(v["would_rule"], "deny:bash:rm *");
        assert_eq!(
            v["intent_required"], true,
            "an allowed high-risk call needs its intent"
        );
        assert!(v.get("warning").is_none(), "dryRun is silent");
        // An escalation in warn mode: allowed, no approval asked, a warning.
        let w = h.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&w), ("allow", "not_enforced"), "{w}");
        assert_eq!(w["would_verdict"], "escalate");
        assert!(w.get("approval_id").is_none());
        assert!(
            w["warning"].as_str().unwrap().contains("would escalate"),
            "{w}"
        );
        // Hardline and unknown tools bind in every mode.
        let hard = h
            .authorize("reader", json!({"path": "app/.env"}), &run)
            .await;
        assert_eq!(outcome(&hard), ("deny", "hardline_path"));
        assert_eq!(hard["enforced"], true);
        let unknown = h.authorize("browser", json!({}), &run).await;
        assert_eq!(outcome(&unknown), ("deny", "unknown_tool"));

        // Counted by what enforcement would have answered.
        let (_, metrics) = h.get("/metrics").await;
        for series in [
            r#"toolgate_decisions_total{enforced="false",profile="coding",reason="deny_rule",tool="bash",verdict="deny"} 1"#,
            r#"toolgate_decisions_total{enforced="false",profile="coding",reason="escalate_rule",tool="deploy",verdict="escalate"} 1"#,
            r#"toolgate_decisions_total{enforced="true",profile="coding",reason="hardline_path",tool="reader",verdict="deny"} 1"#,
            r#"toolgate_decisions_total{enforced="false",profile="coding",reason="allow_rule",tool="reader",verdict="allow"} 0"#,
        ] {
            assert!(metrics.contains(series), "missing {series}");
        }
        // Recorded with what would have happened (the high-risk one durably).
        let log = h.tenant_log().await;
        let rec = log
            .iter()
            .find(|d| d.record.decision_id == v["decision_id"].as_str().unwrap())
            .expect("recorded");
        assert_eq!(rec.record.reason, "not_enforced");
        let message: Value = serde_json::from_str(rec.record.message.as_deref().unwrap()).unwrap();
        assert_eq!(message["would_reason"], "deny_rule");
        assert_eq!(message["would_rule"], "deny:bash:rm *");
        h.stop().await;
    }
}

#[tokio::test]
async fn batches_run_in_parallel_only_when_every_call_is_read_only() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        eprintln!("backend: {name}");
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = format!("{SPEC}budgets: {{maxCallsPerRun: 4}}\n");
        let mut h = Harness::start(&dir, &url, Some(&bundle(&spec, 1, day(), &key()))).await;
        let run = unique("run");
        let batch = |calls: Value| json!({"run_id": run, "calls": calls});
        let read = json!({"tool": "reader", "arguments": {"path": "a"}});

        let (status, ok) = h
            .post("/v1/authorize/batch", batch(json!([read, read])))
            .await;
        assert_eq!(status, 200, "{ok}");
        assert_eq!(
            (ok["parallel"].as_bool(), ok["reason"].as_str()),
            (Some(true), Some("batch_parallel"))
        );
        let verdicts = ok["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 2);
        assert!(
            verdicts
                .iter()
                .all(|v| v["verdict"] == "allow" && v["decision_id"].is_string())
        );

        // One effectful call keeps the whole batch sequential.
        let bash = json!({"tool": "bash", "arguments": {"command": "ls"}});
        let (_, mixed) = h
            .post("/v1/authorize/batch", batch(json!([read, bash])))
            .await;
        assert_eq!(
            (mixed["parallel"].as_bool(), mixed["reason"].as_str()),
            (Some(false), Some("batch_not_read_only"))
        );
        assert_eq!(mixed["call_index"], 1);
        assert_eq!(mixed["verdicts"][1]["intent_required"], true);

        // The budget (4 calls) is used up mid-batch: sequential, never a subset.
        let (_, over) = h
            .post("/v1/authorize/batch", batch(json!([read, read])))
            .await;
        assert_eq!(
            (over["parallel"].as_bool(), over["reason"].as_str()),
            (Some(false), Some("batch_budget")),
            "{over}"
        );
        assert_eq!(over["verdicts"][1]["reason"], "budget_exhausted");

        let run2 = unique("run");
        let other = |calls: Value| json!({"run_id": run2, "calls": calls});
        let deploy = json!({"tool": "deploy", "arguments": {"env": "prod"}});
        let (_, esc) = h
            .post("/v1/authorize/batch", other(json!([deploy, read])))
            .await;
        assert_eq!(esc["reason"], "batch_escalated");
        let unknown = json!({"tool": "browser", "arguments": {}});
        let (_, unk) = h
            .post("/v1/authorize/batch", other(json!([read, unknown])))
            .await;
        assert_eq!(
            (unk["parallel"].as_bool(), unk["reason"].as_str()),
            (Some(false), Some("batch_denied"))
        );

        // Malformed batches are typed 400s, and nothing of them is decided.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = h.tenant_log().await.len();
        for body in [
            other(json!([])),
            other(json!(vec![read.clone(); 65])),
            other(json!([read, {"tool": "", "arguments": {}}])),
            other(json!([{"tool": "reader", "arguments": {}, "surprise": true}])),
        ] {
            let (status, err) = h.post("/v1/authorize/batch", body).await;
            assert_eq!(
                (status, err["error"]["code"].as_str()),
                (400, Some("invalid_request")),
                "{err}"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = h.tenant_log().await.len();
        assert_eq!(before, after, "a rejected batch recorded decisions");
        h.stop().await;
    }
}

/// A cancellation reason the store refuses (blank) is a typed 400 and
/// cancels nothing: the rule lives once, in the store, for the API, the CLI
/// and the controller alike.
#[tokio::test]
async fn a_blank_cancellation_reason_is_refused_and_cancels_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_, url) = backends(dir.path()).remove(0);
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
    let run = unique("run");
    let (status, err) = h
        .post(&format!("/v1/runs/{run}/cancel"), json!({"reason": "   "}))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{err}"
    );
    let allowed = h.authorize("bash", json!({"command": "ls"}), &run).await;
    assert_eq!(allowed["verdict"], "allow", "{allowed}");
    h.stop().await;
}
