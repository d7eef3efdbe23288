//! `toolgate hook pre-tool-use --format F` for the runners besides Claude
//! Code (issue #49), against a real sidecar serving `/v1/hooks/F`: each
//! runner's recorded input per tool kind under its shipped profile, the
//! exit code each runner honours, every fail-open path (malformed input,
//! no sidecar, a sidecar answering garbage) ending in a deny that runner
//! honours, and Codex's escalate → approve → retry loop.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common::free_port;
use crate::hook_cli::{approval_id, approve, start_sidecar_with};

/// The binary under test: `$TOOLGATE_BIN`, else the one cargo built.
fn toolgate_bin() -> String {
    std::env::var("TOOLGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_toolgate").to_owned())
}

/// Runs the hook of `format` with `input` on stdin: exit code, the JSON it
/// printed, stderr.
fn hook(format: &str, url: Option<&str>, input: &[u8]) -> (i32, Value, String) {
    let mut cmd = Command::new(toolgate_bin());
    cmd.args(["hook", "pre-tool-use", "--format", format]);
    match url {
        Some(u) => cmd.env("TOOLGATE_URL", u),
        None => cmd.env_remove("TOOLGATE_URL"),
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hook");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{format}: no decision JSON ({e}): {stdout:?}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), json, stderr)
}

/// The decision a runner reads in `body`.
fn decision(format: &str, body: &Value) -> String {
    let v = match format {
        "claude-code" => &body["hookSpecificOutput"]["permissionDecision"],
        "codex" if body == &json!({}) => return "allow".into(),
        "codex" => &body["hookSpecificOutput"]["permissionDecision"],
        "gemini" => &body["decision"],
        "cursor" => &body["permission"],
        "copilot" => &body["permissionDecision"],
        _ => unreachable!(),
    };
    v.as_str().unwrap_or("?").to_owned()
}

/// The exit code of a deny each runner honours: 2 where 2 blocks, 0 where
/// the JSON is read (Copilot skips a hook exiting non-zero).
fn deny_exit(format: &str) -> i32 {
    match format {
        "claude-code" | "codex" | "gemini" => 2,
        _ => 0,
    }
}

fn start(
    runner: &str,
) -> (
    tempfile::TempDir,
    String,
    String,
    crate::common::SidecarProcess,
) {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}?mode=rwc", dir.path().join("h.db").display());
    let port = free_port();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let profile =
        std::fs::read_to_string(root.join(format!("examples/profiles/{runner}.yaml"))).unwrap();
    let sidecar = start_sidecar_with(dir.path(), &database, port, &profile);
    (dir, database, format!("http://127.0.0.1:{port}"), sidecar)
}

/// Runs each recorded input `(input, decision, reason)` through the hook.
fn decide_recorded(format: &str, url: &str, cases: &[(Value, &str, &str)]) {
    for (input, expect, reason) in cases {
        let (code, out, stderr) = hook(format, Some(url), input.to_string().as_bytes());
        assert_eq!(
            decision(format, &out),
            *expect,
            "{format} {input}: {out} {stderr}"
        );
        let exit = if *expect == "allow" {
            0
        } else {
            deny_exit(format)
        };
        assert_eq!(code, exit, "{format} {input}");
        let shown = format!("{out}{stderr}");
        assert!(
            shown.contains(reason),
            "{format}: expected {reason} in {shown}"
        );
    }
}

#[test]
fn codex_tools_under_the_codex_profile() {
    let (_dir, _db, url, _sidecar) = start("codex");
    let call = |tool: &str, input: Value| {
        json!({"session_id": "cx-1", "turn_id": "t-1", "cwd": "/w", "hook_event_name": "PreToolUse",
               "model": "gpt-5", "tool_name": tool, "tool_input": input, "tool_use_id": "call_1"})
    };
    let patch = |file: &str| json!({"command": format!("*** Begin Patch\n*** Update File: {file}\n@@\n-a\n+b\n*** End Patch\n")});
    decide_recorded(
        "codex",
        &url,
        &[
            (call("Bash", json!({"command": "cargo test"})), "allow", ""),
            (
                call("Bash", json!({"command": "sudo reboot"})),
                "deny",
                "deny_rule",
            ),
            (call("apply_patch", patch("src/lib.rs")), "allow", ""),
            (call("apply_patch", patch(".env")), "deny", "deny_rule"),
            (
                call(
                    "mcp__github__get_issue",
                    json!({"owner": "o", "repo": "r", "issue_number": 1}),
                ),
                "allow",
                "",
            ),
            (
                call("mcp__github__merge_pull_request", json!({"pull_number": 2})),
                "deny",
                "deny_rule",
            ),
            (
                call("mcp__fetch__fetch", json!({"url": "https://docs.rs/serde"})),
                "allow",
                "",
            ),
            (
                call(
                    "mcp__fetch__fetch",
                    json!({"url": "http://169.254.169.254/"}),
                ),
                "deny",
                "hardline_cidr",
            ),
        ],
    );
}

