//! Workspace isolation over HTTP: relative paths only, no escape through
//! symlinks, provenance labels, and host paths never leaked.

use std::time::Duration;

use crate::common::*;
use serde_json::json;

async fn harness(dir: &std::path::Path) -> Harness {
    let (_, url) = backends(dir).remove(0); // the workspace does not touch the database
    Harness::start(dir, &url, Some(&bundle(SPEC, 1, day(), &key()))).await
}

fn run_root(h: &Harness, run: &str) -> std::path::PathBuf {
    h.dir.join("workspaces").join(&h.tenant).join(run)
}

#[tokio::test]
async fn write_read_list_stat_with_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path()).await;
    let run = unique("run");
    let (status, w) = h
        .post(
            "/v1/workspace/write",
            json!({"run_id": run, "path": "src/main.rs", "content": "fn main() {}"}),
        )
        .await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(w["provenance"], "INTERNAL_TOOL");
    assert!(
        run_root(&h, &run).join("src/main.rs").is_file(),
        "written under <base>/<tenant>/<run>"
    );

    let (_, r) = h.workspace("read", &run, "src/main.rs").await;
    assert_eq!(
        (r["content"].as_str(), r["provenance"].as_str()),
        (Some("fn main() {}"), Some("INTERNAL_TOOL"))
    );

    // Something else put a file there: untrusted.
    std::fs::write(run_root(&h, &run).join("notes.txt"), "hello").unwrap();
    let (_, r) = h.workspace("read", &run, "notes.txt").await;
    assert_eq!(r["provenance"], "EXTERNAL_UNTRUSTED");
    // A file we wrote and someone then changed is untrusted too.
    std::fs::write(
        run_root(&h, &run).join("src/main.rs"),
        "fn main() { evil() }",
    )
    .unwrap();
    let (_, r) = h.workspace("read", &run, "src/main.rs").await;
    assert_eq!(r["provenance"], "EXTERNAL_UNTRUSTED");

    let (status, l) = h.workspace("list", &run, "").await;
    assert_eq!(status, 200, "{l}");
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notes.txt", "src"]);
    assert_eq!(l["entries"][1]["kind"], "dir");

    let (_, s) = h.workspace("stat", &run, "notes.txt").await;
    assert_eq!(
        (s["kind"].as_str(), s["size"].as_u64()),
        (Some("file"), Some(5))
    );

    // Runs are isolated from each other.
    let other = unique("run");
    let (status, e) = h.workspace("read", &other, "notes.txt").await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (404, Some("workspace_not_found"))
    );
    h.stop().await;
}

#[tokio::test]
async fn escapes_are_refused_without_leaking_host_paths() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path()).await;
    let run = unique("run");
    h.post(
        "/v1/workspace/write",
        json!({"run_id": run, "path": "inside.txt", "content": "ok"}),
    )
    .await;
    let root = run_root(&h, &run);
    let outside = dir.path().join("outside-secret.txt");
    std::fs::write(&outside, "secret").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../../../outside-secret.txt", root.join("rel-link")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    std::os::unix::fs::symlink("inside.txt", root.join("good-link")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();

    let host = dir.path().to_str().unwrap().to_owned();
    let cases = [
        ("read", "/etc/passwd", "workspace_invalid_path"),
        // Paths that climb out or hold NUL are denied by the policy
        // (path_escapes, path_invalid) before any file is touched.
        ("read", "../outside-secret.txt", "policy_denied"),
        ("read", "sub/../../x", "policy_denied"),
        ("read", "a//b", "workspace_invalid_path"),
        ("read", "a\u{0}b", "policy_denied"),
        ("read", "", "workspace_invalid_path"),
        ("read", "abs-link", "workspace_escape"),
        ("read", "rel-link", "workspace_escape"),
        ("read", "etc/passwd", "workspace_escape"),
        ("read", "sub/up/sub/up/../x", "workspace_invalid_path"),
        ("list", "etc", "workspace_escape"),
        ("stat", "abs-link", "workspace_escape"),
        ("write", "etc/evil", "workspace_escape"),
        ("write", "abs-link", "workspace_escape"),
    ];
    let refusals = |metrics: &str, code: &str| -> u64 {
        let prefix = format!(r#"toolgate_workspace_refusals_total{{code="{code}"}} "#);
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("{prefix} missing"))
            .parse()
            .unwrap()
    };
    let (_, before) = h.get("/metrics").await;
    for (op, path, code) in cases {
        let mut body = json!({"run_id": run, "path": path});
        if op == "write" {
            body["content"] = json!("x");
        }
        let (status, err) = h.post(&format!("/v1/workspace/{op}"), body).await;
        assert_eq!(err["error"]["code"], code, "{op} {path:?}: {status} {err}");
        assert!(status >= 400);
        assert!(!err.to_string().contains(&host), "host path leaked: {err}");
    }
    // Each refusal is counted by its code.
    let (_, after) = h.get("/metrics").await;
    for code in ["workspace_escape", "workspace_invalid_path"] {
        let want = cases.iter().filter(|c| c.2 == code).count() as u64;
        assert_eq!(
            refusals(&after, code) - refusals(&before, code),
            want,
            "{code}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "secret",
        "nothing written outside"
    );
    assert!(!std::path::Path::new("/etc/evil").exists());

    // Links that stay inside work.
    let (status, r) = h.workspace("read", &run, "good-link").await;
    assert_eq!((status, r["content"].as_str()), (200, Some("ok")), "{r}");
    let (status, r) = h.workspace("read", &run, "sub/up/inside.txt").await;
    assert_eq!((status, r["content"].as_str()), (200, Some("ok")), "{r}");

    // Bad run ids cannot name other directories: refused as run ids (the
    // one rule; every valid run id is one safe directory name).
    for (bad, code) in [
        ("..", "invalid_run_id"),
        ("a/b", "invalid_run_id"),
        ("", "invalid_run_id"),
        (".hidden", "invalid_run_id"),
    ] {
        let (status, err) = h.workspace("list", bad, "").await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (400, Some(code)),
            "{bad:?}"
        );
    }
    h.stop().await;
}

