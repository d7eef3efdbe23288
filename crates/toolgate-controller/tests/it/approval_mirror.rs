//! The approvals mirror: pending rows in the database become Approval
//! objects, a decision on an object resolves its row, expiry reaches both,
//! and look-alike objects outside the mirror namespace resolve nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::common::approvals::{
    FLOW_RULE, POLICY_VERSION, TEAM_A_PROFILE, as_object, decided, pending_row, record_version,
};
use crate::common::*;
use http::Method;
use jiff::SignedDuration;
use serde_json::json;
use toolgate_controller::approval;
use toolgate_controller::crd::Approval;
use toolgate_store::ApprovalStatus as DbStatus;

#[tokio::test]
async fn mirror_creates_objects_and_a_decision_resolves_the_row() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    assert_eq!(
        name,
        "apr-01j0approval-".to_owned()
            + &toolgate_policy::digest::sha256_hex(row.id.as_bytes())[..8]
    );

    // Database → cluster.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    let report = run(approval::sync_once(&ctx, &[], &[]), async move {
        let create = server.expect(Method::POST, APPROVALS).await;
        assert_eq!(create.body["metadata"]["name"], n2.as_str());
        let req = &create.body["spec"]["request"];
        assert_eq!(
            (
                req["approvalId"].as_str(),
                req["tenant"].as_str(),
                req["tool"].as_str()
            ),
            (Some("01J0APPROVAL"), Some("team-a"), Some("bash"))
        );
        assert_eq!(req["profile"], "safe-coding");
        // The why travels with the request: reason, rule and policy version
        // of the escalating decision, the flow label with the call that set
        // it, and the run's earlier decisions, oldest first, masked.
        let why = &req["escalation"];
        assert_eq!(why["decisionId"], "dec-1");
        assert_eq!(why["reason"], "flow_escalate");
        assert_eq!(why["matchedRule"], FLOW_RULE);
        assert_eq!(req["policyVersion"], POLICY_VERSION);
        assert_eq!(why["flowLabels"][0]["label"], "private");
        assert_eq!(why["flowLabels"][0]["tool"], "read_file");
        assert_eq!(why["flowLabels"][0]["decisionId"], "dec-label");
        let history = why["history"].as_array().unwrap();
        assert_eq!(history.len(), 2, "{why}");
        assert_eq!(
            (history[0]["tool"].as_str(), history[0]["verdict"].as_str()),
            (Some("shell"), Some("deny"))
        );
        assert_eq!(history[0]["matchedRule"], "token=****");
        assert_eq!(history[1]["tool"], "read_file");
        assert!(create.body["spec"].get("decision").is_none());
        let mut obj = create.body.clone();
        obj["metadata"]["uid"] = json!("uid-apr");
        obj["metadata"]["generation"] = json!(1);
        create.respond(201, obj);
        let st =
            expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                .await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        assert_eq!(st.body["status"]["requestedBy"], "sidecar/agent-0");
        st.echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!(report.created, 1);

    // An approver of the profile approves: the row is resolved, the phase follows.
    let mut obj = approval::object_for(&row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Approved);
    obj.spec.reason = Some("looks fine".into());
    obj.spec.decided_by = Some("carol".into());
    obj.spec.decided_by_groups = Some(vec!["platform-oncall".into()]);
    let obj: Approval = serde_json::from_value(as_object(&obj)).unwrap();
    for round in 0..2 {
        // Twice: resolving is idempotent.
        let (client, mut server) = mock_client();
        let ctx = context(client, store.clone(), jiff::Timestamp::now());
        let n2 = name.clone();
        let mut o = obj.clone();
        if round == 1 {
            o.status = None;
        }
        run(approval::reconcile(Arc::new(o), ctx), async move {
            if round == 0 {
                // The approvers check reads the profile (pending row only).
                server
                    .expect(Method::GET, TEAM_A_PROFILE)
                    .await
                    .respond(200, profile_json());
            }
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            assert_eq!(st.body["status"]["message"], "approved by carol");
            st.echo_status(approval_json(&n2));
        })
        .await
        .unwrap();
    }
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, DbStatus::Approved);
    assert_eq!(db.resolved_by.as_deref(), Some("carol"));
    assert_eq!(db.reason.as_deref(), Some("looks fine"));
}

#[tokio::test]
async fn a_denial_after_expiry_is_reported_as_expired() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut obj = approval::object_for(&row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Denied);
    let obj: Approval = serde_json::from_value(as_object(&obj)).unwrap();
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let name = obj.metadata.name.clone().unwrap();
    run(approval::reconcile(Arc::new(obj), ctx), async move {
        let st = expect_applied_status(
            &mut server,
            &format!("{APPROVALS}/{name}/status"),
            "Approval",
        )
        .await;
        assert_eq!(st.body["status"]["phase"], "Expired");
        st.echo_status(approval_json(&name));
    })
    .await
    .unwrap();
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
            .await
            .unwrap()
            .status,
        DbStatus::Expired
    );
}