#[test]
fn gemini_tools_under_the_gemini_profile() {
    let (_dir, _db, url, _sidecar) = start("gemini");
    let call = |tool: &str, input: Value| {
        json!({"session_id": "gm-1", "transcript_path": "/t.json", "cwd": "/w",
               "hook_event_name": "BeforeTool", "timestamp": "2026-01-01T00:00:00Z",
               "tool_name": tool, "tool_input": input})
    };
    let mut mcp = call("mcp__github__get_issue", json!({"issue_number": 1}));
    mcp["mcp_context"] =
        json!({"server_name": "github", "tool_name": "get_issue", "command": "gh"});
    decide_recorded(
        "gemini",
        &url,
        &[
            (
                call("run_shell_command", json!({"command": "git status"})),
                "allow",
                "allow_rule",
            ),
            (
                call("run_shell_command", json!({"command": "rm -rf /"})),
                "deny",
                "hardline_command",
            ),
            (
                call(
                    "write_file",
                    json!({"file_path": "/w/src/a.ts", "content": "x"}),
                ),
                "allow",
                "allow_rule",
            ),
            (
                call(
                    "replace",
                    json!({"file_path": "/w/.env", "old_string": "a", "new_string": "b"}),
                ),
                "deny",
                "hardline_path",
            ),
            (mcp, "allow", "allow_rule"),
            (
                call("web_fetch", json!({"prompt": "summarize https://docs.rs"})),
                "deny",
                "approval_required",
            ),
        ],
    );
}

#[test]
fn cursor_tools_under_the_cursor_profile() {
    let (_dir, _db, url, _sidecar) = start("cursor");
    let with = |extra: Value| {
        let mut v =
            json!({"conversation_id": "cu-1", "generation_id": "g-1", "workspace_roots": ["/w"]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    decide_recorded(
        "cursor",
        &url,
        &[
            (
                with(
                    json!({"hook_event_name": "beforeShellExecution", "command": "npm test", "cwd": "/w"}),
                ),
                "allow",
                "allow_rule",
            ),
            (
                with(
                    json!({"hook_event_name": "beforeShellExecution", "command": "git push -f", "cwd": "/w"}),
                ),
                "deny",
                "deny_rule",
            ),
            (
                with(
                    json!({"hook_event_name": "preToolUse", "tool_name": "Write", "tool_input": {"file_path": "/w/a.ts", "contents": "x"}}),
                ),
                "allow",
                "allow_rule",
            ),
            (
                with(
                    json!({"hook_event_name": "preToolUse", "tool_name": "Read", "tool_input": {"file_path": "/home/u/.ssh/id_rsa"}}),
                ),
                "deny",
                "hardline_path",
            ),
            (
                with(
                    json!({"hook_event_name": "beforeMCPExecution", "tool_name": "get_issue", "tool_input": "{\"issue_number\":1}", "command": "gh"}),
                ),
                "allow",
                "allow_rule",
            ),
            (
                with(
                    json!({"hook_event_name": "beforeMCPExecution", "tool_name": "create_issue", "tool_input": {"title": "t"}, "url": "https://mcp.example"}),
                ),
                "deny",
                "approval_required",
            ),
            (
                with(
                    json!({"hook_event_name": "preToolUse", "tool_name": "WebFetch", "tool_input": {"url": "https://paste.example/x"}}),
                ),
                "deny",
                "egress_host_not_allowed",
            ),
        ],
    );
}

#[test]
fn copilot_tools_under_the_copilot_profile() {
    let (_dir, _db, url, _sidecar) = start("copilot");
    let call = |tool: &str, args: Value| json!({"timestamp": 1704614600000u64, "cwd": "/w", "toolName": tool, "toolArgs": args.to_string()});
    decide_recorded(
        "copilot",
        &url,
        &[
            (
                call("bash", json!({"command": "git status", "description": "s"})),
                "allow",
                "allow_rule",
            ),
            (
                call("bash", json!({"command": "sudo rm x"})),
                "deny",
                "deny_rule",
            ),
            (
                call(
                    "edit",
                    json!({"path": "/w/a.go", "old_str": "a", "new_str": "b"}),
                ),
                "allow",
                "allow_rule",
            ),
            (
                call(
                    "create",
                    json!({"path": "/w/.git/config", "file_text": "x"}),
                ),
                "deny",
                "hardline_path",
            ),
            (
                call("github-mcp-server-get_issue", json!({"issue_number": 1})),
                "allow",
                "allow_rule",
            ),
            (
                call("web_fetch", json!({"url": "https://pkg.go.dev/net/http"})),
                "allow",
                "allow_rule",
            ),
            (
                call("web_fetch", json!({"url": "http://169.254.169.254/"})),
                "deny",
                "hardline_cidr",
            ),
        ],
    );
}

/// A loopback server answering every request with `response`.
fn fake_sidecar(response: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 65536];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(response.as_bytes());
        }
    });
    format!("http://{addr}")
}

