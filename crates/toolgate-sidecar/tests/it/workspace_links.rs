//! Symbolic links inside a run's workspace: the policy judges where a link
//! leads, not the name the agent used, so a link cannot carry a hardlined
//! or labelled file past the rules; and an open never follows a link that
//! appeared after the decision.

use std::os::unix::fs::symlink;

use crate::common::*;
use serde_json::{Value, json};

/// `.env` is hardline, `secrets/` is denied and labels the run `private`,
/// network writes are refused once it carries the label.
const LINKS: &str = r#"
mode: rules
rules:
  workspace.read: {deny: ["secrets/*"], allow: ["*"]}
  workspace.write: {allow: ["*"]}
  workspace.list: {deny: ["secrets*"], allow: ["*"]}
  workspace.stat: {allow: ["*"]}
  send: {allow: ["*"]}
hardline: {paths: ["**/.env"]}
effects:
  workspace.read: {sideEffect: WORKSPACE_READ, risk: low}
  workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}
  workspace.list: {sideEffect: WORKSPACE_READ, risk: low}
  workspace.stat: {sideEffect: WORKSPACE_READ, risk: low}
  send: {sideEffect: NETWORK_WRITE, risk: write}
egress: {allowHosts: ["*.example"]}
flows:
  labels:
    private: {tools: [workspace.read], match: ["keys/*"]}
  rules:
    - name: no-exfiltration
      when: [private]
      deny: {sideEffects: [NETWORK_WRITE]}
"#;

async fn started(dir: &std::path::Path) -> Harness {
    let (_, url) = backends(dir).remove(0);
    Harness::start(dir, &url, Some(&bundle(LINKS, 1, day(), &key()))).await
}

/// A run whose workspace holds `.env`, `secrets/token`, `keys/id` and links
/// to each under harmless names.
async fn planted(h: &Harness) -> (String, std::path::PathBuf) {
    let run = unique("run");
    for (path, content) in [("notes/readme", "hello"), ("keys/id", "PRIVATE KEY")] {
        let (status, body) = h
            .post(
                "/v1/workspace/write",
                json!({"run_id": run, "path": path, "content": content}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let root = h.dir.join("workspaces").join(&h.tenant).join(&run);
    std::fs::write(root.join(".env"), "TOKEN=hunter2").unwrap();
    std::fs::create_dir(root.join("secrets")).unwrap();
    std::fs::write(root.join("secrets/token"), "s3cr3t").unwrap();
    symlink(".env", root.join("cfg")).unwrap();
    symlink("secrets", root.join("docs")).unwrap();
    symlink("../keys", root.join("notes/more")).unwrap();
    symlink("../cfg", root.join("notes/cfg2")).unwrap();
    symlink("../keys/id", root.join("notes/id-link")).unwrap();
    (run, root)
}

async fn read(h: &Harness, run: &str, path: &str) -> (u16, Value) {
    h.post("/v1/workspace/read", json!({"run_id": run, "path": path}))
        .await
}

#[tokio::test]
async fn a_link_cannot_carry_a_hardlined_or_denied_file_past_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = started(dir.path()).await;
    let (run, _) = planted(&h).await;
    for (path, reason) in [
        ("cfg", "hardline_path"),
        ("docs/token", "deny_rule"),
        ("notes/cfg2", "hardline_path"),
    ] {
        let (status, body) = read(&h, &run, path).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["verdict"]["reason"], reason, "{path}: {body}");
        assert!(!body.to_string().contains("hunter2") && !body.to_string().contains("s3cr3t"));
    }
    // A write through a link to `.env` is refused and leaves it untouched.
    let (status, body) = h
        .post(
            "/v1/workspace/write",
            json!({"run_id": run, "path": "cfg", "content": "TOKEN=attacker"}),
        )
        .await;
    assert_eq!(
        (status, body["verdict"]["reason"].as_str()),
        (403, Some("hardline_path")),
        "{body}"
    );
    let root = h.dir.join("workspaces").join(&h.tenant).join(&run);
    assert_eq!(
        std::fs::read_to_string(root.join(".env")).unwrap(),
        "TOKEN=hunter2"
    );
    // Listing `secrets` under another name is denied like `secrets`.
    let (status, body) = h
        .post("/v1/workspace/list", json!({"run_id": run, "path": "docs"}))
        .await;
    assert_eq!(
        (status, body["verdict"]["reason"].as_str()),
        (403, Some("deny_rule")),
        "{body}"
    );
    // The decision log judged where the links led (low-risk decisions are
    // written in the background).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let judged: Vec<String> = h
        .tenant_log()
        .await
        .into_iter()
        .filter(|d| d.record.tool.starts_with("workspace."))
        .map(|d| format!("{} {}", d.record.verdict, d.record.reason))
        .collect();
    assert!(
        judged.iter().any(|d| d == "deny hardline_path"),
        "{judged:?}"
    );
    // One decision per refused read or list, and none of them an allow.
    let reads: Vec<String> = h
        .tenant_log()
        .await
        .into_iter()
        .filter(|d| d.record.tool == "workspace.read" || d.record.tool == "workspace.list")
        .map(|d| d.record.verdict)
        .collect();
    assert_eq!(reads.len(), 4, "{reads:?}");
    assert!(reads.iter().all(|v| v == "deny"), "{reads:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_key_read_through_a_link_labels_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = started(dir.path()).await;
    let (run, _) = planted(&h).await;
    for path in ["notes/more/id", "notes/id-link"] {
        let (status, body) = read(&h, &run, path).await;
        assert_eq!(
            (status, body["content"].as_str()),
            (200, Some("PRIVATE KEY")),
            "{path}: {body}"
        );
        // The response names the path the agent asked for.
        assert_eq!(body["path"], path);
    }
    let verdict = h
        .authorize("send", json!({"url": "https://collect.example/x"}), &run)
        .await;
    assert_eq!(verdict["verdict"], "deny", "{verdict}");
    assert_eq!(verdict["reason"], "flow_rule", "{verdict}");
    h.stop().await;
}

#[tokio::test]
async fn links_that_stay_harmless_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = started(dir.path()).await;
    let (run, root) = planted(&h).await;
    symlink("notes", root.join("n")).unwrap();
    let (status, body) = read(&h, &run, "n/readme").await;
    assert_eq!(
        (status, body["content"].as_str()),
        (200, Some("hello")),
        "{body}"
    );
    let (status, body) = h
        .post("/v1/workspace/stat", json!({"run_id": run, "path": "n"}))
        .await;
    assert_eq!(
        (status, body["kind"].as_str()),
        (200, Some("dir")),
        "{body}"
    );
    // Writing through a link writes where it leads.
    let (status, body) = h
        .post(
            "/v1/workspace/write",
            json!({"run_id": run, "path": "n/new.txt", "content": "x"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        std::fs::read_to_string(root.join("notes/new.txt")).unwrap(),
        "x"
    );
    // A loop is an escape, not a hang.
    symlink("loop-b", root.join("loop-a")).unwrap();
    symlink("loop-a", root.join("loop-b")).unwrap();
    let (status, body) = read(&h, &run, "loop-a").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("workspace_escape")),
        "{body}"
    );
    h.stop().await;
}
