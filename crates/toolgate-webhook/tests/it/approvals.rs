//! The Approval validating webhook over real HTTPS: decisions are final
//! and attributed to the authenticated user, and an Approval's kind
//! (request or standing grant) never changes.

use crate::common::{CONTROLLER_USER, fixture_json, native_server, review};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_validated_and_decisions_are_final() {
    let server = native_server().await;
    let mut client = server.client().await;

    let change = fixture_json("approval-decision-change.json");
    let response = review(&mut client, "/validate-approvals", &change).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["reason"], "approval_immutable");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.decision: the approval was already resolved as \"denied\""),
        "{message}"
    );

    let mut removed = change.clone();
    removed["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("decision");
    let response = review(&mut client, "/validate-approvals", &removed).await;
    assert_eq!(response["status"]["reason"], "approval_immutable");

    let resolve = fixture_json("approval-resolve.json");
    let response = review(&mut client, "/validate-approvals", &resolve).await;
    assert_eq!(response["allowed"], true, "{response}");

    // The decision must name the user the API server authenticated.
    let mut spoofed = resolve.clone();
    spoofed["request"]["object"]["spec"]["decidedBy"] = json!("platform-oncall");
    let response = review(&mut client, "/validate-approvals", &spoofed).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "approval_invalid");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.decidedBy: "),
        "{response}"
    );

    // Groups count for `group:` approvers only when the API server
    // authenticated the decider in them.
    let mut grouped = resolve.clone();
    grouped["request"]["userInfo"]["groups"] = json!(["system:authenticated", "platform-oncall"]);
    grouped["request"]["object"]["spec"]["decidedByGroups"] = json!(["platform-oncall"]);
    let response = review(&mut client, "/validate-approvals", &grouped).await;
    assert_eq!(response["allowed"], true, "{response}");
    let mut borrowed = grouped.clone();
    borrowed["request"]["userInfo"]["groups"] = json!(["system:authenticated"]);
    let response = review(&mut client, "/validate-approvals", &borrowed).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.decidedByGroups[0]: "),
        "{response}"
    );

    // Once decided, a refused approver cannot re-attribute the decision to
    // an allowed name, nor add groups.
    let mut recorded = resolve.clone();
    recorded["request"]["oldObject"] = resolve["request"]["object"].clone();
    recorded["request"]["userInfo"] =
        json!({"username": "platform-oncall", "groups": ["platform-oncall"]});
    for (field, value) in [
        ("decidedBy", json!("platform-oncall")),
        ("decidedByGroups", json!(["platform-oncall"])),
    ] {
        let mut forged = recorded.clone();
        forged["request"]["object"]["spec"][field] = value;
        let response = review(&mut client, "/validate-approvals", &forged).await;
        assert_eq!(response["allowed"], false, "{response}");
        assert_eq!(response["status"]["reason"], "approval_immutable");
        assert!(
            response["status"]["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("spec.{field}: ")),
            "{response}"
        );
    }

    // Issue 46, item 2: someone who is not an approver of the request's
    // profile (agents/safe-coding: bob and group:platform-oncall) may not
    // decide, even as themselves: the decision would stick, unrecorded.
    let mut outsider = resolve.clone();
    outsider["request"]["userInfo"] = json!({"username": "mallory", "groups": ["helpers"]});
    outsider["request"]["object"]["spec"]["decidedBy"] = json!("mallory");
    outsider["request"]["object"]["spec"]["decidedByGroups"] = json!(["helpers"]);
    let response = review(&mut client, "/validate-approvals", &outsider).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "approver_not_allowed");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.decision: `mallory` (groups helpers) is not in spec.approvals.approvers of PolicyProfile agents/safe-coding"),
        "{message}"
    );
    // ... and a profile the webhook cannot find refuses every decision.
    let mut elsewhere = resolve.clone();
    for object in ["object", "oldObject"] {
        elsewhere["request"][object]["spec"]["request"]["tenant"] = json!("other");
    }
    let response = review(&mut client, "/validate-approvals", &elsewhere).await;
    assert_eq!(
        response["status"]["reason"], "approver_not_allowed",
        "{response}"
    );
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("not found"),
        "{response}"
    );

    let mut maybe = resolve.clone();
    maybe["request"]["object"]["spec"]["decision"] = json!("maybe");
    let response = review(&mut client, "/validate-approvals", &maybe).await;
    assert_eq!(response["status"]["reason"], "approval_invalid");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.decision:")
    );

    let mut both = resolve.clone();
    both["request"]["operation"] = json!("CREATE");
    both["request"]["object"]["spec"]["grant"] = json!({"tool": "bash", "glob": "git *"});
    let response = review(&mut client, "/validate-approvals", &both).await;
    assert_eq!(response["status"]["reason"], "approval_invalid");
    server.stop().await;
}

