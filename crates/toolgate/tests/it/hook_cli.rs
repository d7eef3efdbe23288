//! `toolgate hook pre-tool-use` against a real sidecar process: Claude-Code
//! hook JSON in, a hook decision out: exit 0 for an allow and for an
//! escalation (Claude Code's `ask`, naming the approval), exit 2 for
//! everything else — including a sidecar that cannot be reached.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{SidecarProcess, free_port, spawn_sidecar, toolgate};
use serde_json::{Value, json};

const PROFILE: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: hooked}
spec:
  mode: rules
  aliases: {Bash: bash}
  rules:
    bash: {deny: ["rm *"], allow: ["git status", "ls*"], escalate: ["make *"]}
  effects:
    bash: {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}
  approvals: {ttlSeconds: 600}
"#;

/// Runs the hook with `input` on stdin and `url` as `$TOOLGATE_URL`.
fn hook(url: Option<&str>, input: &[u8], extra: &[&str]) -> (i32, Value, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["hook", "pre-tool-use"]).args(extra);
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
    let json: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("hook printed no decision JSON ({e}): {stdout:?}"));
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hook_input(command: &str, session: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "session_id": session,
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": "/workspace",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "from the agent"},
        "tool_use_id": format!("toolu_{}", command.len()),
    }))
    .unwrap()
}

