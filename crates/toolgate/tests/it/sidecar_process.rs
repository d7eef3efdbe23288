//! The real `toolgate sidecar` process: killed with SIGKILL between an
//! intent and its completion, restarted, and asked what is still open.

use std::path::Path;

use crate::common::{free_port, spawn_sidecar, toolgate, wait_ready};
use serde_json::{Value, json};

async fn post(client: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = client.post(url).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn databases(dir: &Path) -> Vec<String> {
    let mut out = vec![format!(
        "sqlite://{}?mode=rwc",
        dir.join("kill.db").display()
    )];
    match std::env::var("TOOLGATE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => out.push(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI=true but TOOLGATE_TEST_DATABASE_URL is not set")
        }
        _ => eprintln!("SKIP postgres variant: TOOLGATE_TEST_DATABASE_URL is not set"),
    }
    out
}

#[tokio::test]
async fn kill_9_between_intent_and_completion_leaves_an_uncertain_pending_intent() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    assert!(
        toolgate(&["keygen", "--out", keys.to_str().unwrap()])
            .status
            .success()
    );
    // The example profile in a namespace of this run's own: the database
    // keeps the highest bundle sequence per (namespace, profile), so a
    // second run on the same PostgreSQL would otherwise be a rollback.
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/profiles/safe-coding.yaml"),
    )
    .unwrap();
    let namespace = format!(
        "kill-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_millisecond()
    );
    let profile = dir.path().join("profile.yaml");
    std::fs::write(
        &profile,
        example.replacen("namespace: agents", &format!("namespace: {namespace}"), 1),
    )
    .unwrap();
    let out = toolgate(&[
        "bundle",
        "build",
        "--profile",
        profile.to_str().unwrap(),
        "--key",
        keys.join("signing.key").to_str().unwrap(),
        "--sequence",
        "1",
        "--out",
        dir.path().join("bundle.json").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let client = reqwest::Client::new();
    for (i, database) in databases(dir.path()).iter().enumerate() {
        let tenant = format!("kill-{}-{i}", std::process::id());
        let run = format!("run-{}-{i}", std::process::id());
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let mut child = spawn_sidecar(dir.path(), database, port, &tenant);
        wait_ready(&client, &base, &mut child).await;

        let (_, v) = post(&client, format!("{base}/v1/authorize"), json!({"tool": "bash", "arguments": {"command": "git status"}, "run_id": run, "step_id": "s1"})).await;
        assert_eq!(v["intent_required"], true, "{v}");
        let (status, intent) = post(&client, format!("{base}/v1/intents"), json!({"decision_id": v["decision_id"], "run_id": run, "step_id": "s1", "tool": "bash", "args_digest": v["args_digest"]})).await;
        assert_eq!(status, 201, "{intent}");
        let id = intent["intent_id"].as_str().unwrap().to_owned();
        let (status, _) = post(
            &client,
            format!("{base}/v1/intents/{id}/effect-sent"),
            json!({}),
        )
        .await;
        assert_eq!(status, 200);

        // The effect is on its way; the process dies before completion.
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let mut child = spawn_sidecar(dir.path(), database, port, &tenant);
        wait_ready(&client, &base, &mut child).await;
        let listed: Value = client
            .get(format!("{base}/v1/intents?run_id={run}&status=pending"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let intents = listed["intents"].as_array().unwrap();
        assert_eq!(intents.len(), 1, "{listed}");
        assert_eq!(intents[0]["id"], id.as_str());
        assert_eq!(intents[0]["status"], "pending");
        assert_eq!(
            intents[0]["resume"], "uncertain",
            "sent and never completed: never replay silently"
        );
        // The resume flow closes it on the same row.
        let (status, done) = post(
            &client,
            format!("{base}/v1/intents/{id}/complete"),
            json!({"outcome": "not_completed", "detail": "verified by probe"}),
        )
        .await;
        assert_eq!(
            (status, done["status"].as_str()),
            (200, Some("not_completed"))
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

/// A newcomer's first start: a workspace base this user cannot create is
/// named, with the flag that fixes it; and `TOOLGATE_LOG_JSON=1` is a
/// boolean like `true` (it was refused as a bad value).
#[test]
fn an_uncreatable_workspace_base_names_itself_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    assert!(
        toolgate(&["keygen", "--out", keys.to_str().unwrap()])
            .status
            .success()
    );
    let profile =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/profiles/read-only.yaml");
    let bundle = dir.path().join("bundle.json");
    let built = toolgate(&[
        "bundle",
        "build",
        "--profile",
        profile.to_str().unwrap(),
        "--key",
        keys.join("signing.key").to_str().unwrap(),
        "--sequence",
        "1",
        "--out",
        bundle.to_str().unwrap(),
    ]);
    assert!(built.status.success(), "{built:?}");
    // Under a regular file: no user, root included, can create it.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let base = blocker.join("workspaces");
    for log_json in ["1", "yes", "true"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["sidecar", "--bundle", bundle.to_str().unwrap(), "--trust"])
            .arg(keys.join("signing.pub"))
            .args([
                "--database",
                &format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("db.sqlite").display()
                ),
            ])
            .args([
                "--listen",
                "127.0.0.1:0",
                "--ops-listen",
                "off",
                "--workspace-base",
            ])
            .arg(&base)
            .env("TOOLGATE_LOG_JSON", log_json)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Log lines are JSON: the variable's `1`/`yes` were taken as true.
        assert!(
            stderr.lines().next().is_some_and(|l| l.starts_with('{')),
            "{stderr}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let error: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("no error JSON ({e}) in {stdout} / {stderr}"));
        assert_eq!(error["error"]["code"], "workspace_unusable", "{stderr}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("cannot create {}", base.join("default").display())),
            "{message}"
        );
        assert!(message.contains("--workspace-base"), "{message}");
    }
}
