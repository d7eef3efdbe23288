//! Recorded inputs of each runner (shapes from its docs), per tool kind,
//! and the answers each runner honours.

use serde_json::{Value, json};

use super::*;

/// One recorded input per tool kind (shell, file edit, MCP, web) per
/// format, with the call toolgate must read from it.
fn recorded() -> Vec<(Format, Value, &'static str, Value)> {
    let claude = |tool: &str, input: Value| {
        json!({"session_id": "sess-1", "transcript_path": "/t.jsonl", "cwd": "/w",
               "permission_mode": "default", "hook_event_name": "PreToolUse",
               "tool_name": tool, "tool_input": input, "tool_use_id": "toolu_01"})
    };
    let codex = |tool: &str, input: Value| {
        json!({"session_id": "sess-1", "turn_id": "turn-1", "transcript_path": null,
               "cwd": "/w", "hook_event_name": "PreToolUse", "model": "gpt-5",
               "tool_name": tool, "tool_input": input, "tool_use_id": "call_1"})
    };
    let gemini = |tool: &str, input: Value| {
        json!({"session_id": "sess-1", "transcript_path": "/t.json", "cwd": "/w",
               "hook_event_name": "BeforeTool", "timestamp": "2026-01-01T00:00:00Z",
               "tool_name": tool, "tool_input": input})
    };
    let cursor = |extra: Value| {
        let mut v = json!({"conversation_id": "sess-1", "generation_id": "gen-1",
                           "workspace_roots": ["/w"]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let copilot = |tool: &str, args: &str| json!({"timestamp": 1704614600000u64, "cwd": "/w", "toolName": tool, "toolArgs": args});
    let patch = "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-a\n+b\n*** End Patch\n";
    vec![
        (
            Format::ClaudeCode,
            claude("Bash", json!({"command": "git status"})),
            "Bash",
            json!({"command": "git status"}),
        ),
        (
            Format::ClaudeCode,
            claude(
                "Edit",
                json!({"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"}),
            ),
            "Edit",
            json!({"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"}),
        ),
        (
            Format::ClaudeCode,
            claude("mcp__github__get_issue", json!({"issue_number": 1})),
            "github.get_issue",
            json!({"issue_number": 1}),
        ),
        (
            Format::ClaudeCode,
            claude("WebFetch", json!({"url": "https://docs.rs", "prompt": "x"})),
            "WebFetch",
            json!({"url": "https://docs.rs", "prompt": "x"}),
        ),
        (
            Format::Codex,
            codex("Bash", json!({"command": "cargo test"})),
            "Bash",
            json!({"command": "cargo test"}),
        ),
        (
            Format::Codex,
            codex("apply_patch", json!({"command": patch})),
            "apply_patch",
            json!({"command": patch}),
        ),
        (
            Format::Codex,
            codex("mcp__github__create_issue", json!({"title": "t"})),
            "github.create_issue",
            json!({"title": "t"}),
        ),
        (
            Format::Codex,
            codex("mcp__fetch__fetch", json!({"url": "https://docs.rs"})),
            "fetch.fetch",
            json!({"url": "https://docs.rs"}),
        ),
        (
            Format::Gemini,
            gemini("run_shell_command", json!({"command": "ls -la"})),
            "run_shell_command",
            json!({"command": "ls -la"}),
        ),
        (
            Format::Gemini,
            gemini(
                "write_file",
                json!({"file_path": "/w/a.txt", "content": "x"}),
            ),
            "write_file",
            json!({"file_path": "/w/a.txt", "content": "x"}),
        ),
        (
            Format::Gemini,
            {
                let mut v = gemini("mcp__github__get_issue", json!({"issue_number": 2}));
                v["mcp_context"] =
                    json!({"server_name": "github", "tool_name": "get_issue", "command": "gh-mcp"});
                v
            },
            "github.get_issue",
            json!({"issue_number": 2}),
        ),
        (
            Format::Gemini,
            gemini("web_fetch", json!({"prompt": "summarize https://docs.rs"})),
            "web_fetch",
            json!({"prompt": "summarize https://docs.rs"}),
        ),
        (
            Format::Cursor,
            cursor(
                json!({"hook_event_name": "beforeShellExecution", "command": "npm test", "cwd": "/w"}),
            ),
            "Shell",
            json!({"command": "npm test", "cwd": "/w"}),
        ),
        (
            Format::Cursor,
            cursor(
                json!({"hook_event_name": "preToolUse", "tool_name": "Write", "tool_input": {"file_path": "/w/a.ts", "contents": "x"}, "tool_use_id": "t1"}),
            ),
            "Write",
            json!({"file_path": "/w/a.ts", "contents": "x"}),
        ),
        (
            Format::Cursor,
            cursor(
                json!({"hook_event_name": "beforeMCPExecution", "tool_name": "get_issue", "tool_input": "{\"issue_number\": 3}", "url": "https://mcp.example"}),
            ),
            "mcp.get_issue",
            json!({"issue_number": 3}),
        ),
        (
            Format::Cursor,
            cursor(
                json!({"hook_event_name": "preToolUse", "tool_name": "WebFetch", "tool_input": {"url": "https://docs.rs"}}),
            ),
            "WebFetch",
            json!({"url": "https://docs.rs"}),
        ),
        (
            Format::Copilot,
            copilot("bash", r#"{"command":"git status","description":"status"}"#),
            "bash",
            json!({"command": "git status", "description": "status"}),
        ),
        (
            Format::Copilot,
            copilot("edit", r#"{"path":"/w/a.rs","old_str":"a","new_str":"b"}"#),
            "edit",
            json!({"path": "/w/a.rs", "old_str": "a", "new_str": "b"}),
        ),
        (
            Format::Copilot,
            copilot("github-mcp-server-get_issue", r#"{"issue_number":4}"#),
            "github-mcp-server-get_issue",
            json!({"issue_number": 4}),
        ),
        (
            Format::Copilot,
            copilot("web_fetch", r#"{"url":"https://docs.rs"}"#),
            "web_fetch",
            json!({"url": "https://docs.rs"}),
        ),
    ]
}

#[test]
fn each_runner_input_is_read_per_tool_kind() {
    for (format, input, tool, arguments) in recorded() {
        let call = format
            .parse_input(input.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{format:?} {input}: {e}"));
        assert_eq!(call.tool, tool, "{format:?}");
        assert_eq!(Value::Object(call.arguments), arguments, "{format:?}");
        let run = call.run_id.as_deref();
        let expected = if format == Format::Copilot {
            None
        } else {
            Some("sess-1")
        };
        assert_eq!(run, expected, "{format:?}");
    }
    // Copilot reads a session id when one is sent.
    let with_session = json!({"toolName": "bash", "toolArgs": "{}", "sessionId": "c-1"});
    let call = Format::Copilot
        .parse_input(with_session.to_string().as_bytes())
        .unwrap();
    assert_eq!(
        (call.run_id.as_deref(), call.run_field),
        (Some("c-1"), "sessionId")
    );
    // Claude's PermissionRequest is read as such.
    let pr = json!({"hook_event_name": "PermissionRequest", "tool_name": "Bash",
                    "tool_input": {"command": "x"}, "session_id": "s"});
    let bytes = pr.to_string();
    assert_eq!(
        Format::ClaudeCode
            .parse_input(bytes.as_bytes())
            .unwrap()
            .event,
        Event::PermissionRequest
    );
    assert_eq!(
        Format::ClaudeCode.event_of(bytes.as_bytes()),
        Event::PermissionRequest
    );
}

#[test]
fn malformed_input_is_a_typed_invalid_request() {
    let cases: Vec<(Format, Vec<u8>)> = vec![
        (Format::ClaudeCode, b"not json".to_vec()),
        (Format::ClaudeCode, b"[]".to_vec()),
        (Format::ClaudeCode, br#"{"tool_input":{}}"#.to_vec()),
        (
            Format::ClaudeCode,
            br#"{"tool_name":"Bash","tool_input":"ls"}"#.to_vec(),
        ),
        (
            Format::ClaudeCode,
            br#"{"tool_name":"Bash","session_id":7}"#.to_vec(),
        ),
        (
            Format::ClaudeCode,
            br#"{"tool_name":"Bash","hook_event_name":"PostToolUse"}"#.to_vec(),
        ),
        (
            Format::Codex,
            br#"{"tool_name":"Bash","hook_event_name":"Stop"}"#.to_vec(),
        ),
        (
            Format::Gemini,
            br#"{"tool_name":"x","hook_event_name":"AfterTool"}"#.to_vec(),
        ),
        (
            Format::Gemini,
            br#"{"tool_name":"x","mcp_context":{"server_name":"s"}}"#.to_vec(),
        ),
        (Format::Cursor, br#"{"command":"ls"}"#.to_vec()),
        (
            Format::Cursor,
            br#"{"hook_event_name":"afterFileEdit"}"#.to_vec(),
        ),
        (
            Format::Cursor,
            br#"{"hook_event_name":"beforeMCPExecution","tool_name":"t","tool_input":"[1]"}"#
                .to_vec(),
        ),
        (
            Format::Copilot,
            br#"{"toolName":"bash","toolArgs":"not json"}"#.to_vec(),
        ),
        (Format::Copilot, br#"{"toolArgs":"{}"}"#.to_vec()),
    ];
    for (format, input) in cases {
        let err = format.parse_input(&input).unwrap_err();
        assert_eq!(err.code(), "invalid_request", "{format:?}");
        assert!(!err.to_string().is_empty());
    }
}

fn answer(verdict: Verdict) -> Answer {
    Answer {
        verdict,
        reason: "why".into(),
        warning: None,
    }
}

/// What each runner must get for allow / deny / escalation: the body's
/// decision and the exit code it honours.
#[test]
fn answers_are_rendered_as_each_runner_honours_them() {
    let at = |v: &Value, path: &[&str]| {
        path.iter()
            .fold(v.clone(), |v, k| v[*k].clone())
            .as_str()
            .map(str::to_owned)
    };
    let claude = ["hookSpecificOutput", "permissionDecision"];
    // (format, verdict, where the decision is, the decision, exit code)
    type Row<'a> = (Format, Verdict, &'a [&'a str], Option<&'a str>, u8);
    let table: Vec<Row> = vec![
        (
            Format::ClaudeCode,
            Verdict::Allow,
            &claude,
            Some("allow"),
            0,
        ),
        (Format::ClaudeCode, Verdict::Deny, &claude, Some("deny"), 2),
        (
            Format::ClaudeCode,
            Verdict::Escalated,
            &claude,
            Some("ask"),
            0,
        ),
        (Format::Codex, Verdict::Allow, &claude, None, 0),
        (Format::Codex, Verdict::Deny, &claude, Some("deny"), 2),
        (Format::Codex, Verdict::Escalated, &claude, Some("deny"), 2),
        (
            Format::Gemini,
            Verdict::Allow,
            &["decision"],
            Some("allow"),
            0,
        ),
        (
            Format::Gemini,
            Verdict::Deny,
            &["decision"],
            Some("deny"),
            2,
        ),
        (
            Format::Gemini,
            Verdict::Escalated,
            &["decision"],
            Some("deny"),
            2,
        ),
        (
            Format::Cursor,
            Verdict::Allow,
            &["permission"],
            Some("allow"),
            0,
        ),
        (
            Format::Cursor,
            Verdict::Deny,
            &["permission"],
            Some("deny"),
            0,
        ),
        (
            Format::Cursor,
            Verdict::Escalated,
            &["permission"],
            Some("deny"),
            0,
        ),
        (
            Format::Copilot,
            Verdict::Allow,
            &["permissionDecision"],
            Some("allow"),
            0,
        ),
        (
            Format::Copilot,
            Verdict::Deny,
            &["permissionDecision"],
            Some("deny"),
            0,
        ),
        (
            Format::Copilot,
            Verdict::Escalated,
            &["permissionDecision"],
            Some("deny"),
            0,
        ),
    ];
    for (format, verdict, path, decision, exit) in table {
        let r = format.render(Event::PreToolUse, &answer(verdict));
        assert_eq!(
            at(&r.body, path).as_deref(),
            decision,
            "{format:?} {verdict:?}"
        );
        assert_eq!(r.exit_code, exit, "{format:?} {verdict:?}");
        assert_eq!(r.stderr.is_some(), verdict != Verdict::Allow, "{format:?}");
        // Read back (what the CLI relays), the exit code is the same.
        let read = format.read_output(&r.body).unwrap();
        assert_eq!(
            (read.exit_code, &read.body),
            (exit, &r.body),
            "{format:?} {verdict:?}"
        );
    }
    // PermissionRequest has no ask: an escalation denies, exit 2.
    let r = Format::ClaudeCode.render(Event::PermissionRequest, &answer(Verdict::Escalated));
    assert_eq!(r.body["hookSpecificOutput"]["decision"]["behavior"], "deny");
    assert_eq!(
        Format::ClaudeCode.read_output(&r.body).unwrap().exit_code,
        2
    );
    // Garbage is no answer: the caller denies.
    for format in Format::ALL {
        for body in [
            json!(null),
            json!([]),
            json!({"permission": "maybe"}),
            json!("allow"),
        ] {
            assert!(format.read_output(&body).is_none(), "{format:?} {body}");
        }
    }
}

#[test]
fn a_decision_becomes_an_answer_naming_it() {
    let response = |extra: Value| -> AuthorizeResponse {
        let mut v = json!({"decision_id": "d-1", "verdict": "allow", "reason": "allow_rule"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    };
    let allow = Answer::from_response(&response(json!({})));
    assert_eq!(allow.verdict, Verdict::Allow);
    assert!(allow.reason.contains("allow_rule") && allow.reason.contains("d-1"));
    let warned = Answer::from_response(&response(json!({"warning": "would deny"})));
    assert_eq!(warned.warning.as_deref(), Some("would deny"));
    let deny = Answer::from_response(&response(json!({"verdict": "deny", "reason": "deny_rule"})));
    assert_eq!(deny.verdict, Verdict::Deny);
    let esc = Answer::from_response(&response(
        json!({"verdict": "escalate", "reason": "escalate_rule", "approval_id": "0190-ab"}),
    ));
    assert_eq!(esc.verdict, Verdict::Escalated);
    assert!(
        esc.reason.contains("approval_required: approval 0190-ab "),
        "{}",
        esc.reason
    );
    assert!(
        esc.reason.contains("kubectl toolgate approve apr-0190-ab"),
        "{}",
        esc.reason
    );
    // A verdict this build does not know denies.
    let odd = Answer::from_response(&response(json!({"verdict": "maybe"})));
    assert_eq!(odd.verdict, Verdict::Deny);
    assert_eq!(Format::parse("codex"), Some(Format::Codex));
    assert_eq!(Format::parse("Codex"), None);
}