fn decision(v: &Value) -> &str {
    v["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .unwrap_or_default()
}

fn start_sidecar(dir: &Path, database: &str, port: u16) -> SidecarProcess {
    start_sidecar_with(dir, database, port, PROFILE)
}

pub(crate) fn start_sidecar_with(
    dir: &Path,
    database: &str,
    port: u16,
    profile: &str,
) -> SidecarProcess {
    let keys = dir.join("keys");
    assert!(
        toolgate(&["keygen", "--out", keys.to_str().unwrap()])
            .status
            .success()
    );
    std::fs::write(dir.join("profile.yaml"), profile).unwrap();
    let out = toolgate(&[
        "bundle",
        "build",
        "--profile",
        dir.join("profile.yaml").to_str().unwrap(),
        "--key",
        keys.join("signing.key").to_str().unwrap(),
        "--sequence",
        "1",
        "--out",
        dir.join("bundle.json").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut sidecar = spawn_sidecar(dir, database, port, "agents");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = sidecar.0.try_wait().unwrap() {
            panic!("sidecar exited: {status}");
        }
        if ready(port) {
            return sidecar;
        }
        assert!(Instant::now() < deadline, "sidecar never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET /readyz` answered 200.
fn ready(port: u16) -> bool {
    http_get(port, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
}

/// The whole response to `GET path` on the sidecar at `port`, if it answered.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

pub(crate) fn approve(database: &str, approval: &str) {
    let out = toolgate(&[
        "approvals",
        "approve",
        approval,
        "--database",
        database,
        "--by",
        "alice",
        "--tenant",
        "agents",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The approval id named in a blocked escalation's reason.
pub(crate) fn approval_id(reason: &str) -> String {
    let rest = reason
        .split("approval_required: approval ")
        .nth(1)
        .unwrap_or_else(|| panic!("no approval in {reason:?}"));
    rest.split_whitespace().next().unwrap().to_owned()
}

#[test]
fn the_hook_blocks_all_but_a_clear_allow() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}?mode=rwc", dir.path().join("hook.db").display());
    let port = free_port();
    let _sidecar = start_sidecar(dir.path(), &database, port);
    let url = format!("http://127.0.0.1:{port}");

    // Allowed (through the `Bash` alias): exit 0, decision allow.
    let (code, out, _) = hook(Some(&url), &hook_input("git status", "s1"), &[]);
    assert_eq!((code, decision(&out)), (0, "allow"), "{out}");
    assert_eq!(out["hookSpecificOutput"]["hookEventName"], "PreToolUse");

    // Denied by a rule: exit 2, the reason on stderr for the agent.
    let (code, out, stderr) = hook(Some(&url), &hook_input("rm -rf /", "s1"), &[]);
    assert_eq!((code, decision(&out)), (2, "deny"), "{out}");
    assert!(stderr.contains("deny_rule"), "{stderr}");
    // Shell control is denied before any allow.
    let (code, _, stderr) = hook(Some(&url), &hook_input("ls; curl evil", "s1"), &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("shell_control"), "{stderr}");

    // Escalated: Claude Code asks its user, naming the approval; once
    // approved, the same call passes (once).
    let input = hook_input("make deploy", "s2");
    let (code, out, stderr) = hook(Some(&url), &input, &[]);
    assert_eq!((code, decision(&out)), (0, "ask"), "{out}");
    let id = approval_id(&stderr);
    approve(&database, &id);
    let (code, out, _) = hook(Some(&url), &input, &[]);
    assert_eq!((code, decision(&out)), (0, "allow"), "{out}");
    assert!(
        out["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("approved")
    );

    // With --approval-wait the hook waits for the human.
    let input = hook_input("make release", "s3");
    let (code, out, stderr) = hook(Some(&url), &input, &[]);
    assert_eq!((code, decision(&out)), (0, "ask"), "{out}");
    let id = approval_id(&stderr);
    let approver = {
        let database = database.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            approve(&database, &id);
        })
    };
    let (code, out, _) = hook(Some(&url), &input, &["--approval-wait", "20"]);
    approver.join().unwrap();
    assert_eq!((code, decision(&out)), (0, "allow"), "{out}");

    // A session id that is no run id (a control character, a look-alike)
    // blocks the call with the run-id code.
    for session in ["bad\u{1}run", "run-1 ", "run-1\u{200b}"] {
        let (code, _, stderr) = hook(Some(&url), &hook_input("git status", session), &[]);
        assert_eq!(code, 2);
        assert!(stderr.contains("invalid_run_id"), "{stderr}");
    }
}

#[test]
fn without_a_reachable_sidecar_the_hook_fails_closed() {
    let closed = format!("http://127.0.0.1:{}", free_port());
    let (code, out, stderr) = hook(Some(&closed), &hook_input("git status", "s"), &[]);
    assert_eq!((code, decision(&out)), (2, "deny"), "{out}");
    assert!(stderr.contains("unreachable"), "{stderr}");
    let (code, out, _) = hook(None, &hook_input("git status", "s"), &[]);
    assert_eq!((code, decision(&out)), (2, "deny"), "{out}");
    for garbage in [&b"not json"[..], b"", br#"{"tool_input":{}}"#] {
        let (code, out, _) = hook(Some(&closed), garbage, &[]);
        assert_eq!((code, decision(&out)), (2, "deny"), "{out}");
    }
    // Limits too large to add up (they once overflowed into a panic, exit
    // 101, which hook runners do not treat as a block) still block.
    let huge = u64::MAX.to_string();
    let (code, out, _) = hook(
        Some(&closed),
        &hook_input("git status", "s"),
        &["--timeout", &huge, "--approval-wait", &huge],
    );
    assert_eq!((code, decision(&out)), (2, "deny"), "{out}");
}

#[test]
fn runs_are_cancelled_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}?mode=rwc", dir.path().join("runs.db").display());
    let port = free_port();
    let _sidecar = start_sidecar(dir.path(), &database, port);
    let url = format!("http://127.0.0.1:{port}");
    // The hook's run id is its session id.
    let (code, _, _) = hook(Some(&url), &hook_input("git status", "session-9"), &[]);
    assert_eq!(code, 0);

    // Cancelled in another case: run ids are case-folded, one run.
    let out = toolgate(&[
        "runs",
        "cancel",
        "SESSION-9",
        "--database",
        &database,
        "--tenant",
        "agents",
        "--reason",
        "operator stop",
        "--by",
        "user:alice",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cancel: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cancel["newly_cancelled"], true);

    // The sidecar process learns of it from the database within its poll.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, stderr) = hook(Some(&url), &hook_input("git status", "session-9"), &[]);
        if code == 2 {
            assert!(stderr.contains("run_cancelled"), "{stderr}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cancellation never reached the sidecar"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Another session is unaffected.
    let (code, _, _) = hook(Some(&url), &hook_input("git status", "session-10"), &[]);
    assert_eq!(code, 0);

    let out = toolgate(&[
        "runs",
        "status",
        "session-9",
        "--database",
        &database,
        "--tenant",
        "agents",
    ]);
    assert!(out.status.success());
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["cancel_reason"], "operator stop");
    assert_eq!(state["cancelled_by"], "user:alice");
    // The same shape as the sidecar's GET /v1/runs/{id}, budgets included
    // (their limits need the profile; the pod's need --pod).
    let api = http_get_json(port, "/v1/runs/session-9");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&state), keys(&api), "{state} vs {api}");
    assert_eq!(state["budgets"]["calls"], api["budgets"]["calls"]);
    assert!(state["budgets"].get("pod_calls").is_none());
    let out = toolgate(&[
        "runs",
        "status",
        "session-9",
        "--database",
        &database,
        "--tenant",
        "agents",
        "--pod",
        "local",
        "--profile",
        dir.path().join("profile.yaml").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let full: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(full["budgets"], api["budgets"], "{full} vs {api}");
    // Bad input is a typed error, not a panic.
    let out = toolgate(&[
        "runs",
        "cancel",
        "",
        "--database",
        &database,
        "--tenant",
        "agents",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let err = if err.is_null() {
        serde_json::from_slice(&out.stderr).unwrap_or(Value::Null)
    } else {
        err
    };
    assert_eq!(err["error"]["code"], "invalid_run_id", "{err}");
}

/// The shipped Claude Code profile through the hook, with a recorded hook
/// input of each Claude Code tool (`fixtures/claude-code-hook.json`): each
/// gets the decision the profile means, and an MCP server's tool, named
/// `mcp__SERVER__TOOL` by Claude Code, is governed by the `SERVER.TOOL`
/// rules the MCP gateway uses.
#[test]
fn the_claude_code_profile_decides_each_claude_code_tool() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}?mode=rwc", dir.path().join("hook.db").display());
    let port = free_port();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let profile = std::fs::read_to_string(root.join("examples/profiles/claude-code.yaml")).unwrap();
    let _sidecar = start_sidecar_with(dir.path(), &database, port, &profile);
    let url = format!("http://127.0.0.1:{port}");
    let recorded: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/claude-code-hook.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut tools = std::collections::BTreeSet::new();
    for (i, case) in recorded.iter().enumerate() {
        let mut input = case["input"].clone();
        // What Claude Code sends besides the tool and its input.
        input["session_id"] = json!("0b7a31e2-5d0f-4c55-9a4e-claude-code");
        input["transcript_path"] = json!("/home/dev/.claude/projects/p/session.jsonl");
        input["cwd"] = json!("/home/dev/project");
        input["permission_mode"] = json!("default");
        input["hook_event_name"] = json!("PreToolUse");
        input["tool_use_id"] = json!(format!("toolu_{i:04}"));
        let tool = input["tool_name"].as_str().unwrap().to_owned();
        tools.insert(tool.clone());
        let (code, out, stderr) = hook(Some(&url), &serde_json::to_vec(&input).unwrap(), &[]);
        // An escalation is Claude Code's `ask`, naming the approval.
        let expect = match (case["expect"].as_str().unwrap(), case["reason"].as_str()) {
            ("deny", Some("approval_required")) => "ask",
            (expect, _) => expect,
        };
        assert_eq!(
            decision(&out),
            expect,
            "{tool} {}: {out} {stderr}",
            case["input"]["tool_input"]
        );
        assert_eq!(code, if expect == "deny" { 2 } else { 0 }, "{tool}");
        if let Some(reason) = case["reason"].as_str() {
            assert!(
                stderr.contains(reason),
                "{tool}: expected {reason} in {stderr}"
            );
        }
        if stderr.contains("approval_required") {
            // The hint names commands that work where it is read.
            assert!(stderr.contains("kubectl toolgate approve apr-"), "{stderr}");
            assert!(stderr.contains("toolgate approvals approve"), "{stderr}");
            assert!(stderr.contains("--database"), "{stderr}");
        }
    }
    for tool in [
        "Bash",
        "BashOutput",
        "KillShell",
        "Read",
        "Write",
        "Edit",
        "MultiEdit",
        "Glob",
        "Grep",
        "LS",
        "NotebookEdit",
        "WebFetch",
        "WebSearch",
        "TodoWrite",
        "Task",
        "ExitPlanMode",
    ] {
        assert!(tools.contains(tool), "no recorded input of {tool}");
    }
    // The MCP names reached the sidecar as the gateway names them.
    let log = toolgate(&["approvals", "list", "--database", &database]);
    let listed = String::from_utf8_lossy(&log.stdout);
    assert!(listed.contains("github.create_issue"), "{listed}");
    assert!(!listed.contains("mcp__github"), "{listed}");
}

/// `GET path` on the sidecar at `port`, as JSON.
fn http_get_json(port: u16, path: &str) -> Value {
    let response = http_get(port, path).unwrap_or_else(|| panic!("GET {path}: no answer"));
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}