/// Runs `f` on a thread and fails the test (instead of hanging it) if it
/// does not return within 10 seconds.
async fn within_10s<T: Send + 'static>(
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    tokio::time::timeout(Duration::from_secs(10), tokio::spawn(f))
        .await
        .expect("the request hung")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_devices_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path()).await;
    let run = unique("run");
    h.post(
        "/v1/workspace/write",
        json!({"run_id": run, "path": "a.txt", "content": "a"}),
    )
    .await;
    let root = run_root(&h, &run);
    let fifo = root.join("pipe");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (client, base) = (h.client.clone(), h.base.clone());
    let run2 = run.clone();
    let results = within_10s(async move {
        let mut out = Vec::new();
        for (op, path) in [
            ("read", "pipe"),
            ("write", "pipe"),
            ("read", "pipe"),
            ("stat", "pipe"),
        ] {
            let mut body = json!({"run_id": run2, "path": path});
            if op == "write" {
                body["content"] = json!("x");
            }
            let r = client
                .post(format!("{base}/v1/workspace/{op}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            out.push((op, status, r.json::<serde_json::Value>().await.unwrap()));
        }
        out
    })
    .await;
    for (op, status, body) in &results[..3] {
        assert_eq!(
            (*status, body["error"]["code"].as_str()),
            (400, Some("workspace_not_regular_file")),
            "{op}: {body}"
        );
    }
    assert_eq!(results[3].2["kind"], "other", "{:?}", results[3]);
    assert_eq!(results[3].2["provenance"], "EXTERNAL_UNTRUSTED");

    // A FIFO someone keeps feeding (from /dev/zero, say) is refused too,
    // and memory is never spent on it.
    // The feeder never blocks: a blocking open of the write end waits for a
    // reader that may already have come and gone (under load it hung the
    // test), and a full pipe nobody reads would block its writes.
    let feeder_path = fifo.clone();
    let feeder = std::thread::spawn(move || {
        use std::io::{ErrorKind, Write};
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let mut w = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags_nonblock()
                .open(&feeder_path)
            {
                Ok(w) => break w,
                // ENXIO until a reader has the FIFO open.
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(_) => return,
            }
        };
        let chunk = vec![0u8; 64 * 1024];
        let mut sent = 0;
        while sent < 64 && std::time::Instant::now() < deadline {
            match w.write(&chunk) {
                Ok(_) => sent += 1,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(_) => break, // EPIPE: the reader is gone
            }
        }
    });
    let (client, base, run2) = (h.client.clone(), h.base.clone(), run.clone());
    let (status, body) = within_10s(async move {
        let r = client
            .post(format!("{base}/v1/workspace/read"))
            .json(&json!({"run_id": run2, "path": "pipe"}))
            .send()
            .await
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<serde_json::Value>().await.unwrap(),
        )
    })
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("workspace_not_regular_file"))
    );
    // Bounded by the feeder's own deadline.
    let _ = tokio::task::spawn_blocking(move || feeder.join()).await;
    // The sidecar is still responsive.
    let (status, _) = h.get("/readyz").await;
    assert_eq!(status, 200);
    h.stop().await;
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(0o4000) // O_NONBLOCK on Linux
    }
}

