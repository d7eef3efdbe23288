//! One run, one spelling (issue #31, item 8): after a run is cancelled or
//! its budget is spent, no look-alike of its id gets a call through. Every
//! variant is refused (`invalid_run_id`) or is the run itself.

use serde_json::{Value, json};

use crate::common::*;

/// What an agent writes to make "another" run of `run` (lowercase ASCII).
fn look_alikes(run: &str) -> Vec<String> {
    let wide: String = run
        .chars()
        .map(|c| match c {
            'a'..='z' => char::from_u32(0xFF41 + (c as u32 - 'a' as u32)).unwrap_or(c),
            other => other,
        })
        .collect();
    vec![
        format!("{run} "),
        run.to_ascii_uppercase(),
        format!("{run}\u{200b}"),
        format!("\u{200b}{run}"),
        wide,
        format!("{run}/"),
        format!("{run}\u{a0}"),
        format!("{run}."),
        format!("{run}-"),
        format!("{run}\u{feff}"),
    ]
}

/// Posts one call for `run`; `Ok(verdict)` when it was decided,
/// `Err(code)` when the request was refused.
async fn ask(h: &Harness, tool: &str, arguments: Value, run: &str) -> Result<Value, String> {
    let (status, body) = h
        .post(
            "/v1/authorize",
            json!({"tool": tool, "arguments": arguments, "run_id": run, "step_id": "s1"}),
        )
        .await;
    match status {
        200 => Ok(body),
        _ => Err(format!("{status} {}", body["error"]["code"])),
    }
}

/// The one acceptable outcome for a look-alike: refused as a run id, or
/// decided as the run itself (`reason`).
fn refused_or(outcome: &Result<Value, String>, reason: &str) -> bool {
    match outcome {
        Ok(v) => v["verdict"] == "deny" && v["reason"] == reason,
        Err(code) => code == "400 \"invalid_run_id\"",
    }
}

#[tokio::test]
async fn look_alikes_of_a_cancelled_run_are_refused_or_cancelled() {
    each_backend!(SPEC, |h| {
        let run = unique("run");
        let (status, done) = h.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
        assert_eq!(status, 200, "{done}");
        for alike in look_alikes(&run) {
            // A read, a high-risk command that is allowed, and an escalation.
            for (tool, args) in [
                ("reader", json!({"path": "notes.txt"})),
                ("bash", json!({"command": "ls -la"})),
                ("deploy", json!({"env": "prod"})),
            ] {
                let outcome = ask(&h, tool, args, &alike).await;
                assert!(
                    refused_or(&outcome, "run_cancelled"),
                    "{alike:?} {tool}: {outcome:?}"
                );
            }
            // The batch endpoint and the workspace API are ways in too.
            let (status, batch) = h
                .post(
                    "/v1/authorize/batch",
                    json!({"run_id": alike, "calls": [{"tool": "reader", "arguments": {"path": "a"}}]}),
                )
                .await;
            assert!(
                (status == 400 && batch["error"]["code"] == "invalid_run_id")
                    || batch["verdicts"][0]["reason"] == "run_cancelled",
                "{alike:?} batch: {status} {batch}"
            );
            let (status, read) = h
                .post(
                    "/v1/workspace/read",
                    json!({"run_id": alike, "path": "notes.txt"}),
                )
                .await;
            assert!(
                (status == 400 && read["error"]["code"] == "invalid_run_id")
                    || read["verdict"]["reason"] == "run_cancelled",
                "{alike:?} workspace: {status} {read}"
            );
        }
        // No approval was asked for any of them.
        let approvals = h.approvals().await;
        assert!(approvals.is_empty(), "{approvals:?}");
    });
}

