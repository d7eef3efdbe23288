//! Stops an agent cannot step around (issue #31, item 8): a run id is the
//! agent's to choose, so after its run is cancelled or its budget spent it
//! can simply start another. A cancelled pod, profile or namespace refuses
//! every run id, and `spec.budgets.perPod` counts every run of the pod.

use serde_json::{Value, json};
use toolgate_policy::Scope;

use crate::common::*;

/// The verdict's (verdict, reason) for one call of `tool` in a fresh run.
async fn in_new_run(h: &Harness, tool: &str, arguments: Value) -> (String, String) {
    let v = h.authorize(tool, arguments, &unique("run")).await;
    (
        v["verdict"].as_str().unwrap_or_default().to_owned(),
        v["reason"].as_str().unwrap_or_default().to_owned(),
    )
}

fn cancelled() -> (String, String) {
    ("deny".into(), "run_cancelled".into())
}

/// `POST /v1/pod/cancel` answers the scope it stopped; every way in then
/// refuses a fresh run id (`/v1/authorize`, the batch, the workspace API)
/// and the run's state names the stop; stopping twice keeps the first
/// stop's time; a bad body is a 400. (That a pod stop binds every run id
/// and outlives the sidecar: the gate's `budgets_and_stops` tests.)
#[tokio::test]
async fn a_new_run_id_does_not_step_around_a_pod_stop() {
    each_backend!(SPEC, |h| {
        let (status, done) = h
            .post("/v1/pod/cancel", json!({"reason": "agent gone wrong"}))
            .await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["scope"], "pod local", "{done}");
        assert_eq!(done["newly_cancelled"], true, "{done}");
        assert_eq!(
            in_new_run(&h, "reader", json!({"path": "a"})).await,
            cancelled()
        );
        let fresh = unique("run");
        let (_, batch) = h
            .post(
                "/v1/authorize/batch",
                json!({"run_id": fresh, "calls": [{"tool": "reader", "arguments": {"path": "a"}}]}),
            )
            .await;
        assert_eq!(batch["verdicts"][0]["reason"], "run_cancelled", "{batch}");
        let (_, read) = h.workspace("read", &fresh, "a").await;
        assert_eq!(read["verdict"]["reason"], "run_cancelled", "{read}");
        let state = h.run_state(&fresh).await;
        assert_eq!(state["cancel_requested"], true, "{state}");
        assert_eq!(state["cancelled_scope"], "pod local", "{state}");
        assert_eq!(state["cancel_reason"], "agent gone wrong", "{state}");
        let (_, again) = h.post("/v1/pod/cancel", json!({})).await;
        assert_eq!(again["newly_cancelled"], false, "{again}");
        assert_eq!(again["cancel_requested_at"], done["cancel_requested_at"]);
        let (status, err) = h
            .post("/v1/pod/cancel", json!({"scope": "namespace"}))
            .await;
        assert_eq!(status, 400, "{err}");
    });
}

#[tokio::test]
async fn a_scope_cancelled_elsewhere_reaches_the_sidecar() {
    each_backend!(SPEC, |h| {
        let runs = h.store.runs();
        let other = Scope::parse("profile", Some("review")).unwrap();
        runs.cancel_scope(&h.tenant, &other, None, "cli", jiff::Timestamp::now())
            .await
            .unwrap();
        assert_eq!(
            in_new_run(&h, "bash", json!({"command": "ls"})).await.0,
            "allow"
        );
        // This sidecar's profile, stopped by the CLI or the controller.
        let mine = Scope::parse("profile", Some("coding")).unwrap();
        runs.cancel_scope(
            &h.tenant,
            &mine,
            Some("incident"),
            "cli",
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
        // A high-risk call reads the database: refused at once.
        assert_eq!(
            in_new_run(&h, "bash", json!({"command": "ls"})).await,
            cancelled()
        );
        // A read is refused once the sidecar has read the stop: on
        // PostgreSQL woken by the stop itself (its timer is a minute), on
        // SQLite by its one-second timer.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got = in_new_run(&h, "reader", json!({"path": "a"})).await;
            if got == cancelled() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "still {got:?}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let (_, metrics) = h.get("/metrics").await;
        let reads = |trigger: &str| -> u64 {
            let series = format!("toolgate_stop_reads_total{{trigger=\"{trigger}\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {series} in {metrics}"))
        };
        assert_eq!(reads("start"), 1);
        if h.store.as_postgres().is_some() {
            assert!(reads("wake") >= 1, "{metrics}");
            assert_eq!(reads("timer"), 0, "an idle sidecar that hears stops waits");
        } else {
            assert_eq!(reads("wake"), 0, "SQLite has nothing to hear");
            assert!(reads("timer") >= 1, "{metrics}");
        }
    });
}

/// The pod's budget as `GET /v1/runs/{run}` shows it: `pod_calls` as
/// used/limit/left, a fresh run's own count at zero. (That it binds across
/// run ids and refuses unpaid escalations: the gate's `budgets_and_stops`.)
#[tokio::test]
async fn a_pod_budget_holds_across_run_ids() {
    let spec = format!("{SPEC}budgets: {{perPod: {{maxCalls: 3}}}}\n");
    each_backend!(&spec, |h| {
        for _ in 0..3 {
            assert_eq!(
                in_new_run(&h, "reader", json!({"path": "a"})).await.0,
                "allow"
            );
        }
        let fresh = unique("run");
        let v = h.authorize("reader", json!({"path": "a"}), &fresh).await;
        assert_eq!(v["reason"], "budget_exhausted", "{v}");
        assert_eq!(v["matched_rule"], "budget:perPod.maxCalls=3", "{v}");
        let state = h.run_state(&fresh).await;
        assert_eq!(
            state["budgets"]["pod_calls"],
            json!({"used": 3, "limit": 3, "left": 0}),
            "{state}"
        );
        assert_eq!(state["budgets"]["calls"]["used"], 0, "{state}");
    });
}
