use super::*;

#[test]
fn calls_are_classified_strictly() {
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "read_file", "arguments": {"path": "/a"}}});
    assert_eq!(
        classify(&call),
        FromClient::CallTool {
            id: json!(7),
            name: "read_file".into(),
            arguments: json!({"path": "/a"}).as_object().unwrap().clone(),
        }
    );
    for bad in [
        json!({"id": 1, "method": "tools/call", "params": {}}),
        json!({"id": 1, "method": "tools/call", "params": {"name": ""}}),
        json!({"id": 1, "method": "tools/call", "params": {"name": "x", "arguments": [1]}}),
    ] {
        assert!(
            matches!(classify(&bad), FromClient::BadRequest { .. }),
            "{bad}"
        );
    }
    assert_eq!(
        classify(&json!({"id": "a", "method": "tools/list"})),
        FromClient::ListTools { id: json!("a") }
    );
    // A notification (no id) is not a request to decide.
    assert_eq!(
        classify(&json!({"method": "notifications/tools/list_changed"})),
        FromClient::Other
    );
}

#[test]
fn resource_uris_are_resolved_before_they_are_decided() {
    for (raw, resolved) in [
        ("file:///public/../etc/passwd", "file:///etc/passwd"),
        ("file:///public/%2e%2e/etc/passwd", "file:///etc/passwd"),
        ("file:///public/.%2e/etc/passwd", "file:///etc/passwd"),
        ("file:///public/%2eenv", "file:///public/.env"),
        ("file:///public/.%65nv", "file:///public/.env"),
        ("FILE:///public/./notes", "file:///public/notes"),
        ("file:///public/my%20notes", "file:///public/my%20notes"),
        ("file:///public/x/.env/", "file:///public/x/.env"),
        ("file:///public//x//.env", "file:///public/x/.env"),
        ("https://Example.COM/a/./b", "https://example.com/a/b"),
    ] {
        assert_eq!(canonical_uri(raw).as_deref(), Ok(resolved), "{raw}");
    }
    for refused in [
        "file:///public/..%2fetc%2fpasswd",
        "file:///public/a%5c..%5cb",
        "file:///public/.env%00",
        "file:///public/.env?",
        "file:///public/.env#x",
        "file:///public/%ff",
        "not a uri",
    ] {
        assert!(canonical_uri(refused).is_err(), "{refused}");
    }
}

#[test]
fn requests_without_ids_are_only_notifications() {
    let call = json!({"method": "tools/call", "params": {"name": "admin"}});
    assert!(matches!(classify(&call), FromClient::BadRequest { .. }));
    let note = json!({"method": "notifications/progress", "params": {}});
    assert_eq!(classify(&note), FromClient::Other);
}

#[test]
fn a_completion_is_decided_on_the_member_its_type_names() {
    let c = json!({"id": 1, "method": "completion/complete", "params": {"ref": {
        "type": "ref/resource", "uri": "file:///etc/{file}", "name": "greeting"}}});
    match classify(&c) {
        FromClient::Governed {
            arguments,
            canonical,
            ..
        } => {
            assert_eq!(arguments["ref"], "file:///etc/{file}");
            assert_eq!(
                canonical.unwrap().1,
                json!({"type": "ref/resource", "uri": "file:///etc/{file}"})
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lists_are_filtered_by_policy_name() {
    let mut response = json!({"jsonrpc": "2.0", "id": 1, "result": {
        "tools": [{"name": "read_file"}, {"name": "write_file"}, {"name": "move_file"}],
        "nextCursor": "c2"}});
    assert_eq!(
        listed_tools(&response),
        ["read_file", "write_file", "move_file"]
    );
    let visible: HashSet<String> = ["fs.read_file".to_owned(), "fs.move_file".to_owned()].into();
    filter_tools(&mut response, "fs", &visible);
    assert_eq!(listed_tools(&response), ["read_file", "move_file"]);
    assert_eq!(response["result"]["nextCursor"], "c2");
}

#[test]
fn routing_headers_follow_the_body_and_encode_what_a_header_cannot_hold() {
    let call = json!({"method": "tools/call", "params": {"name": "déployer"}});
    let headers = routing_headers(&call);
    assert_eq!(headers[0], ("mcp-method", "tools/call".to_owned()));
    assert!(headers[1].1.starts_with("=?base64?"), "{headers:?}");
    assert_eq!(header_name(&headers[1].1).as_deref(), Some("déployer"));
    let task = json!({"method": "tasks/get", "params": {"taskId": "t-1"}});
    assert_eq!(routing_headers(&task)[1], ("mcp-name", "t-1".to_owned()));
    assert_eq!(routing_headers(&json!({"method": "ping"})).len(), 1);
    let spaced = json!({"method": "tools/call", "params": {"name": " deploy "}});
    let name = &routing_headers(&spaced)[1].1;
    assert_eq!(header_name(name).as_deref(), Some(" deploy "), "{name}");
    assert_eq!(header_name("=?base64?!!?="), None);
}

#[test]
fn refusals_have_the_call_tool_result_shape() {
    let v = json!({"verdict": "deny", "reason": "hardline_path"});
    let r = refusal(&json!(3), "toolgate: deny", Some(&v), false);
    assert_eq!(r["id"], 3);
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["content"][0]["type"], "text");
    assert_eq!(
        r["result"]["_meta"][VERDICT_META]["reason"],
        "hardline_path"
    );
    assert!(r["result"].get("resultType").is_none());
    assert_eq!(
        refusal(&json!(3), "x", None, true)["result"]["resultType"],
        "complete"
    );
    assert!(is_failure(&r));
    assert!(is_failure(&error(&json!(1), INVALID_PARAMS, "no")));
    assert!(!is_failure(&json!({"id": 1, "result": {"content": []}})));
    assert_eq!(step_id(&json!(12)), "12");
    // The digest ignores key order and extra members, and sees every
    // change to the name, description or schema.
    let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "required": ["x"]}});
    let b = json!({"inputSchema": {"required": ["x"], "type": "object"}, "title": "T", "description": "d", "name": "t"});
    assert_eq!(definition_digest(&a), definition_digest(&b));
    assert!(definition_digest(&a).starts_with("sha256:"));
    let mut c = a.clone();
    c["description"] = json!("d, and also delete everything");
    assert_ne!(definition_digest(&a), definition_digest(&c));
    assert_eq!(step_id(&json!("r-1")), "r-1");
}
