//! The approvals mirror: pending rows in the database become Approval
//! objects, a decision on an object resolves its row, expiry reaches both,
//! and look-alike objects outside the mirror namespace resolve nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::common::approvals::{TEAM_A_PROFILE, as_object, decided, pending_row, record_version};
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