#[tokio::test]
async fn hard_links_out_of_the_workspace_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path()).await;
    let run = unique("run");
    h.post(
        "/v1/workspace/write",
        json!({"run_id": run, "path": "a.txt", "content": "a"}),
    )
    .await;
    let root = run_root(&h, &run);
    let outside = dir.path().join("host-secret.txt");
    std::fs::write(&outside, "secret").unwrap();
    std::fs::hard_link(&outside, root.join("linked.txt")).unwrap();
    let (status, err) = h.workspace("read", &run, "linked.txt").await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (403, Some("workspace_hardlink")),
        "{err}"
    );
    let (status, err) = h
        .post(
            "/v1/workspace/write",
            json!({"run_id": run, "path": "linked.txt", "content": "pwned"}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (403, Some("workspace_hardlink")),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "secret",
        "outside file untouched"
    );
    h.stop().await;
}

#[tokio::test]
async fn provenance_is_content_not_length_and_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path()).await;
    let run = unique("run");
    h.post(
        "/v1/workspace/write",
        json!({"run_id": run, "path": "plan.md", "content": "safe plan"}),
    )
    .await;
    let file = run_root(&h, &run).join("plan.md");
    let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
    // Same length, other content, original mtime restored (`touch -d`).
    std::fs::write(&file, "evil plan").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        modified
    );
    let (_, r) = h.workspace("read", &run, "plan.md").await;
    assert_eq!(
        (r["content"].as_str(), r["provenance"].as_str()),
        (Some("evil plan"), Some("EXTERNAL_UNTRUSTED"))
    );
    let (_, s) = h.workspace("stat", &run, "plan.md").await;
    assert_eq!(s["provenance"], "EXTERNAL_UNTRUSTED", "{s}");
    let (_, l) = h.workspace("list", &run, "").await;
    assert_eq!(l["entries"][0]["provenance"], "EXTERNAL_UNTRUSTED", "{l}");
    // Written again through the handle, it is ours again.
    h.post(
        "/v1/workspace/write",
        json!({"run_id": run, "path": "plan.md", "content": "safe plan"}),
    )
    .await;
    let (_, s) = h.workspace("stat", &run, "plan.md").await;
    assert_eq!(s["provenance"], "INTERNAL_TOOL", "{s}");
    h.stop().await;
}

#[tokio::test]
async fn over_long_names_and_paths_are_invalid_paths() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(dir.path()).await;
    let run = unique("run");
    let long_name = "n".repeat(300);
    let long_path = vec!["d"; 2600].join("/");
    for path in [long_name.as_str(), long_path.as_str()] {
        for op in ["read", "write", "stat"] {
            let mut body = json!({"run_id": run, "path": path});
            if op == "write" {
                body["content"] = json!("x");
            }
            let (status, err) = h.post(&format!("/v1/workspace/{op}"), body).await;
            assert_eq!(
                (status, err["error"]["code"].as_str()),
                (400, Some("workspace_invalid_path")),
                "{op} {}: {err}",
                path.len()
            );
        }
    }
    h.stop().await;
}

/// A high-risk workspace write is recorded through the gate's own intent
/// steps, as an agent's call would be: the intent is begun on the allowing
/// decision (which is then used: no second intent can claim it), closed
/// `completed`, and counted in `toolgate_intents_total`. Before, the write
/// went to the store directly and left the decision open and uncounted.
#[tokio::test]
async fn a_high_risk_write_goes_through_the_gate_s_intent_steps() {
    let dir = tempfile::tempdir().unwrap();
    let spec = SPEC.replace(
        "workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}",
        "workspace.write: {sideEffect: WORKSPACE_WRITE, risk: high}",
    );
    assert_ne!(spec, SPEC, "the test profile makes writes high-risk");
    let (_, url) = backends(dir.path()).remove(0);
    let mut h = Harness::start(dir.path(), &url, Some(&bundle(&spec, 1, day(), &key()))).await;
    let run = unique("run");
    let (status, w) = h
        .post(
            "/v1/workspace/write",
            json!({"run_id": run, "path": "deploy.sh", "content": "make deploy"}),
        )
        .await;
    assert_eq!(status, 200, "{w}");
    let decision_id = w["decision_id"].as_str().unwrap().to_owned();

    let (_, metrics) = h.get("/metrics").await;
    for status in ["pending", "completed"] {
        let line = format!("toolgate_intents_total{{status=\"{status}\"}} 1");
        assert!(metrics.contains(&line), "{line} missing:\n{metrics}");
    }
    let (_, open) = h
        .get_json(&format!("/v1/intents?run_id={run}&status=pending"))
        .await;
    assert_eq!(open["intents"].as_array().map(Vec::len), Some(0), "{open}");
    // The decision was used by the write's own intent.
    let digest = toolgate_policy::args_digest(
        json!({"path": "deploy.sh", "content": "make deploy"})
            .as_object()
            .unwrap(),
    );
    let (status, err) = h
        .post(
            "/v1/intents",
            json!({"decision_id": decision_id, "run_id": run, "step_id": "-",
                   "tool": "workspace.write", "args_digest": digest}),
        )
        .await;
    assert_eq!(status, 409, "{err}");
    assert_eq!(err["error"]["code"], "intent_exists");
    h.stop().await;
}
