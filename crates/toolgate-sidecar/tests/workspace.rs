//! Workspace isolation over HTTP: relative paths only, no escape through
//! symlinks, provenance labels, and host paths never leaked.

mod common;

use common::*;
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

    let (_, r) = h
        .post(
            "/v1/workspace/read",
            json!({"run_id": run, "path": "src/main.rs"}),
        )
        .await;
    assert_eq!(
        (r["content"].as_str(), r["provenance"].as_str()),
        (Some("fn main() {}"), Some("INTERNAL_TOOL"))
    );

    // Something else put a file there: untrusted.
    std::fs::write(run_root(&h, &run).join("notes.txt"), "hello").unwrap();
    let (_, r) = h
        .post(
            "/v1/workspace/read",
            json!({"run_id": run, "path": "notes.txt"}),
        )
        .await;
    assert_eq!(r["provenance"], "EXTERNAL_UNTRUSTED");
    // A file we wrote and someone then changed is untrusted too.
    std::fs::write(
        run_root(&h, &run).join("src/main.rs"),
        "fn main() { evil() }",
    )
    .unwrap();
    let (_, r) = h
        .post(
            "/v1/workspace/read",
            json!({"run_id": run, "path": "src/main.rs"}),
        )
        .await;
    assert_eq!(r["provenance"], "EXTERNAL_UNTRUSTED");

    let (status, l) = h
        .post("/v1/workspace/list", json!({"run_id": run, "path": ""}))
        .await;
    assert_eq!(status, 200, "{l}");
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notes.txt", "src"]);
    assert_eq!(l["entries"][1]["kind"], "dir");

    let (_, s) = h
        .post(
            "/v1/workspace/stat",
            json!({"run_id": run, "path": "notes.txt"}),
        )
        .await;
    assert_eq!(
        (s["kind"].as_str(), s["size"].as_u64()),
        (Some("file"), Some(5))
    );

    // Runs are isolated from each other.
    let other = unique("run");
    let (status, e) = h
        .post(
            "/v1/workspace/read",
            json!({"run_id": other, "path": "notes.txt"}),
        )
        .await;
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
        ("read", "../outside-secret.txt", "workspace_invalid_path"),
        ("read", "sub/../../x", "workspace_invalid_path"),
        ("read", "a//b", "workspace_invalid_path"),
        ("read", "a\u{0}b", "workspace_invalid_path"),
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
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "secret",
        "nothing written outside"
    );
    assert!(!std::path::Path::new("/etc/evil").exists());

    // Links that stay inside work.
    let (status, r) = h
        .post(
            "/v1/workspace/read",
            json!({"run_id": run, "path": "good-link"}),
        )
        .await;
    assert_eq!((status, r["content"].as_str()), (200, Some("ok")), "{r}");
    let (status, r) = h
        .post(
            "/v1/workspace/read",
            json!({"run_id": run, "path": "sub/up/inside.txt"}),
        )
        .await;
    assert_eq!((status, r["content"].as_str()), (200, Some("ok")), "{r}");

    // Bad run ids cannot name other directories.
    for bad in ["..", "a/b", ""] {
        let (status, err) = h
            .post("/v1/workspace/list", json!({"run_id": bad, "path": ""}))
            .await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (400, Some("workspace_invalid_id")),
            "{bad:?}"
        );
    }
    h.stop().await;
}