/// Every way of not getting a readable answer ends in a deny the runner
/// honours — never in an exit code the runner would skip.
#[test]
fn every_fail_open_path_denies_in_the_runners_format() {
    let (_dir, _db, url, _sidecar) = start("codex");
    let down = format!("http://127.0.0.1:{}", free_port());
    let garbage = fake_sidecar(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{\"hello\":1}",
    );
    let failing = fake_sidecar(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    let valid = |format: &str| match format {
        "cursor" => {
            json!({"conversation_id": "f", "hook_event_name": "beforeShellExecution", "command": "git status"})
        }
        "copilot" => json!({"toolName": "bash", "toolArgs": "{\"command\":\"git status\"}"}),
        _ => {
            json!({"session_id": "f", "tool_name": "Bash", "tool_input": {"command": "git status"}})
        }
    };
    for format in ["claude-code", "codex", "gemini", "cursor", "copilot"] {
        let input = valid(format).to_string();
        let mut paths: Vec<(&str, Option<&str>, &[u8])> = vec![
            ("sidecar down", Some(&down), input.as_bytes()),
            ("no TOOLGATE_URL", None, input.as_bytes()),
            ("garbage answer", Some(&garbage), input.as_bytes()),
            ("error status", Some(&failing), input.as_bytes()),
        ];
        for malformed in [
            &b"not json"[..],
            b"[]",
            b"{}",
            br#"{"tool_name":7,"toolName":7}"#,
        ] {
            paths.push(("malformed input", Some(&url), malformed));
        }
        for (what, at, bytes) in paths {
            let (code, out, stderr) = hook(format, at, bytes);
            assert_eq!(decision(format, &out), "deny", "{format}, {what}: {out}");
            assert_eq!(code, deny_exit(format), "{format}, {what}: {stderr}");
            if what == "sidecar down" {
                assert!(stderr.contains("unreachable"), "{format}: {stderr}");
            }
        }
    }
    // An unknown format is refused before anything is asked (clap's usage
    // error exits 2).
    let out = Command::new(toolgate_bin())
        .args(["hook", "pre-tool-use", "--format", "windsurf"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Codex honours only a deny, so an escalation denies with the approval
/// hint; after a human approves, the agent's retry — new `tool_use_id` and
/// `turn_id`, same session, tool and arguments — runs, once.
#[test]
fn codex_escalate_approve_retry_end_to_end() {
    let (_dir, database, url, _sidecar) = start("codex");
    let attempt = |n: u32| {
        json!({"session_id": "codex-loop", "turn_id": format!("turn-{n}"), "cwd": "/w",
               "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": "cargo publish --dry-run"}, "tool_use_id": format!("call_{n}")})
        .to_string()
    };
    let (code, out, stderr) = hook("codex", Some(&url), attempt(1).as_bytes());
    assert_eq!(
        (code, decision("codex", &out).as_str()),
        (2, "deny"),
        "{out}"
    );
    let id = approval_id(&stderr);
    assert!(stderr.contains("toolgate approvals approve"), "{stderr}");
    // Not yet approved: the retry is still denied, naming the same approval.
    let (code, _, stderr) = hook("codex", Some(&url), attempt(2).as_bytes());
    assert_eq!((code, approval_id(&stderr)), (2, id.clone()));
    approve(&database, &id);
    let (code, out, _) = hook("codex", Some(&url), attempt(3).as_bytes());
    assert_eq!((code, out), (0, json!({})), "the approved retry runs");
    // Once: the next identical call needs a new approval.
    let (code, _, stderr) = hook("codex", Some(&url), attempt(4).as_bytes());
    assert_eq!(code, 2);
    assert_ne!(approval_id(&stderr), id);
}
