//! The sidecar attacked as a prompt-injected agent in the pod would attack
//! it: any request to loopback, anything written into its workspace. Each
//! test performs one attack and asserts the refusal.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_store::ApprovalDecision;

async fn call(h: &Harness, tool: &str, action: Option<&str>, args: Value, run: &str) -> Value {
    let (status, body) = h
        .post(
            "/v1/authorize",
            json!({"tool": tool, "action": action, "arguments": args, "run_id": run, "step_id": "s1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Sends raw HTTP/1.1 so that `Host` and `Content-Type` are exactly what a
/// browser or a rebinding page would send.
async fn raw(h: &Harness, head: &str, body: &str) -> (u16, String) {
    let addr = h.sidecar.as_ref().unwrap().addr;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

#[tokio::test]
async fn an_approval_for_one_action_does_not_pass_another() {
    each_backend!(|h| {
        let run = unique("run");
        let args = json!({"service": "api"});
        let first = call(&h, "deploy", Some("status"), args.clone(), &run).await;
        assert_eq!(first["verdict"], "escalate", "{first}");
        let approval = first["approval_id"].as_str().unwrap().to_owned();
        h.store
            .approvals()
            .resolve(
                &h.tenant,
                &approval,
                ApprovalDecision::Approved,
                "alice",
                None,
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();

        // Same tool and arguments, another action: not approved.
        let destroy = call(&h, "deploy", Some("destroy"), args.clone(), &run).await;
        assert_eq!(destroy["verdict"], "escalate", "{destroy}");
        assert_ne!(destroy["approval_id"], first["approval_id"]);
        assert_eq!(destroy["args_digest"], first["args_digest"]);
        assert_ne!(destroy["call_digest"], first["call_digest"]);
        // No action at all is another call too.
        let bare = call(&h, "deploy", None, args.clone(), &run).await;
        assert_eq!(bare["verdict"], "escalate", "{bare}");

        // The approved call itself passes, once.
        let status = call(&h, "deploy", Some("status"), args.clone(), &run).await;
        assert_eq!(
            (status["verdict"].as_str(), status["reason"].as_str()),
            (Some("allow"), Some("approved")),
            "{status}"
        );
        let stored = h
            .store
            .approvals()
            .get(&h.tenant, &approval, jiff::Timestamp::now())
            .await
            .unwrap();
        assert_eq!(stored.call_digest.as_deref(), first["call_digest"].as_str());
    });
}

/// The approver sees what they approve: the action and a bounded preview of
/// the matched text, with the credential the agent passed along masked.
#[tokio::test]
async fn an_escalation_stores_the_action_and_a_masked_preview() {
    each_backend!(|h| {
        let run = unique("run");
        let command = format!(
            "mysql -h db -u root password=hunter2 -e 'drop table users' {}",
            "x".repeat(2_000)
        );
        let v = call(&h, "bash", None, json!({"command": command}), &run).await;
        assert_eq!(v["verdict"], "escalate", "{v}");
        let id = v["approval_id"].as_str().unwrap();
        let row = h
            .store
            .approvals()
            .get(&h.tenant, id, jiff::Timestamp::now())
            .await
            .unwrap();
        let preview = row.preview.expect("a preview is stored");
        assert!(
            preview.starts_with("mysql -h db -u root password=**** -e 'drop table users'"),
            "{preview}"
        );
        assert!(!preview.contains("hunter2"));
        assert_eq!(preview.chars().count(), 512);

        let v = call(
            &h,
            "deploy",
            Some("destroy"),
            json!({"service": "api"}),
            &run,
        )
        .await;
        let id = v["approval_id"].as_str().unwrap();
        let row = h
            .store
            .approvals()
            .get(&h.tenant, id, jiff::Timestamp::now())
            .await
            .unwrap();
        assert_eq!(row.action.as_deref(), Some("destroy"));
        assert_eq!(row.preview.as_deref(), Some("destroy api"));
    });
}

/// A gateway reports the definition an MCP server announced; a pinned tool
/// is decided (and listed) only for the reviewed definition, so a server
/// that rewrites a tool after review (the "rug pull") is refused.
#[tokio::test]
async fn a_pinned_tool_is_refused_when_its_definition_changed() {
    const PINNED: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const CHANGED: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    each_backend!(|h| {
        let run = unique("run");
        let ask = |digest: Option<&str>| {
            json!({"tool": "fs.read", "arguments": {"path": "a"}, "run_id": run,
                   "definition_digest": digest})
        };
        let (_, v) = h.post("/v1/authorize", ask(Some(PINNED))).await;
        assert_eq!(
            (v["verdict"].as_str(), v["reason"].as_str()),
            (Some("allow"), Some("allow_rule")),
            "{v}"
        );
        for digest in [Some(CHANGED), None] {
            let (_, v) = h.post("/v1/authorize", ask(digest)).await;
            assert_eq!(
                (v["verdict"].as_str(), v["reason"].as_str()),
                (Some("deny"), Some("tool_definition_changed")),
                "{digest:?}: {v}"
            );
        }
        // Listing: declared and permissible, with the pinned definition only.
        let (status, v) = h
            .post(
                "/v1/tools/visible",
                json!({"tools": ["fs.read", "fs.wipe", "bash", "nope"],
                       "definitions": {"fs.read": PINNED}}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["tools"], json!(["fs.read", "bash"]));
        let (_, v) = h
            .post(
                "/v1/tools/visible",
                json!({"tools": ["fs.read"], "definitions": {"fs.read": CHANGED}}),
            )
            .await;
        assert_eq!(v["tools"], json!([]));
        // Strict body: unknown fields are refused.
        let (status, _) = h
            .post("/v1/tools/visible", json!({"tools": [], "extra": 1}))
            .await;
        assert_eq!(status, 400);
    });
}

#[tokio::test]
async fn an_intent_must_name_the_decisions_call() {
    each_backend!(|h| {
        let run = unique("run");
        let allow = h.authorize("bash", json!({"command": "ls"}), &run).await;
        let (status, err) = h
            .post(
                "/v1/intents",
                json!({"decision_id": allow["decision_id"], "run_id": run, "step_id": "s1",
                       "tool": "bash", "args_digest": allow["args_digest"],
                       "call_digest": "sha256:another-call"}),
            )
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (403, Some("intent_digest_mismatch"))
        );
        let (status, begun) = h
            .post(
                "/v1/intents",
                json!({"decision_id": allow["decision_id"], "run_id": run, "step_id": "s1",
                       "tool": "bash", "args_digest": allow["args_digest"],
                       "call_digest": allow["call_digest"]}),
            )
            .await;
        assert_eq!(status, 201, "{begun}");
        let id = begun["intent_id"].as_str().unwrap();
        let stored = h.store.intents().get(&h.tenant, id).await.unwrap();
        assert_eq!(stored.call_digest.as_deref(), allow["call_digest"].as_str());
        // The resume listing names it `intent_id`, as POST answered.
        let (_, listed) = h
            .get_json(&format!("/v1/intents?run_id={run}&status=pending"))
            .await;
        assert_eq!(listed["intents"][0]["intent_id"], id, "{listed}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_intents_for_one_decision_create_exactly_one() {
    each_backend!(|h| {
        for _ in 0..3 {
            let run = unique("run");
            let allow = h.authorize("bash", json!({"command": "ls"}), &run).await;
            let body = json!({"decision_id": allow["decision_id"], "run_id": run, "step_id": "s1",
                              "tool": "bash", "args_digest": allow["args_digest"]});
            let url = format!("{}/v1/intents", h.base);
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (client, url, body) = (h.client.clone(), url.clone(), body.clone());
                    tokio::spawn(async move {
                        let r = client.post(url).json(&body).send().await.unwrap();
                        let status = r.status().as_u16();
                        (status, r.json::<Value>().await.unwrap_or(Value::Null))
                    })
                })
                .collect();
            let mut results = Vec::new();
            for t in tasks {
                results.push(t.await.unwrap());
            }
            let created = results.iter().filter(|(s, _)| *s == 201).count();
            let refused = results
                .iter()
                .filter(|(s, b)| *s == 409 && b["error"]["code"] == "intent_exists")
                .count();
            assert_eq!((created, refused), (1, 7), "{results:?}");
            let open = h.store.intents().pending(&h.tenant, &run).await.unwrap();
            assert_eq!(open.len(), 1);
        }
    });
}

#[tokio::test]
async fn workspace_calls_are_decided_like_authorize_and_recorded() {
    each_backend!(|h| {
        let run = unique("run");
        // The same call through /v1/authorize is a hardline denial...
        let v = call(
            &h,
            "workspace.write",
            None,
            json!({"path": ".env", "content": "K=v"}),
            &run,
        )
        .await;
        assert_eq!(v["reason"], "hardline_path");
        // ...and so it is through the workspace API: nothing is written.
        for path in [".env", "app/.env"] {
            let (status, err) = h
                .post(
                    "/v1/workspace/write",
                    json!({"run_id": run, "path": path, "content": "K=v"}),
                )
                .await;
            assert_eq!(
                (
                    status,
                    err["error"]["code"].as_str(),
                    err["verdict"]["reason"].as_str()
                ),
                (403, Some("policy_denied"), Some("hardline_path")),
                "{err}"
            );
            assert!(err["verdict"]["decision_id"].is_string());
        }
        let root = h.dir.join("workspaces").join(&h.tenant).join(&run);
        assert!(!root.join(".env").exists() && !root.join("app/.env").exists());
        let (status, err) = h
            .post(
                "/v1/workspace/write",
                json!({"run_id": run, "path": "locked/a", "content": "x"}),
            )
            .await;
        assert_eq!(
            (status, err["verdict"]["reason"].as_str()),
            (403, Some("deny_rule"))
        );
        let (status, err) = h
            .post(
                "/v1/workspace/read",
                json!({"run_id": run, "path": "x/.env"}),
            )
            .await;
        assert_eq!(
            (status, err["verdict"]["reason"].as_str()),
            (403, Some("hardline_path"))
        );
        let (status, ok) = h
            .post(
                "/v1/workspace/write",
                json!({"run_id": run, "path": "notes.md", "content": "x", "step_id": "w1"}),
            )
            .await;
        assert_eq!(status, 200, "{ok}");
        let decision = ok["decision_id"].as_str().unwrap().to_owned();

        h.stop().await;
        let log = h.tenant_log().await;
        let tools: Vec<(&str, &str)> = log
            .iter()
            .map(|d| (d.record.tool.as_str(), d.record.reason.as_str()))
            .collect();
        assert_eq!(
            tools
                .iter()
                .filter(|t| **t == ("workspace.write", "hardline_path"))
                .count(),
            3,
            "{tools:?}"
        );
        assert!(tools.contains(&("workspace.write", "deny_rule")));
        assert!(tools.contains(&("workspace.read", "hardline_path")));
        assert!(log.iter().any(|d| d.record.decision_id == decision
            && d.record.verdict == "allow"
            && d.record.step_id == "w1"));
    });
}

#[tokio::test]
async fn a_profile_without_workspace_tools_denies_the_workspace_api() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let spec = "mode: allowAll\neffects: {bash: {sideEffect: PROCESS_EXEC, risk: high}}\n";
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(spec, 1, day(), &key()))).await;
    for op in ["read", "write", "list", "stat"] {
        let (status, err) = h
            .post(
                &format!("/v1/workspace/{op}"),
                json!({"run_id": "r1", "path": "a", "content": "x"}),
            )
            .await;
        let (status, err) = if op == "write" {
            (status, err)
        } else {
            h.post(
                &format!("/v1/workspace/{op}"),
                json!({"run_id": "r1", "path": "a"}),
            )
            .await
        };
        assert_eq!(
            (status, err["verdict"]["reason"].as_str()),
            (403, Some("unknown_tool")),
            "{op}: {err}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn bad_fields_are_refused_before_any_decision_and_lose_no_records() {
    each_backend!(|h| {
        let run = unique("run");
        for i in 0..19 {
            let v = h
                .authorize("reader", json!({"path": format!("f{i}")}), &run)
                .await;
            assert_eq!(v["verdict"], "allow");
            if i == 9 {
                let attacks = [
                    json!({"tool": "reader", "arguments": {}, "run_id": run, "step_id": "s".repeat(2000)}),
                    json!({"tool": "reader", "arguments": {}, "run_id": "run\u{1}\n"}),
                    json!({"tool": "x".repeat(1100), "arguments": {}, "run_id": run}),
                    json!({"tool": "reader", "action": "a".repeat(300), "arguments": {}, "run_id": run}),
                    json!({"tool": "bash", "arguments": {"command": "ls"}, "run_id": run, "step_id": "s\u{0}"}),
                ];
                for attack in attacks {
                    let (status, err) = h.post("/v1/authorize", attack.clone()).await;
                    let code = if attack["run_id"] == run {
                        "invalid_request"
                    } else {
                        "invalid_run_id"
                    };
                    assert_eq!(
                        (status, err["error"]["code"].as_str()),
                        (400, Some(code)),
                        "{attack}: {err}"
                    );
                }
            }
        }
        let (_, metrics) = h.get("/metrics").await;
        assert!(!metrics.contains("xxxxxxxxxx"), "agent text became a label");
        assert!(!metrics.contains("audit_unavailable\",tool=\"reader\",verdict=\"deny\"} 1"));
        h.stop().await;
        let log = h.tenant_log().await;
        assert_eq!(log.len(), 19, "every good record is kept");
        let report = h.store.decisions().verify(Some(&h.tenant)).await.unwrap();
        assert!(report[0].ok);
    });
}

#[tokio::test]
async fn removing_the_sqlite_database_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("toolgate.db");
    let url = format!("sqlite://{}?mode=rwc", db.display());
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
    let run = unique("run");
    assert_eq!(
        h.authorize("bash", json!({"command": "ls"}), &run).await["verdict"],
        "allow"
    );
    let (status, _) = h.get("/readyz").await;
    assert_eq!(status, 200);

    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let v = h.authorize("bash", json!({"command": "ls"}), &run).await;
    assert_eq!(
        (v["verdict"].as_str(), v["reason"].as_str()),
        (Some("deny"), Some("audit_unavailable")),
        "{v}"
    );
    let (status, body) = h.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    // A replaced file (same path, another inode) is no better.
    std::fs::write(&db, b"").unwrap();
    let v = h.authorize("bash", json!({"command": "ls"}), &run).await;
    assert_eq!(v["reason"], "audit_unavailable");
    h.stop().await;
}

#[tokio::test]
async fn anti_rollback_survives_a_restart() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = Harness::start(&dir, &url, Some(&bundle(SPEC, 6, day(), &key()))).await;
        let run = unique("run");
        assert_eq!(
            h.authorize("bash", json!({"command": "ls"}), &run).await["verdict"],
            "allow"
        );
        h.stop().await;

        // Restarted with a replayed older bundle (an allow-all one, say).
        let old = bundle(
            "mode: allowAll\neffects: {bash: {sideEffect: PROCESS_EXEC, risk: high}}\n",
            3,
            day(),
            &key(),
        );
        let mut h = Harness::start(&dir, &url, Some(&old)).await;
        let v = h
            .authorize("bash", json!({"command": "rm -rf /"}), &run)
            .await;
        assert_eq!(v["reason"], "no_bundle", "{name}: {v}");
        let (status, ready) = h.get_json("/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(
            ready["last_rejected_bundle"]["code"], "bundle_rollback",
            "{ready}"
        );
        // The same sequence with other content is refused as well.
        replace_file(
            &h.bundle_path,
            &bundle(
                "mode: allowAll\neffects: {bash: {sideEffect: PROCESS_EXEC, risk: high}}\n",
                6,
                day(),
                &key(),
            ),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let v = h
            .authorize("bash", json!({"command": "rm -rf /"}), &run)
            .await;
        assert_eq!(v["reason"], "no_bundle", "{name}: {v}");
        // A newer bundle is accepted.
        replace_file(&h.bundle_path, &bundle(SPEC, 7, day(), &key()));
        h.wait_for_version(|v| v.is_some()).await;
        assert_eq!(
            h.authorize("bash", json!({"command": "rm -rf /"}), &run)
                .await["reason"],
            "deny_rule"
        );
        h.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_long_polls_do_not_starve_the_high_risk_path() {
    let scratch = tempfile::tempdir().unwrap();
    for (name, url) in backends(scratch.path()) {
        let dir = scratch.path().join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        let h = Harness::start(&dir, &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
        let run = unique("run");
        let esc = call(&h, "deploy", None, json!({"service": "api"}), &run).await;
        let id = esc["approval_id"].as_str().unwrap().to_owned();
        let h = Arc::new(h);
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let h = h.clone();
                let id = id.clone();
                tokio::spawn(
                    async move { h.get_json(&format!("/v1/approvals/{id}?wait=20")).await },
                )
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        // With every waiter parked, a high-risk call still gets its durable
        // record (more waiters than pooled connections on PostgreSQL).
        for _ in 0..5 {
            let v = call(&h, "bash", None, json!({"command": "ls"}), &run).await;
            assert_eq!(v["verdict"], "allow", "{name}: {v}");
        }
        h.store
            .approvals()
            .resolve(
                &h.tenant,
                &id,
                ApprovalDecision::Approved,
                "alice",
                None,
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
        for w in waiters {
            let (status, body) = w.await.unwrap();
            assert_eq!(
                (status, body["status"].as_str()),
                (200, Some("approved")),
                "{body}"
            );
        }
        let mut h = Arc::try_unwrap(h).ok().unwrap();
        h.stop().await;
    }
}

#[tokio::test]
async fn the_agent_api_refuses_browsers_and_rebinding() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
    let write = r#"{"run_id":"r1","path":"pwned.txt","content":"x"}"#;
    let (status, resp) = raw(
        &h,
        "POST /v1/workspace/write HTTP/1.1\r\nHost: attacker.example\r\nContent-Type: text/plain",
        write,
    )
    .await;
    assert_eq!(status, 421, "{resp}");
    assert!(resp.contains("host_not_allowed"));
    let (status, resp) = raw(
        &h,
        "POST /v1/workspace/write HTTP/1.1\r\nHost: attacker.example\r\nContent-Type: application/json",
        write,
    )
    .await;
    assert_eq!(status, 421, "{resp}");
    let (status, resp) = raw(
        &h,
        "POST /v1/workspace/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain",
        write,
    )
    .await;
    assert_eq!(status, 415, "{resp}");
    assert!(resp.contains("unsupported_media_type"));
    let (status, resp) = raw(
        &h,
        "POST /v1/workspace/write HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://attacker.example\r\nContent-Type: application/json",
        write,
    )
    .await;
    assert_eq!(status, 403, "{resp}");
    assert!(resp.contains("origin_not_allowed"));
    let root = h.dir.join("workspaces").join(&h.tenant).join("r1");
    assert!(!root.join("pwned.txt").exists(), "nothing was written");
    // The real client still works.
    let (status, resp) = raw(
        &h,
        "POST /v1/workspace/write HTTP/1.1\r\nHost: 127.0.0.1:15031\r\nContent-Type: application/json",
        write,
    )
    .await;
    assert_eq!(status, 200, "{resp}");
    h.stop().await;
}

#[tokio::test]
async fn metric_labels_never_carry_agent_text() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    // No bundle at all: every call is denied no_bundle.
    let mut h = Harness::start(dir.path(), &url, None).await;
    for i in 0..100 {
        let (status, _) = h
            .post(
                "/v1/authorize",
                json!({"tool": format!("tool-{i}-{}", "y".repeat(200)), "arguments": {}, "run_id": "r"}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let (_, metrics) = h.get("/metrics").await;
    assert!(!metrics.contains("yyyy"), "agent text became a label");
    assert!(metrics.contains(
        r#"toolgate_decisions_total{enforced="true",profile="<none>",reason="no_bundle",tool="<other>",verdict="deny"} 100"#
    ), "{metrics}");
    assert!(
        metrics.len() < 64 * 1024,
        "metrics grew to {} bytes",
        metrics.len()
    );
    h.stop().await;
}

#[tokio::test]
async fn counters_exist_at_zero_before_their_first_event() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(SPEC, 1, day(), &key()))).await;
    let (_, metrics) = h.get("/metrics").await;
    for series in [
        r#"toolgate_bundle_reload_failures_total{code="bundle_bad_signature"} 0"#,
        r#"toolgate_bundle_reload_failures_total{code="bundle_rollback"} 0"#,
        r#"toolgate_bundle_reload_failures_total{code="bundle_unreadable"} 0"#,
        r#"toolgate_decisions_total{enforced="true",profile="coding",reason="hardline_path",tool="reader",verdict="deny"} 0"#,
        r#"toolgate_decisions_total{enforced="true",profile="coding",reason="approved",tool="deploy",verdict="allow"} 0"#,
        r#"toolgate_decisions_total{enforced="true",profile="coding",reason="audit_unavailable",tool="bash",verdict="deny"} 0"#,
        r#"toolgate_decisions_total{enforced="true",profile="coding",reason="unknown_tool",tool="<other>",verdict="deny"} 0"#,
    ] {
        assert!(metrics.contains(series), "missing {series}");
    }
    // A bundle signed by an untrusted key moves its counter from 0 to 1.
    let stranger = toolgate_bundle::SigningKey::from_seed(&[7; 32]);
    replace_file(&h.bundle_path, &bundle(SPEC, 2, day(), &stranger));
    let mut seen = false;
    for _ in 0..100 {
        let (_, metrics) = h.get("/metrics").await;
        if metrics
            .contains(r#"toolgate_bundle_reload_failures_total{code="bundle_bad_signature"} 1"#)
            || metrics
                .contains(r#"toolgate_bundle_reload_failures_total{code="bundle_unknown_key"} 1"#)
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(seen, "the refused bundle was not counted");
    h.stop().await;
}
