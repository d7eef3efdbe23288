//! Run governance as the agent API shows it, against SQLite and
//! PostgreSQL: the budget, cancellation, trial-mode and batch answers'
//! HTTP shapes and codes. What the gate decides is proven in process by
//! `toolgate-gate`'s tests; these keep only what HTTP adds.

use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};

fn budgeted() -> String {
    format!("{SPEC}budgets: {{maxCallsPerRun: 5, maxHighRiskCallsPerRun: 2}}\n")
}

/// A spent budget is an ordinary 200 answer (`deny`, `budget_exhausted`,
/// naming the budget), and `GET /v1/runs/{run}` shows each budget as
/// used/limit/left. (What is charged, shared and logged: the gate's
/// `budgets_and_stops` tests.)
#[tokio::test]
async fn a_spent_budget_is_a_typed_deny_and_the_run_shows_its_budgets() {
    each_backend!(&budgeted(), |h| {
        let run = unique("run");
        for _ in 0..2 {
            let v = h.authorize("bash", json!({"command": "ls"}), &run).await;
            assert_eq!(outcome(&v), ("allow", "allow_rule"), "{v}");
        }
        let third = h.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(outcome(&third), ("deny", "budget_exhausted"), "{third}");
        assert_eq!(third["matched_rule"], "budget:maxHighRiskCallsPerRun=2");
        assert_eq!(third["intent_required"], false);

        let state = h.run_state(&run).await;
        assert_eq!(state["cancel_requested"], false);
        assert_eq!(
            state["budgets"]["calls"],
            json!({"used": 2, "limit": 5, "left": 3})
        );
        assert_eq!(
            state["budgets"]["high_risk_calls"],
            json!({"used": 2, "limit": 2, "left": 0})
        );
        assert_eq!(state["budgets"]["run_seconds"]["limit"], Value::Null);
    });
}

/// `POST /v1/runs/{run}/cancel` answers what it did, wakes an approval's
/// long poll with `cancelled`, and the run's state shows the stop and the
/// open intent kept for resume; cancelling twice is a 200, a bad body a
/// typed 400. (Who refuses what after a stop: the gate's
/// `budgets_and_stops` and `stop_watch` tests.)
#[tokio::test]
async fn cancelling_a_run_over_http_answers_and_wakes_its_waiters() {
    each_backend!(|h| {
        let run = unique("run");
        let allowed = h.authorize("bash", json!({"command": "ls"}), &run).await;
        let (status, _) = h
            .post(
                "/v1/intents",
                json!({"decision_id": allowed["decision_id"], "run_id": run, "step_id": "s1",
                       "tool": "bash", "args_digest": allowed["args_digest"]}),
            )
            .await;
        assert_eq!(status, 201);
        let escalated = h.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&escalated), ("escalate", "escalate_rule"));
        let approval = escalated["approval_id"].as_str().unwrap().to_owned();
        let waiter = {
            let (client, base) = (h.client.clone(), h.base.clone());
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

        let (status, cancel) = h
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

        let v = h.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(outcome(&v), ("deny", "run_cancelled"), "{v}");
        let state = h.run_state(&run).await;
        assert_eq!(state["cancel_requested"], true, "{state}");
        assert_eq!(state["cancel_reason"], "user pressed stop");
        let open = state["open_intents"].as_array().unwrap();
        assert_eq!(open.len(), 1, "{state}");
        assert_eq!(open[0]["resume"], "safe_to_retry");

        let (status, again) = h.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
        assert_eq!((status, &again["newly_cancelled"]), (200, &json!(false)));
        let (status, bad) = h
            .post(
                &format!("/v1/runs/{run}/cancel"),
                json!({"reason": "x", "extra": 1}),
            )
            .await;
        assert_eq!(
            (status, bad["error"]["code"].as_str()),
            (400, Some("invalid_request"))
        );
    });
}