/// Issue 32, item 7: a pending request cannot be turned into a standing
/// grant (nor a grant into a request) by an UPDATE that removes one and adds
/// the other; the row behind the request could then never be decided. The
/// request's own fields stay as mirrored, decided or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approvals_kind_cannot_change() {
    let server = native_server().await;
    let mut client = server.client().await;
    let pending = fixture_json("approval-resolve.json");
    let grant = json!({"profile": "baseline", "tool": "bash", "glob": "git *",
                       "expiresAt": "2030-01-02T00:00:00Z"});

    // Request → grant, undecided and decided.
    let mut to_grant = pending.clone();
    let spec = to_grant["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap();
    spec.remove("request");
    spec.remove("decision");
    spec.remove("decidedBy");
    spec.insert("grant".into(), grant.clone());
    let response = review(&mut client, "/validate-approvals", &to_grant).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "approval_immutable");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.request: an Approval stays a request or a grant"),
        "{message}"
    );
    let mut decided_grant = to_grant.clone();
    decided_grant["request"]["object"]["spec"]["decision"] = json!("approved");
    decided_grant["request"]["object"]["spec"]["decidedBy"] = json!("bob@example.com");
    let response = review(&mut client, "/validate-approvals", &decided_grant).await;
    assert_eq!(
        response["status"]["reason"], "approval_immutable",
        "{response}"
    );

    // Grant → request.
    let mut to_request = pending.clone();
    to_request["request"]["oldObject"]["spec"] = json!({"grant": grant});
    to_request["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("decision");
    to_request["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("decidedBy");
    let response = review(&mut client, "/validate-approvals", &to_request).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "approval_immutable");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.request: "),
        "{response}"
    );

    // A pending request's call cannot be edited either.
    let mut edited = pending.clone();
    edited["request"]["object"]["spec"]["request"]["tool"] = json!("fs.delete");
    let response = review(&mut client, "/validate-approvals", &edited).await;
    assert_eq!(
        response["status"]["reason"], "approval_immutable",
        "{response}"
    );

    // Deciding it as it is still works.
    let response = review(&mut client, "/validate-approvals", &pending).await;
    assert_eq!(response["allowed"], true, "{response}");
    server.stop().await;
}

/// Issue 46, item 1: request Approvals mirror database rows, so only the
/// controller creates them. Anyone else's request object — say, one showing
/// a harmless preview under the id of a destructive call — is refused at
/// admission; standing grants are still written by people.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_controller_creates_requests() {
    let server = native_server().await;
    let mut client = server.client().await;
    let mut create = fixture_json("approval-resolve.json");
    let review_req = create["request"].as_object_mut().unwrap();
    review_req.insert("operation".into(), json!("CREATE"));
    review_req.remove("oldObject");
    let spec = create["request"]["object"]["spec"].as_object_mut().unwrap();
    for decided in ["decision", "decidedBy", "decidedByGroups", "reason"] {
        spec.remove(decided);
    }
    create["request"]["userInfo"] =
        json!({"username": "mallory", "groups": ["system:authenticated"]});
    let response = review(&mut client, "/validate-approvals", &create).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "request_not_from_controller");
    assert_eq!(response["status"]["code"], 403);

    let mut anonymous = create.clone();
    anonymous["request"]
        .as_object_mut()
        .unwrap()
        .remove("userInfo");
    let response = review(&mut client, "/validate-approvals", &anonymous).await;
    assert_eq!(response["allowed"], false, "{response}");

    let mut mirrored = create.clone();
    mirrored["request"]["userInfo"] = json!({"username": CONTROLLER_USER, "groups": []});
    let response = review(&mut client, "/validate-approvals", &mirrored).await;
    assert_eq!(response["allowed"], true, "{response}");

    // A standing grant is people's to write, under any name but the
    // mirror's: one squatting `apr-<id>` would turn an approver's "approve
    // apr-<id>" of one call into a standing permission.
    let mut grant = create.clone();
    let spec = grant["request"]["object"]["spec"].as_object_mut().unwrap();
    spec.remove("request");
    spec.insert(
        "grant".into(),
        json!({"profile": "baseline", "tool": "bash", "glob": "*",
               "expiresAt": "2030-01-02T00:00:00Z"}),
    );
    assert!(
        grant["request"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("apr-")),
        "{grant}"
    );
    let response = review(&mut client, "/validate-approvals", &grant).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["reason"], "request_not_from_controller");
    for (name, generate) in [("grant-bash", None), ("", Some("apr-"))] {
        let mut named = grant.clone();
        named["request"]["name"] = json!(name);
        named["request"]["object"]["metadata"]["name"] = json!(name);
        if let Some(prefix) = generate {
            named["request"]["object"]["metadata"]["generateName"] = json!(prefix);
        }
        let response = review(&mut client, "/validate-approvals", &named).await;
        assert_eq!(
            response["allowed"],
            generate.is_none(),
            "{name:?} {generate:?}: {response}"
        );
    }
    server.stop().await;
}
