//! `POST /v1/hooks/{format}` (issue #49): each runner's recorded hook
//! input, per tool kind, decided as `/v1/authorize` decides it and answered
//! in the runner's own output — always HTTP 200, a deny included, since a
//! runner treats an error status as a non-blocking hook and runs the call.

use serde_json::{Value, json};
use toolgate_store::ApprovalDecision;

use crate::common::*;

/// The runners' own tool names, aliased onto a few policy tools.
const HOOK_SPEC: &str = r#"
mode: rules
aliases:
  Bash: bash
  run_shell_command: bash
  Shell: bash
  Edit: editor
  Write: editor
  write_file: editor
  edit: editor
  apply_patch: editor
  WebFetch: fetch
  web_fetch: fetch
  fetch.fetch: fetch
  mcp.get_issue: github.get_issue
  github-mcp-server-get_issue: github.get_issue
rules:
  bash: {deny: ["rm *"], allow: ["git status", "ls*"], escalate: ["make *"]}
  editor: {allow: ["*"]}
  fetch: {allow: ["*"]}
  github.get_issue: {allow: ["*"]}
effects:
  bash: {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}
  editor: {sideEffect: WORKSPACE_WRITE, risk: write}
  fetch: {sideEffect: NONE, risk: low}
  github.get_issue: {sideEffect: NONE, risk: low}
approvals: {ttlSeconds: 600}
"#;

const FORMATS: [&str; 5] = ["claude-code", "codex", "gemini", "cursor", "copilot"];

/// The decision a runner reads in `body`: `allow`, `deny` or `ask`.
fn decision(format: &str, body: &Value) -> String {
    let v = match format {
        "claude-code" => &body["hookSpecificOutput"]["permissionDecision"],
        // Codex honours a deny only; its allow is an empty object.
        "codex" if body == &json!({}) => return "allow".into(),
        "codex" => &body["hookSpecificOutput"]["permissionDecision"],
        "gemini" => &body["decision"],
        "cursor" => &body["permission"],
        "copilot" => &body["permissionDecision"],
        _ => unreachable!(),
    };
    v.as_str().unwrap_or("?").to_owned()
}

/// The reason text a runner shows, wherever its format puts it.
fn reason(body: &Value) -> String {
    [
        &body["hookSpecificOutput"]["permissionDecisionReason"],
        &body["reason"],
        &body["agent_message"],
        &body["permissionDecisionReason"],
    ]
    .iter()
    .find_map(|v| v.as_str())
    .unwrap_or_default()
    .to_owned()
}