/// The trial modes' answer over HTTP: `allow`/`not_enforced` with
/// `enforced: false` and the would-fields (a `warning` only under `warn`),
/// and the decisions counted by what enforcement would have answered.
/// (Which refusals are softened and which bind: the gate's `trial_modes`.)
#[tokio::test]
async fn dry_run_and_warn_answer_and_count_what_enforce_would_do() {
    let spec = format!("{SPEC}enforcement: dryRun\n").replace(
        "deploy: {sideEffect: EXTERNAL_WRITE, risk: write}",
        "deploy: {sideEffect: EXTERNAL_WRITE, risk: write, enforcement: warn}",
    );
    each_backend!(&spec, |h| {
        let run = unique("run");
        let v = h
            .authorize("bash", json!({"command": "rm -rf /tmp/x"}), &run)
            .await;
        assert_eq!(outcome(&v), ("allow", "not_enforced"), "{v}");
        assert_eq!(v["enforced"], false);
        assert_eq!(v["would_verdict"], "deny");
        assert_eq!(v["would_reason"], "deny_rule");
        assert_eq!(v["would_rule"], "deny:bash:rm *");
        assert_eq!(v["intent_required"], true);
        assert!(v.get("warning").is_none(), "dryRun is silent");
        let w = h.authorize("deploy", json!({"env": "prod"}), &run).await;
        assert_eq!(outcome(&w), ("allow", "not_enforced"), "{w}");
        assert_eq!(w["would_verdict"], "escalate");
        assert!(w.get("approval_id").is_none());
        assert!(
            w["warning"].as_str().unwrap().contains("would escalate"),
            "{w}"
        );
        let hard = h
            .authorize("reader", json!({"path": "app/.env"}), &run)
            .await;
        assert_eq!(outcome(&hard), ("deny", "hardline_path"));
        assert_eq!(hard["enforced"], true);

        let (_, metrics) = h.get("/metrics").await;
        for series in [
            r#"toolgate_decisions_total{enforced="false",profile="coding",reason="deny_rule",tool="bash",verdict="deny"} 1"#,
            r#"toolgate_decisions_total{enforced="false",profile="coding",reason="escalate_rule",tool="deploy",verdict="escalate"} 1"#,
            r#"toolgate_decisions_total{enforced="true",profile="coding",reason="hardline_path",tool="reader",verdict="deny"} 1"#,
            r#"toolgate_decisions_total{enforced="false",profile="coding",reason="allow_rule",tool="reader",verdict="allow"} 0"#,
        ] {
            assert!(metrics.contains(series), "missing {series}");
        }
    });
}

/// `POST /v1/authorize/batch` answers `parallel`, `reason`, `call_index`
/// and one verdict a call; a malformed batch (empty, over 64 calls, a bad
/// call, an unknown field) is a typed 400 and nothing of it is decided.
/// (Which batches run at once: the gate's `batches` tests.)
#[tokio::test]
async fn batches_are_answered_over_http_and_malformed_ones_refused() {
    each_backend!(|h| {
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
        assert!(ok.get("call_index").is_none(), "{ok}");
        let verdicts = ok["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 2);
        assert!(
            verdicts
                .iter()
                .all(|v| v["verdict"] == "allow" && v["decision_id"].is_string())
        );
        let bash = json!({"tool": "bash", "arguments": {"command": "ls"}});
        let (_, mixed) = h
            .post("/v1/authorize/batch", batch(json!([read, bash])))
            .await;
        assert_eq!(
            (mixed["parallel"].as_bool(), mixed["reason"].as_str()),
            (Some(false), Some("batch_not_read_only"))
        );
        assert_eq!(mixed["call_index"], 1);

        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = h.tenant_log().await.len();
        for body in [
            batch(json!([])),
            batch(json!(vec![read.clone(); 65])),
            batch(json!([read, {"tool": "", "arguments": {}}])),
            batch(json!([{"tool": "reader", "arguments": {}, "surprise": true}])),
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
    });
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