#[tokio::test]
async fn expiry_moves_database_and_object_to_expired() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(60)).await;
    let mut obj = approval::object_for(&row, NS);
    obj.status = Some(approval::request_status(
        obj.spec.request.as_ref().unwrap(),
        Some(&row),
        toolgate_controller::crd::Phase::Pending,
        None,
        Some(1),
    ));
    let obj: Approval = serde_json::from_value(as_object(&obj)).unwrap();

    // Ten minutes later the sweep expires the row and the object follows.
    let (client, mut server) = mock_client();
    let ctx = context(
        client,
        store.clone(),
        jiff::Timestamp::now() + SignedDuration::from_mins(10),
    );
    let name = obj.metadata.name.clone().unwrap();
    let report = run(
        approval::sync_once(&ctx, &[Arc::new(obj)], &[]),
        async move {
            let st = expect_applied_status(
                &mut server,
                &format!("{APPROVALS}/{name}/status"),
                "Approval",
            )
            .await;
            assert_eq!(st.body["status"]["phase"], "Expired");
            st.echo_status(approval_json(&name));
        },
    )
    .await
    .unwrap();
    assert_eq!((report.expired, report.updated, report.created), (1, 1, 0));
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
            .await
            .unwrap()
            .status,
        DbStatus::Expired
    );
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains(r#"toolgate_approvals{phase="Pending"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn request_approvals_outside_the_mirror_namespace_resolve_nothing() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    record_version(&store, NS, &row.policy_version).await;
    // A look-alike object in another namespace, naming the same row and an
    // allowed approver.
    let mut forged = decided(&row, Some("carol"), &["platform-oncall"]);
    forged.metadata.namespace = Some("elsewhere".into());
    let name = approval::approval_name(&row.id);
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(approval::reconcile(Arc::new(forged), ctx), async move {
        let st = server
            .expect(
                Method::PATCH,
                &format!("/apis/toolgate.dev/v1alpha1/namespaces/elsewhere/approvals/{n2}/status"),
            )
            .await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        let msg = st.body["status"]["message"].as_str().unwrap();
        assert!(msg.starts_with("ignored: "), "{msg}");
        st.echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, DbStatus::Pending, "the row is untouched");
}

/// A row whose escalating decision is not in the log yet (most records are
/// written in the background, just after the row) is not mirrored at once:
/// the why is part of the immutable request. Past the wait it is mirrored
/// without one.
#[tokio::test]
async fn the_mirror_waits_a_little_for_the_escalating_decision() {
    let store = store().await;
    let now = jiff::Timestamp::now();
    let row = store
        .approvals()
        .request(
            toolgate_store::NewApproval {
                approval_id: Some("01J0NORECORD".into()),
                invocation_id: "inv-nr".into(),
                tenant: "team-a".into(),
                run_id: "run-9".into(),
                tool: "bash".into(),
                args_digest: "sha256:abc".into(),
                call_digest: None,
                policy_version: POLICY_VERSION.into(),
                decision_id: "dec-missing".into(),
                requested_by: "sidecar:team-a/agent-0".into(),
                ttl: Duration::from_secs(900),
                action: None,
                preview: None,
            },
            now,
        )
        .await
        .unwrap();
    let (client, _server) = mock_client();
    let ctx = context(client, store.clone(), now + SignedDuration::from_secs(2));
    let report = run(approval::sync_once(&ctx, &[], &[]), async {})
        .await
        .unwrap();
    assert_eq!(report.created, 0, "waits for the record");

    let (client, mut server) = mock_client();
    let later = now + approval::WAIT_FOR_RECORD + SignedDuration::from_secs(1);
    let ctx = context(client, store.clone(), later);
    let name = approval::approval_name(&row.id);
    let report = run(approval::sync_once(&ctx, &[], &[]), async move {
        let create = server.expect(Method::POST, APPROVALS).await;
        assert!(create.body["spec"]["request"].get("escalation").is_none());
        let mut obj = create.body.clone();
        obj["metadata"]["uid"] = json!("uid-apr");
        create.respond(201, obj);
        let st = expect_applied_status(
            &mut server,
            &format!("{APPROVALS}/{name}/status"),
            "Approval",
        )
        .await;
        st.echo_status(approval_json(&name));
    })
    .await
    .unwrap();
    assert_eq!(report.created, 1);
}