#[tokio::test]
async fn a_run_cancelled_under_another_spelling_is_the_same_run() {
    each_backend!(SPEC, |h| {
        let run = unique("run");
        let upper = run.to_ascii_uppercase();
        // Cancelled as `RUN-…`, asked as `run-…`: one run.
        let (status, done) = h
            .post(
                &format!("/v1/runs/{upper}/cancel"),
                json!({"reason": "stop"}),
            )
            .await;
        assert_eq!(status, 200, "{done}");
        assert_eq!(done["run_id"], run, "answered in its canonical spelling");
        let v = h.authorize("bash", json!({"command": "ls"}), &run).await;
        assert_eq!(
            (v["verdict"].as_str(), v["reason"].as_str()),
            (Some("deny"), Some("run_cancelled"))
        );
        let (status, state) = h.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(
            (status, state["cancel_requested"].as_bool()),
            (200, Some(true))
        );
        // Path segments are run ids too: a look-alike is refused, never a new run.
        for alike in ["%20", "%E2%80%8B", "%C2%A0", ".", "%2F"] {
            let (status, err) = h
                .post(&format!("/v1/runs/{run}{alike}/cancel"), json!({}))
                .await;
            assert_eq!(
                (status, err["error"]["code"].as_str()),
                (400, Some("invalid_run_id")),
                "{alike}: {err}"
            );
            let (status, err) = h.get_json(&format!("/v1/runs/{run}{alike}")).await;
            assert_eq!(
                (status, err["error"]["code"].as_str()),
                (400, Some("invalid_run_id"))
            );
        }
        let (status, err) = h
            .get_json(&format!("/v1/intents?run_id={run}%20&status=pending"))
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (400, Some("invalid_run_id"))
        );
    });
}

#[tokio::test]
async fn a_spent_budget_is_not_spent_again_under_a_look_alike() {
    let spec = format!("{SPEC}budgets: {{maxCallsPerRun: 2}}\n");
    each_backend!(&spec, |h| {
        let run = unique("run");
        for _ in 0..2 {
            let v = h.authorize("reader", json!({"path": "a"}), &run).await;
            assert_eq!(v["verdict"], "allow", "{v}");
        }
        let v = h.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(v["reason"], "budget_exhausted", "{v}");
        for alike in look_alikes(&run) {
            for (tool, args) in [
                ("reader", json!({"path": "a"})),
                ("bash", json!({"command": "ls"})),
            ] {
                let outcome = ask(&h, tool, args, &alike).await;
                assert!(
                    refused_or(&outcome, "budget_exhausted"),
                    "{alike:?} {tool}: {outcome:?}"
                );
            }
        }
        let (_, state) = h.get_json(&format!("/v1/runs/{run}")).await;
        assert_eq!(state["budgets"]["calls"]["used"], 2, "{state}");
    });
}

#[tokio::test]
async fn runs_are_recorded_in_their_canonical_spelling() {
    each_backend!(SPEC, |h| {
        let run = unique("mixed");
        let upper = run.to_ascii_uppercase();
        let v = h.authorize("bash", json!({"command": "ls"}), &upper).await;
        assert_eq!(v["verdict"], "allow", "{v}");
        // The intent names the run in any case; the decision is the run's.
        let (status, intent) = h
            .post(
                "/v1/intents",
                json!({"decision_id": v["decision_id"], "run_id": run, "step_id": "s1",
                       "tool": "bash", "args_digest": v["args_digest"]}),
            )
            .await;
        assert_eq!(status, 201, "{intent}");
        let log = h.tenant_log().await;
        assert!(log.iter().all(|d| d.record.run_id == run), "{log:?}");
        let (_, pending) = h
            .get_json(&format!("/v1/intents?run_id={upper}&status=pending"))
            .await;
        assert_eq!(
            pending["intents"].as_array().map(Vec::len),
            Some(1),
            "{pending}"
        );
        assert_eq!(pending["intents"][0]["run_id"], run, "{pending}");
    });
}

/// One id rule (issue #34): every run id `/v1/authorize` takes has a
/// workspace. The workspace API once had its own, narrower alphabet, so
/// `team:run-1` was authorized yet refused its workspace.
#[tokio::test]
async fn every_run_that_can_be_authorized_has_a_workspace() {
    each_backend!(SPEC, |h| {
        for run in ["team:run-1", "a", "x.y_z-1", &"r".repeat(128)] {
            let v = h.authorize("reader", json!({"path": "a"}), run).await;
            assert_eq!(v["verdict"], "allow", "{run}: {v}");
            let (status, written) = h
                .post(
                    "/v1/workspace/write",
                    json!({"run_id": run, "path": "notes.txt", "content": run}),
                )
                .await;
            assert_eq!(status, 200, "{run}: {written}");
            let (status, read) = h
                .post(
                    "/v1/workspace/read",
                    json!({"run_id": run, "path": "notes.txt"}),
                )
                .await;
            assert_eq!(
                (status, read["content"].as_str()),
                (200, Some(run)),
                "{read}"
            );
        }
    });
}