/// A recorded input of `format` for a shell command in `session`.
fn shell(format: &str, command: &str, session: &str, attempt: &str) -> Value {
    match format {
        "claude-code" => json!({"session_id": session, "transcript_path": "/t", "cwd": "/w",
            "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "d"}, "tool_use_id": attempt}),
        "codex" => json!({"session_id": session, "turn_id": format!("turn-{attempt}"), "cwd": "/w",
            "hook_event_name": "PreToolUse", "model": "gpt-5", "tool_name": "Bash",
            "tool_input": {"command": command}, "tool_use_id": attempt}),
        "gemini" => json!({"session_id": session, "cwd": "/w", "hook_event_name": "BeforeTool",
            "timestamp": "2026-01-01T00:00:00Z", "tool_name": "run_shell_command",
            "tool_input": {"command": command}}),
        "cursor" => json!({"conversation_id": session, "generation_id": attempt,
            "hook_event_name": "beforeShellExecution", "command": command, "cwd": "/w",
            "workspace_roots": ["/w"]}),
        "copilot" => json!({"timestamp": 1704614600000u64, "cwd": "/w", "toolName": "bash",
            "toolArgs": json!({"command": command}).to_string(), "sessionId": session}),
        _ => unreachable!(),
    }
}

/// Recorded inputs of `format` for a file edit, an MCP call and a web
/// fetch, each allowed by `HOOK_SPEC`.
fn other_kinds(format: &str) -> Vec<Value> {
    let claude = |tool: &str, input: Value| {
        json!({"session_id": "k1", "hook_event_name": "PreToolUse", "tool_name": tool,
               "tool_input": input, "tool_use_id": "toolu_9"})
    };
    match format {
        "claude-code" | "codex" => vec![
            if format == "codex" {
                claude(
                    "apply_patch",
                    json!({"command": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch"}),
                )
            } else {
                claude(
                    "Edit",
                    json!({"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"}),
                )
            },
            claude(
                "mcp__github__get_issue",
                json!({"owner": "o", "repo": "r", "issue_number": 1}),
            ),
            if format == "codex" {
                claude("mcp__fetch__fetch", json!({"url": "https://docs.rs"}))
            } else {
                claude("WebFetch", json!({"url": "https://docs.rs", "prompt": "p"}))
            },
        ],
        "gemini" => {
            let g = |tool: &str, input: Value| json!({"session_id": "k1", "hook_event_name": "BeforeTool", "tool_name": tool, "tool_input": input});
            let mut mcp = g("mcp__github__get_issue", json!({"issue_number": 1}));
            mcp["mcp_context"] = json!({"server_name": "github", "tool_name": "get_issue"});
            vec![
                g("write_file", json!({"file_path": "/w/a", "content": "x"})),
                mcp,
                g("web_fetch", json!({"prompt": "summarize https://docs.rs"})),
            ]
        }
        "cursor" => vec![
            json!({"conversation_id": "k1", "hook_event_name": "preToolUse", "tool_name": "Write",
                   "tool_input": {"file_path": "/w/a.ts", "contents": "x"}, "tool_use_id": "t"}),
            json!({"conversation_id": "k1", "hook_event_name": "beforeMCPExecution",
                   "tool_name": "get_issue", "tool_input": "{\"issue_number\":1}", "command": "gh-mcp"}),
            json!({"conversation_id": "k1", "hook_event_name": "preToolUse", "tool_name": "WebFetch",
                   "tool_input": {"url": "https://docs.rs"}}),
        ],
        "copilot" => vec![
            json!({"toolName": "edit", "toolArgs": "{\"path\":\"/w/a\",\"old_str\":\"a\",\"new_str\":\"b\"}"}),
            json!({"toolName": "github-mcp-server-get_issue", "toolArgs": "{\"issue_number\":1}"}),
            json!({"toolName": "web_fetch", "toolArgs": "{\"url\":\"https://docs.rs\"}"}),
        ],
        _ => unreachable!(),
    }
}

async fn post_hook(h: &Harness, format: &str, body: Vec<u8>) -> Value {
    let (status, out) = h.post_raw(&format!("/v1/hooks/{format}"), body).await;
    assert_eq!(status, 200, "{format}: {out}");
    out
}

#[tokio::test]
async fn each_runner_is_answered_in_its_own_format() {
    each_backend!(HOOK_SPEC, |h| {
        for format in FORMATS {
            let run = unique("s");
            let allow = post_hook(
                &h,
                format,
                shell(format, "git status", &run, "a1")
                    .to_string()
                    .into_bytes(),
            )
            .await;
            assert_eq!(decision(format, &allow), "allow", "{format}: {allow}");
            let deny = post_hook(
                &h,
                format,
                shell(format, "rm -rf /w", &run, "a2")
                    .to_string()
                    .into_bytes(),
            )
            .await;
            assert_eq!(decision(format, &deny), "deny", "{format}: {deny}");
            assert!(reason(&deny).contains("deny_rule"), "{format}: {deny}");
            for input in other_kinds(format) {
                let out = post_hook(&h, format, input.to_string().into_bytes()).await;
                assert_eq!(
                    decision(format, &out),
                    "allow",
                    "{format}: {input} -> {out}"
                );
            }
            // An escalation: Claude Code asks, every other runner denies;
            // each names the approval.
            let esc = post_hook(
                &h,
                format,
                shell(format, "make deploy", &run, "a3")
                    .to_string()
                    .into_bytes(),
            )
            .await;
            let expected = if format == "claude-code" {
                "ask"
            } else {
                "deny"
            };
            assert_eq!(decision(format, &esc), expected, "{format}: {esc}");
            assert!(
                reason(&esc).contains("approval_required: approval "),
                "{format}: {esc}"
            );
        }
        // The hook decisions are in the log like any other (stopping the
        // sidecar writes what its background writer still holds).
        h.stop().await;
        let log = h.tenant_log().await;
        assert!(log.len() >= FORMATS.len() * 6, "{}", log.len());
    });
}

#[tokio::test]
async fn what_cannot_be_decided_is_a_200_deny_the_runner_honours() {
    each_backend!(HOOK_SPEC, |h| {
        for format in FORMATS {
            let mut bad: Vec<Vec<u8>> = vec![
                b"not json".to_vec(),
                b"[]".to_vec(),
                b"{}".to_vec(),
                vec![b' '; 300 * 1024],
            ];
            // A session id that is no run id is refused with the run-id code.
            let mut look_alike = shell(format, "git status", "run-1\u{200b}", "a");
            if format == "copilot" {
                look_alike["sessionId"] = json!("run-1 ");
            }
            bad.push(look_alike.to_string().into_bytes());
            for (i, input) in bad.into_iter().enumerate() {
                let out = post_hook(&h, format, input).await;
                assert_eq!(decision(format, &out), "deny", "{format} #{i}: {out}");
                if i == 4 {
                    assert!(reason(&out).contains("invalid_run_id"), "{format}: {out}");
                }
            }
        }
        // No runner to answer in: the standard envelope, 404.
        let (status, out) = h.post_raw("/v1/hooks/windsurf", b"{}".to_vec()).await;
        assert_eq!(
            (status, out["error"]["code"].as_str()),
            (404, Some("no_route")),
            "{out}"
        );
    });
}

/// Codex's retry of an escalated call carries new `tool_use_id` and
/// `turn_id`: the approval binds to run, tool and arguments, so once it is
/// approved the retry passes — once.
#[tokio::test]
async fn an_approved_codex_call_passes_once_when_retried_with_new_ids() {
    each_backend!(HOOK_SPEC, |h| {
        let run = unique("codex");
        let ask = |attempt: &str| {
            shell("codex", "make release", &run, attempt)
                .to_string()
                .into_bytes()
        };
        let first = post_hook(&h, "codex", ask("call_1")).await;
        assert_eq!(decision("codex", &first), "deny", "{first}");
        let pending = h.approvals().await;
        let approval = pending
            .iter()
            .find(|a| a.run_id == run)
            .expect("an approval for the run");
        assert!(reason(&first).contains(&approval.id), "{first}");
        // Retried before anyone answers: still denied, the same approval.
        let again = post_hook(&h, "codex", ask("call_2")).await;
        assert_eq!(decision("codex", &again), "deny");
        assert!(reason(&again).contains(&approval.id), "{again}");
        h.resolve(&approval.id, ApprovalDecision::Approved).await;
        let retried = post_hook(&h, "codex", ask("call_3")).await;
        assert_eq!(retried, json!({}), "an approved retry is Codex's allow");
        // Used once: the next identical call asks a human again.
        let after = post_hook(&h, "codex", ask("call_4")).await;
        assert_eq!(decision("codex", &after), "deny");
        assert!(!reason(&after).contains(&approval.id), "{after}");
    });
}

/// `?wait=` holds the answer for the human, then asks again.
#[tokio::test]
async fn a_hook_may_wait_for_the_human() {
    each_backend!(HOOK_SPEC, |h| {
        let run = unique("wait");
        let input = shell("gemini", "make docs", &run, "x")
            .to_string()
            .into_bytes();
        let first = post_hook(&h, "gemini", input.clone()).await;
        assert_eq!(decision("gemini", &first), "deny");
        let id = h
            .approvals()
            .await
            .into_iter()
            .find(|a| a.run_id == run)
            .unwrap()
            .id;
        let waited = async { post_hook(&h, "gemini", input.clone()).await };
        let approve = async {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            h.resolve(&id, ApprovalDecision::Approved).await;
        };
        let (out, ()) = tokio::join!(
            async {
                let (status, out) = h.post_raw("/v1/hooks/gemini?wait=20", input.clone()).await;
                assert_eq!(status, 200);
                out
            },
            approve
        );
        assert_eq!(decision("gemini", &out), "allow", "{out}");
        assert!(reason(&out).contains("approved"), "{out}");
        // Spent: without a wait the call escalates again.
        assert_eq!(decision("gemini", &waited.await), "deny");
        let (_, bad) = h.post_raw("/v1/hooks/gemini?wait=soon", input).await;
        assert_eq!(decision("gemini", &bad), "deny", "{bad}");
    });
}
