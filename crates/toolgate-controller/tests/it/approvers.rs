//! Who may decide an Approval: a request answers to the approvers of its
//! row's tenant's PolicyProfile, a grant to its own profile's; a decision
//! by anyone else leaves it Pending, and a missing profile fails closed.

use std::sync::Arc;
use std::time::Duration;

use crate::common::approvals::{
    TEAM_A_PROFILE, decided, grant, grant_by, pending_row, record_version,
};
use crate::common::*;
use http::Method;
use toolgate_controller::approval;
use toolgate_controller::crd::Approval;
use toolgate_store::ApprovalStatus as DbStatus;

#[tokio::test]
async fn grant_objects_map_to_their_profile() {
    let a: Approval =
        serde_json::from_value(grant("g", Some("approved"), "2030-01-02T00:00:00Z")).unwrap();
    let r = approval::grant_profile_ref(&a).unwrap();
    assert_eq!(
        (r.name.as_str(), r.namespace.as_deref()),
        ("safe-coding", Some(NS))
    );
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    run(approval::reconcile(Arc::new(a), ctx), async move {
        // The approvers check reads the grant's profile.
        server
            .expect(Method::GET, &format!("{PROFILES}/safe-coding"))
            .await
            .respond(200, profile_json());
        let st =
            expect_applied_status(&mut server, &format!("{APPROVALS}/g/status"), "Approval").await;
        assert_eq!(st.body["status"]["phase"], "Approved");
        assert_eq!(st.body["status"]["profile"], "safe-coding");
        assert!(st.body["status"]["finishedAt"].is_string());
        st.echo_status(approval_json("g"));
    })
    .await
    .unwrap();

    // A grant its requester approved without being an approver stays
    // Pending and says why.
    let a: Approval = serde_json::from_value(grant_by(
        "g",
        Some("approved"),
        "2030-01-02T00:00:00Z",
        "mallory",
        &[],
    ))
    .unwrap();
    let (client, mut server) = mock_client();
    let ctx = context(client, store().await, now());
    run(approval::reconcile(Arc::new(a), ctx), async move {
        server
            .expect(Method::GET, &format!("{PROFILES}/safe-coding"))
            .await
            .respond(200, profile_json());
        let st =
            expect_applied_status(&mut server, &format!("{APPROVALS}/g/status"), "Approval").await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        let message = st.body["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("ApproverNotAllowed: `mallory`"),
            "{message}"
        );
        assert!(st.body["status"].get("finishedAt").is_none());
        st.echo_status(approval_json("g"));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn only_listed_approvers_can_resolve_a_request() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    // The profile that answers is the row's tenant's (team-a), not one in
    // the approvals namespace where the request object is, nor one in
    // another namespace that recorded the same version.
    record_version(&store, "team-b", &row.policy_version).await;
    let name = approval::approval_name(&row.id);

    // Refused: a stranger, nobody, and a user who is merely *named* like
    // the approvers group (the check used to compare usernames only).
    for (by, groups) in [
        (Some("mallory"), &["system:authenticated"][..]),
        (None, &[][..]),
        (Some("platform-oncall"), &[][..]),
    ] {
        let (client, mut server) = mock_client();
        let ctx = context(client, store.clone(), jiff::Timestamp::now());
        let n2 = name.clone();
        let action = run(
            approval::reconcile(Arc::new(decided(&row, by, groups)), ctx),
            async move {
                // safe-coding: approvers: [platform-oncall]
                server
                    .expect(Method::GET, TEAM_A_PROFILE)
                    .await
                    .respond(200, profile_json());
                let ev = server.event().await;
                assert_eq!(
                    (ev["type"].as_str(), ev["reason"].as_str()),
                    (Some("Warning"), Some("ApproverNotAllowed"))
                );
                let st = expect_applied_status(
                    &mut server,
                    &format!("{APPROVALS}/{n2}/status"),
                    "Approval",
                )
                .await;
                assert_eq!(st.body["status"]["phase"], "Pending");
                let msg = st.body["status"]["message"].as_str().unwrap();
                assert!(msg.starts_with("ApproverNotAllowed: "), "{msg}");
                assert!(msg.contains("platform-oncall"), "{msg}");
                st.echo_status(approval_json(&n2));
            },
        )
        .await
        .unwrap();
        assert_ne!(action, kube::runtime::controller::Action::await_change());
        let db = store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
            .await
            .unwrap();
        assert_eq!(
            db.status,
            DbStatus::Pending,
            "{by:?} must not resolve the row"
        );
    }

    // A member of the approvers group resolves it.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(
        approval::reconcile(
            Arc::new(decided(&row, Some("carol"), &["platform-oncall"])),
            ctx,
        ),
        async move {
            server
                .expect(Method::GET, TEAM_A_PROFILE)
                .await
                .respond(200, profile_json());
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            st.echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        (db.status, db.resolved_by.as_deref()),
        (DbStatus::Approved, Some("carol"))
    );
}

#[tokio::test]
async fn approvers_are_enforced_fail_closed() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    let mut open = profile(1, true);
    open.spec.approvals.as_mut().unwrap().approvers.clear();
    let open = serde_json::to_value(open).unwrap();

    // The row's tenant has no such profile: the decision is not recorded.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(
        approval::reconcile(Arc::new(decided(&row, Some("alice"), &[])), ctx),
        async move {
            server.expect(Method::GET, TEAM_A_PROFILE).await.not_found();
            assert_eq!(server.event().await["reason"], "ApproverNotAllowed");
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Pending");
            assert!(
                st.body["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("not found")
            );
            st.echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    assert_eq!(
        store
            .approvals()
            .get("team-a", &row.id, jiff::Timestamp::now())
            .await
            .unwrap()
            .status,
        DbStatus::Pending
    );

    // A profile with an empty approvers list lets anyone answer.
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    run(
        approval::reconcile(Arc::new(decided(&row, Some("alice"), &[])), ctx),
        async move {
            server
                .expect(Method::GET, TEAM_A_PROFILE)
                .await
                .respond(200, open);
            let st =
                expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                    .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            st.echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    assert!(approval::approver_allowed(&[], None, &[]));
    assert!(!approval::approver_allowed(&["a".into()], None, &[]));
    assert!(!approval::approver_allowed(&["a".into()], Some("A"), &[]));
    assert!(approval::approver_allowed(
        &["a".into(), "b".into()],
        Some("b"),
        &[]
    ));
}
