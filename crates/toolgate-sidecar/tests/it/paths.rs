//! Hardline paths hold for every spelling of a path (issue #31, item 7):
//! `…/.env/`, `…//.env//`, `…/.env/.` and `…/x/../.env` are the hardlined
//! file, through `/v1/authorize` and through the workspace API alike.

use serde_json::{Value, json};

use crate::common::*;

/// `allowAll`, so only a hardline (or a path refusal) can deny: the
/// built-in path tools, the workspace API, and MCP-style tools whose path
/// arguments the profile names.
const PATHS_SPEC: &str = r#"
mode: allowAll
hardline: {paths: ["/w/.env", "**/.env"]}
effects:
  reader: {sideEffect: WORKSPACE_READ, risk: low}
  editor: {sideEffect: WORKSPACE_WRITE, risk: write}
  workspace.read: {sideEffect: WORKSPACE_READ, risk: low}
  workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}
  fs.read_text_file: {sideEffect: WORKSPACE_READ, risk: low}
  fs.write_file: {sideEffect: WORKSPACE_WRITE, risk: write}
  fs.move_file: {sideEffect: WORKSPACE_WRITE, risk: write, pathArgs: [source, destination]}
  fs.read_multiple_files: {sideEffect: WORKSPACE_READ, risk: low, pathArgs: [paths]}
"#;

/// Spellings of the hardlined `/w/.env` and `/w/sub/.env`.
const VARIANTS: [&str; 10] = [
    "/w/.env/",
    "/w//.env//",
    "/w/.env/.",
    "/w/./.env",
    "//w/.env",
    "/w/x/../.env",
    "/w/sub/.env/",
    "/w/sub/.env/.",
    "/w//sub///.env",
    "/w/sub/x/.././.env/",
];

macro_rules! with_sidecar {
    (|$h:ident| $body:block) => {{
        let scratch = tempfile::tempdir().unwrap();
        for (name, url) in backends(scratch.path()) {
            let dir = scratch.path().join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            eprintln!("backend: {name}");
            #[allow(unused_mut)]
            let mut $h =
                Harness::start(&dir, &url, Some(&bundle(PATHS_SPEC, 1, day(), &key()))).await;
            $body
            $h.stop().await;
        }
    }};
}

fn decided(v: &Value) -> (&str, &str) {
    (
        v["verdict"].as_str().unwrap_or_default(),
        v["reason"].as_str().unwrap_or_default(),
    )
}

#[tokio::test]
async fn variants_of_a_hardlined_path_are_denied_through_authorize() {
    with_sidecar!(|h| {
        let run = unique("run");
        for path in VARIANTS {
            for (tool, args) in [
                ("reader", json!({"path": path})),
                ("editor", json!({"file_path": path, "content": "x"})),
                ("fs.read_text_file", json!({"path": path})),
                ("fs.write_file", json!({"path": path, "content": "x"})),
                (
                    "fs.move_file",
                    json!({"source": "/w/notes", "destination": path}),
                ),
                (
                    "fs.read_multiple_files",
                    json!({"paths": ["/w/notes", path]}),
                ),
            ] {
                let v = h.authorize(tool, args, &run).await;
                assert_eq!(
                    decided(&v),
                    ("deny", "hardline_path"),
                    "{tool} {path:?}: {v}"
                );
            }
        }
        // Other files pass, however they are spelled.
        for path in ["/w/notes/", "/w//src/./main.rs", "/w/.env.example"] {
            let v = h
                .authorize("fs.read_text_file", json!({"path": path}), &run)
                .await;
            assert_eq!(v["verdict"], "allow", "{path:?}: {v}");
        }
    });
}

#[tokio::test]
async fn paths_that_climb_out_or_hold_nul_are_denied() {
    with_sidecar!(|h| {
        let run = unique("run");
        for (path, reason) in [
            ("../etc/passwd", "path_escapes"),
            ("/w/../../etc/passwd", "path_escapes"),
            ("/..", "path_escapes"),
            ("/w/.env\u{0}.txt", "path_invalid"),
        ] {
            let v = h
                .authorize("fs.read_text_file", json!({"path": path}), &run)
                .await;
            assert_eq!(decided(&v), ("deny", reason), "{path:?}: {v}");
        }
    });
}

#[tokio::test]
async fn variants_of_a_hardlined_path_are_denied_through_the_workspace_api() {
    with_sidecar!(|h| {
        let run = unique("run");
        let root = h.dir.join("workspaces").join(&h.tenant).join(&run);
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/.env"), "API_KEY=hunter2").unwrap();
        for path in [
            "sub/.env/",
            "sub//.env",
            "sub/.env/.",
            "sub/./.env",
            "sub/x/../.env",
            "./sub/.env",
        ] {
            let (status, read) = h
                .post("/v1/workspace/read", json!({"run_id": run, "path": path}))
                .await;
            assert_eq!(
                (
                    status,
                    read["error"]["code"].as_str(),
                    read["verdict"]["reason"].as_str()
                ),
                (403, Some("policy_denied"), Some("hardline_path")),
                "{path:?}: {read}"
            );
            assert!(!read.to_string().contains("hunter2"), "{read}");
        }
        // A write to `new/.env/.` is refused, and nothing is created.
        let (status, write) = h
            .post(
                "/v1/workspace/write",
                json!({"run_id": run, "path": "new/.env/.", "content": "X=1"}),
            )
            .await;
        assert_eq!(
            (status, write["verdict"]["reason"].as_str()),
            (403, Some("hardline_path")),
            "{write}"
        );
        assert!(!root.join("new").exists());
        // The refusals are in the decision log as denials.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let log = h.tenant_log().await;
        let denied = log
            .iter()
            .filter(|d| d.record.reason == "hardline_path")
            .count();
        assert_eq!(denied, 7, "{log:?}");
    });
}
