//! The sidecar over real HTTP on loopback, against SQLite and PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use jiff::SignedDuration;
use serde_json::{Value, json};
use toolgate_store::ApprovalDecision;

#[tokio::test]
async fn verdicts_are_typed_and_recorded() {
    each_backend!(|h| {
        let run = unique("run");
        let allow = h
            .authorize("bash", json!({"command": "ls -la"}), &run)
            .await;
        assert_eq!(allow["verdict"], "allow");
        assert_eq!(allow["reason"], "allow_rule");
        assert_eq!(allow["matched_rule"], "allow:bash:ls*");
        assert_eq!(allow["intent_required"], true);
        assert!(
            allow["policy_version"]
                .as_str()
                .unwrap()
                .starts_with("coding@")
        );
        assert!(allow["decision_id"].as_str().unwrap().len() >= 32);

        let deny = h
            .authorize("bash", json!({"command": "rm -rf /"}), &run)
            .await;
        assert_eq!(
            (deny["verdict"].as_str(), deny["reason"].as_str()),
            (Some("deny"), Some("deny_rule"))
        );
        let unknown = h.authorize("browser", json!({}), &run).await;
        assert_eq!(unknown["reason"], "unknown_tool");
        let low = h
            .authorize("reader", json!({"path": "src/lib.rs"}), &run)
            .await;
        assert_eq!(low["verdict"], "allow");
        assert_eq!(low["intent_required"], false);
        let hard = h.authorize("reader", json!({"path": "a/.env"}), &run).await;
        assert_eq!(hard["reason"], "hardline_path");

        // Metrics carry the decisions.
        let (_, metrics) = h.get("/metrics").await;
        assert!(metrics.contains(r#"toolgate_decisions_total{enforced="true",profile="coding",reason="allow_rule",tool="bash",verdict="allow"} 1"#), "{metrics}");
        assert!(
            metrics.contains(r#"toolgate_decisions_total{enforced="true",profile="coding",reason="unknown_tool",tool="<other>",verdict="deny"} 1"#),
            "undeclared tools share one label"
        );
        assert!(metrics.contains("toolgate_bundle_info{policy_version=\"coding@"));
        // No sequence label: a re-sign keeps the series.
        let info = metrics
            .lines()
            .find(|l| l.starts_with("toolgate_bundle_info{"))
            .unwrap();
        assert!(!info.contains("sequence"), "{info}");
        // The expiry of the held bundle, per profile, in Unix seconds.
        let expiry: f64 = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(r#"toolgate_bundle_expiry_timestamp_seconds{profile="coding"} "#)
            })
            .unwrap_or_else(|| panic!("no expiry in {metrics}"))
            .parse()
            .unwrap();
        let now = jiff::Timestamp::now().as_second() as f64;
        assert!(expiry > now && expiry < now + 48.0 * 3600.0, "{expiry}");
        // Latency by risk: bash is high risk (durable write), reader low.
        assert!(
            metrics.contains(r#"toolgate_decision_duration_seconds_count{risk="high"} 3"#),
            "{metrics}"
        );
        assert!(
            metrics.contains(r#"toolgate_decision_duration_seconds_count{risk="low"} 2"#),
            "{metrics}"
        );
        // Alerted-on series exist before their first event.
        for series in [
            r#"toolgate_open_intents{resume_class="uncertain"} 0"#,
            r#"toolgate_workspace_refusals_total{code="workspace_escape"} 0"#,
            r#"toolgate_decisions_total{enforced="true",profile="coding",reason="audit_unavailable",tool="bash",verdict="deny"} 0"#,
            "toolgate_decision_log_dropped_total 0",
        ] {
            assert!(metrics.contains(series), "{series} missing");
        }
        assert!(metrics.contains("process_resident_memory_bytes "));
        assert!(metrics.contains(r#"toolgate_build_info{component="sidecar",version=""#));

        // Shutdown flushes the low-risk batch; every decision is in the chain.
        h.stop().await;
        let reports = h.store.decisions().verify(Some(&h.tenant)).await.unwrap();
        assert_eq!(reports.len(), 1);
        assert!(reports[0].ok, "{:?}", reports[0]);
        assert_eq!(reports[0].rows, 5, "all five decisions, denials included");
    });
}

/// Each sidecar start writes its own stream `{pod}/{uuidv7}`; a restart of
/// the same pod opens a new stream linked to the previous one's head, and
/// both verify.
#[tokio::test]
async fn each_start_writes_its_own_linked_stream() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = Harness::start(&dir, &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
        let run = unique("run");
        let first = h.sidecar.as_ref().unwrap().state.gate.stream().to_owned();
        assert!(first.starts_with("local/"), "{first}");
        h.authorize("bash", json!({"command": "ls"}), &run).await;
        h.authorize("reader", json!({"path": "a.rs"}), &run).await;
        h.stop().await;
        let old_head = h
            .store
            .decisions()
            .head(&h.tenant, &first)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(old_head.seq, 2);
        assert_eq!(old_head.previous, None);

        let mut again =
            Harness::start_as(&dir, &url, Some(&bundle(SPEC, 1, day(), &key())), &h.tenant).await;
        let second = again
            .sidecar
            .as_ref()
            .unwrap()
            .state
            .gate
            .stream()
            .to_owned();
        assert_ne!(second, first);
        again
            .authorize("bash", json!({"command": "ls"}), &run)
            .await;
        again.stop().await;
        let head = again
            .store
            .decisions()
            .head(&h.tenant, &second)
            .await
            .unwrap()
            .unwrap();
        let link = head.previous.expect("linked to the previous stream");
        assert_eq!(
            (link.stream, link.seq, link.hash),
            (first, 2, old_head.hash)
        );
        let reports = again
            .store
            .decisions()
            .verify(Some(&h.tenant))
            .await
            .unwrap();
        assert_eq!(reports.len(), 2);
        assert!(reports.iter().all(|r| r.ok), "{reports:?}");
        assert_eq!(reports.iter().map(|r| r.rows).sum::<u64>(), 3);
    }
}

#[tokio::test]
async fn no_bundle_and_expired_bundle_fail_closed() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = Harness::start(&dir, &url, None).await;
        let v = h.authorize("bash", json!({"command": "ls"}), "r").await;
        assert_eq!(
            (v["verdict"].as_str(), v["reason"].as_str()),
            (Some("deny"), Some("no_bundle"))
        );
        let (status, ready) = h.get_json("/readyz").await;
        assert_eq!(status, 503, "{ready}");
        assert_eq!(ready["last_rejected_bundle"]["code"], "bundle_unreadable");
        // Several polls of the same missing file count as one failure.
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (_, metrics) = h.get("/metrics").await;
        assert!(
            metrics
                .contains(r#"toolgate_bundle_reload_failures_total{code="bundle_unreadable"} 1"#),
            "{metrics}"
        );

        // A bundle that expires shortly: allowed now, denied after expiry.
        replace_file(
            &h.bundle_path,
            &bundle(SPEC, 1, SignedDuration::from_millis(1500), &key()),
        );
        h.wait_for_version(|v| v.is_some()).await;
        assert_eq!(h.get_json("/readyz").await.0, 200);
        assert_eq!(
            h.authorize("bash", json!({"command": "ls"}), "r").await["verdict"],
            "allow"
        );
        tokio::time::sleep(Duration::from_millis(1600)).await;
        let v = h.authorize("bash", json!({"command": "ls"}), "r").await;
        assert_eq!(
            (v["verdict"].as_str(), v["reason"].as_str()),
            (Some("deny"), Some("bundle_expired"))
        );
        assert_eq!(h.get_json("/readyz").await.1["bundle_expired"], true);
        h.stop().await;
    }
}

#[tokio::test]
async fn bad_bundles_never_replace_the_good_one() {
    each_backend!(|h| {
        h.wait_for_version(|v| v.is_some()).await;
        let good = h.policy().current().unwrap().policy_version.clone();

        // Tampered: one byte of the envelope changed.
        let signed = bundle(&SPEC.replace("rm *", "rn *"), 2, day(), &key());
        let mut envelope: Value = serde_json::from_slice(&signed).unwrap();
        let payload = envelope["payload"].as_str().unwrap().to_owned();
        let mut chars: Vec<char> = payload.chars().collect();
        chars[100] = if chars[100] == 'A' { 'B' } else { 'A' };
        envelope["payload"] = Value::String(chars.into_iter().collect());
        replace_file(&h.bundle_path, envelope.to_string().as_bytes());
        // Signed by a key nobody trusts.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let failure = h.policy().last_failure().expect("rejection recorded");
        assert_eq!(failure.code, "bundle_bad_signature", "{failure:?}");
        assert_eq!(h.policy().current().unwrap().policy_version, good);

        replace_file(
            &h.bundle_path,
            &bundle(
                SPEC,
                3,
                day(),
                &toolgate_bundle::SigningKey::from_seed(&[9; 32]),
            ),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            h.policy().last_failure().unwrap().code,
            "bundle_unknown_key"
        );

        // A newer good bundle swaps in; then an older one (rollback) is refused.
        let newer = SPEC.replace("\"git status\"", "\"git status\", \"pwd\"");
        replace_file(&h.bundle_path, &bundle(&newer, 5, day(), &key()));
        h.wait_for_version(|v| v.is_some_and(|v| v != good)).await;
        let v5 = h.policy().current().unwrap().policy_version.clone();
        replace_file(&h.bundle_path, &bundle(SPEC, 4, day(), &key()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(h.policy().last_failure().unwrap().code, "bundle_rollback");
        assert_eq!(h.policy().current().unwrap().policy_version, v5);
        assert_eq!(
            h.authorize("bash", json!({"command": "pwd"}), "r").await["verdict"],
            "allow"
        );

        let (status, ready) = h.get_json("/readyz").await;
        assert_eq!(status, 200, "the old bundle keeps serving: {ready}");
        assert_eq!(ready["last_rejected_bundle"]["code"], "bundle_rollback");
        let (_, metrics) = h.get("/metrics").await;
        assert!(
            metrics.contains(r#"toolgate_bundle_reload_failures_total{code="bundle_rollback"} 1"#),
            "{metrics}"
        );
        assert!(
            metrics
                .contains(r#"toolgate_bundle_reload_failures_total{code="bundle_unknown_key"} 1"#),
            "{metrics}"
        );
    });
}

#[tokio::test]
async fn hot_swap_under_load_never_mixes_policies() {
    each_backend!(|h| {
        h.wait_for_version(|v| v.is_some()).await;
        // Version A allows `ls`; version B denies it. Each answer must be
        // consistent with the version it names.
        let a = bundle(SPEC, 10, day(), &key());
        let b_spec = SPEC.replace("deny: [\"rm *\"]", "deny: [\"rm *\", \"ls*\"]");
        let b = bundle(&b_spec, 11, day(), &key());
        let b2 = bundle(
            &SPEC.replace("deny: [\"rm *\"]", "deny: [\"ls*\", \"rm *\"]"),
            12,
            day(),
            &key(),
        );
        replace_file(&h.bundle_path, &a);
        h.wait_for_version(|_| h.policy().current().unwrap().sequence == 10)
            .await;
        let a_version = h.policy().current().unwrap().policy_version.clone();

        let client = h.client.clone();
        let url = format!("{}/v1/authorize", h.base);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut workers = Vec::new();
        for _ in 0..8 {
            let (client, url, stop, a_version) =
                (client.clone(), url.clone(), stop.clone(), a_version.clone());
            workers.push(tokio::spawn(async move {
                let mut seen = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let v: Value = client
                        .post(&url)
                        .json(&json!({"tool": "bash", "arguments": {"command": "ls"}, "run_id": "swap"}))
                        .send().await.unwrap().json().await.unwrap();
                    let version = v["policy_version"].as_str().unwrap().to_owned();
                    let expected = if version == a_version { "allow" } else { "deny" };
                    assert_eq!(v["verdict"], expected, "{v}");
                    seen.insert(version);
                }
                seen
            }));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        replace_file(&h.bundle_path, &b);
        h.wait_for_version(|_| h.policy().current().unwrap().sequence == 11)
            .await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        replace_file(&h.bundle_path, &b2);
        h.wait_for_version(|_| h.policy().current().unwrap().sequence == 12)
            .await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut versions = std::collections::BTreeSet::new();
        for w in workers {
            versions.extend(w.await.unwrap());
        }
        assert_eq!(
            versions.len(),
            3,
            "requests saw all three versions: {versions:?}"
        );
    });
}

/// An approval over HTTP: the escalation names it, `GET
/// /v1/approvals/{id}` shows it pending, a long poll wakes when a human
/// approves elsewhere, the approved call is an `approved` allow naming it,
/// and an unknown id is a typed 404. (That it is bound to one call, used
/// once, and a denial denies: the gate's `approvals` tests.)
#[tokio::test]
async fn an_approval_is_asked_waited_on_and_used_over_http() {
    each_backend!(|h| {
        let run = unique("run");
        let args = json!({"target": "prod"});
        let first = h.authorize("deploy", args.clone(), &run).await;
        assert_eq!(
            (first["verdict"].as_str(), first["reason"].as_str()),
            (Some("escalate"), Some("escalate_rule"))
        );
        let approval_id = first["approval_id"].as_str().unwrap().to_owned();
        let (status, pending) = h.get_json(&format!("/v1/approvals/{approval_id}")).await;
        assert_eq!((status, pending["status"].as_str()), (200, Some("pending")));

        let waiter = {
            let (client, url) = (
                h.client.clone(),
                format!("{}/v1/approvals/{approval_id}?wait=10", h.base),
            );
            tokio::spawn(async move {
                client
                    .get(url)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        h.resolve(&approval_id, ApprovalDecision::Approved).await;
        let resolved = waiter.await.unwrap();
        assert_eq!(resolved["status"], "approved");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the wait woke on resolution"
        );

        let ok = h.authorize("deploy", args, &run).await;
        assert_eq!(
            (ok["verdict"].as_str(), ok["reason"].as_str()),
            (Some("allow"), Some("approved"))
        );
        assert_eq!(ok["matched_rule"], format!("approval:{approval_id}"));

        let (status, err) = h.get_json("/v1/approvals/nope").await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (404, Some("not_found"))
        );
    });
}

/// The intent refusals' HTTP codes: another call's digest is a 403
/// `intent_digest_mismatch`, a decision that did not allow a 403
/// `decision_not_allowed`, a second intent for a decision a 409. (Which
/// decisions take an intent: the gate's `intents` tests.)
#[tokio::test]
async fn intent_refusals_are_typed() {
    each_backend!(|h| {
        let run = unique("run");
        let allow = h
            .authorize("bash", json!({"command": "git status"}), &run)
            .await;
        let intent = |v: &Value, digest: &Value| {
            json!({"decision_id": v["decision_id"], "run_id": run, "step_id": "s1",
                   "tool": "bash", "args_digest": digest})
        };
        let other_digest =
            toolgate_policy::args_digest(json!({"command": "rm -rf /"}).as_object().unwrap());
        let (status, err) = h
            .post("/v1/intents", intent(&allow, &json!(other_digest)))
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (403, Some("intent_digest_mismatch")),
            "{err}"
        );
        let deny = h
            .authorize("bash", json!({"command": "rm -rf /"}), &run)
            .await;
        let (status, err) = h
            .post("/v1/intents", intent(&deny, &deny["args_digest"]))
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (403, Some("decision_not_allowed"))
        );
        let (status, begun) = h
            .post("/v1/intents", intent(&allow, &allow["args_digest"]))
            .await;
        assert_eq!((status, begun["status"].as_str()), (201, Some("pending")));
        let (status, err) = h
            .post("/v1/intents", intent(&allow, &allow["args_digest"]))
            .await;
        assert_eq!(status, 409, "{err}");
    });
}

/// An intent's life over HTTP: begun (201, with its probe), listed as
/// `safe_to_retry`, `effect-sent` makes it `uncertain`, `complete` ends it
/// (the same outcome again is a 200, another a 409 `conflict`); another
/// tenant's intent is a 404 and untouched; bad input is a typed error.
#[tokio::test]
async fn intents_are_begun_sent_and_completed_over_http() {
    each_backend!(|h| {
        let run = unique("run");
        let allow = h
            .authorize("bash", json!({"command": "git status"}), &run)
            .await;
        let decision_id = allow["decision_id"].as_str().unwrap();
        let digest = allow["args_digest"].as_str().unwrap();
        let (status, begun) = h.post("/v1/intents", json!({"decision_id": decision_id, "run_id": run, "step_id": "s1", "tool": "bash", "args_digest": digest, "verification_probe": {"kind": "git", "ref": "HEAD"}})).await;
        assert_eq!(status, 201, "{begun}");
        let intent_id = begun["intent_id"].as_str().unwrap().to_owned();
        let (_, listed) = h
            .get_json(&format!("/v1/intents?run_id={run}&status=pending"))
            .await;
        assert_eq!(listed["intents"][0]["id"], intent_id.as_str());
        assert_eq!(listed["intents"][0]["resume"], "safe_to_retry");

        let (status, sent) = h
            .post(&format!("/v1/intents/{intent_id}/effect-sent"), json!({}))
            .await;
        assert_eq!(status, 200, "{sent}");
        assert_eq!(
            sent["intent_id"],
            json!(intent_id),
            "named as POST /v1/intents names it"
        );
        let (_, listed) = h
            .get_json(&format!("/v1/intents?run_id={run}&status=pending"))
            .await;
        assert_eq!(listed["intents"][0]["resume"], "uncertain");

        let (status, done) = h
            .post(
                &format!("/v1/intents/{intent_id}/complete"),
                json!({"outcome": "completed", "detail": "ok"}),
            )
            .await;
        assert_eq!((status, done["status"].as_str()), (200, Some("completed")));
        assert_eq!(done["intent_id"], json!(intent_id));
        let (status, _) = h
            .post(
                &format!("/v1/intents/{intent_id}/complete"),
                json!({"outcome": "completed", "detail": "ok"}),
            )
            .await;
        assert_eq!(status, 200, "same outcome again is idempotent");
        let (status, err) = h
            .post(
                &format!("/v1/intents/{intent_id}/complete"),
                json!({"outcome": "error"}),
            )
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (409, Some("conflict"))
        );
        let (_, listed) = h
            .get_json(&format!("/v1/intents?run_id={run}&status=pending"))
            .await;
        assert_eq!(listed["intents"].as_array().unwrap().len(), 0);

        // Another tenant's intent is invisible here, whatever its id.
        let foreign = h
            .store
            .intents()
            .begin(
                toolgate_store::NewIntent {
                    tenant: unique("other"),
                    run_id: run.clone(),
                    step_id: "s1".into(),
                    tool: "bash".into(),
                    args_digest: digest.to_owned(),
                    call_digest: None,
                    decision_id: unique("d-foreign"),
                    risk: "high".into(),
                    verification_probe: None,
                },
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
        for (path, body) in [
            ("effect-sent", json!({})),
            ("complete", json!({"outcome": "completed"})),
        ] {
            let (status, err) = h
                .post(&format!("/v1/intents/{}/{path}", foreign.id), body)
                .await;
            assert_eq!(
                (status, err["error"]["code"].as_str()),
                (404, Some("not_found")),
                "{path}"
            );
        }
        let untouched = h
            .store
            .intents()
            .get(&foreign.tenant, &foreign.id)
            .await
            .unwrap();
        assert_eq!(
            (untouched.status, untouched.effect_sent_at),
            (toolgate_store::IntentStatus::Pending, None),
            "the foreign intent is untouched"
        );

        let (status, err) = h
            .post("/v1/intents/nope/complete", json!({"outcome": "completed"}))
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (404, Some("not_found"))
        );
        let (status, err) = h
            .post(
                &format!("/v1/intents/{intent_id}/complete"),
                json!({"outcome": "maybe"}),
            )
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (400, Some("invalid_request"))
        );
    });
}

#[tokio::test]
async fn malformed_requests_get_typed_errors() {
    each_backend!(|h| {
        let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
            (
                "/v1/authorize",
                br#"{"tool":"bash","arguments":{},"run_id":"r","colour":"red"}"#.to_vec(),
                400,
                "invalid_request",
            ),
            (
                "/v1/authorize",
                br#"{"tool":"bash","arguments":[],"run_id":"r"}"#.to_vec(),
                400,
                "invalid_request",
            ),
            (
                "/v1/authorize",
                br#"{"tool":"bash","arguments":{}"#.to_vec(),
                400,
                "invalid_request",
            ),
            (
                "/v1/authorize",
                br#"{"tool":"bash","arguments":{},"run_id":""}"#.to_vec(),
                400,
                "invalid_run_id",
            ),
            (
                "/v1/authorize",
                br#"{"tool":"bash","arguments":{},"run_id":"r","tenant":"someone-else"}"#.to_vec(),
                400,
                "invalid_request",
            ),
            (
                "/v1/authorize",
                vec![b' '; 300 * 1024],
                413,
                "body_too_large",
            ),
            // Routes that read a raw body (empty, `{}`, or the MCP
            // gateway's own) are held to the same limit and error body
            // (not axum's 2 MB and plain text).
            (
                "/v1/runs/r/cancel",
                vec![b' '; 300 * 1024],
                413,
                "body_too_large",
            ),
            (
                "/v1/pod/cancel",
                vec![b' '; 300 * 1024],
                413,
                "body_too_large",
            ),
            (
                "/v1/intents/i/effect-sent",
                vec![b' '; 300 * 1024],
                413,
                "body_too_large",
            ),
            (
                "/mcp/nowhere",
                vec![b' '; 300 * 1024],
                413,
                "body_too_large",
            ),
            (
                "/v1/workspace/read",
                br#"{"run_id":"r"}"#.to_vec(),
                400,
                "invalid_request",
            ),
            ("/v1/nothing", b"{}".to_vec(), 404, "no_route"),
        ];
        for (path, body, status, code) in cases {
            let (got, err) = h.post_raw(path, body).await;
            assert_eq!(
                (got, err["error"]["code"].as_str()),
                (status, Some(code)),
                "{path}: {err}"
            );
            assert!(
                err["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
        }
        let (status, text) = h.get("/v1/intents?status=pending").await;
        assert_eq!(status, 400, "{text}");
        assert_eq!(h.get("/healthz").await.0, 200);
    });
}
