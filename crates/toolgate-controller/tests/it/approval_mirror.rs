//! The approvals mirror: pending rows in the database become Approval
//! objects, a decision on an object resolves its row, expiry reaches both,
//! and look-alike objects outside the mirror namespace resolve nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::common::approvals::{
    FLOW_RULE, POLICY_VERSION, TEAM_A_PROFILE, as_object, decided, grant, pending_row,
    record_version,
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

/// Per-tenant placement (the default): team-a's row becomes an object in
/// namespace team-a, and an object in team-b naming the same row, even
/// decided by an approver, answers nothing.
#[tokio::test]
async fn each_tenant_s_approvals_live_in_its_own_namespace() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    record_version(&store, "team-a", &row.policy_version).await;
    let name = approval::approval_name(&row.id);
    let home = "/apis/toolgate.dev/v1alpha1/namespaces/team-a/approvals";
    let (client, mut server) = mock_client();
    let ctx = context_placed(
        client,
        store.clone(),
        jiff::Timestamp::now(),
        approval::Placement::per_tenant(NS),
    );
    let n2 = name.clone();
    let report = run(approval::sync_once(&ctx, &[], &[]), async move {
        let create = server.expect(Method::POST, home).await;
        assert_eq!(create.body["metadata"]["namespace"], "team-a");
        let mut obj = create.body.clone();
        obj["metadata"]["uid"] = json!("uid-apr");
        create.respond(201, obj);
        expect_applied_status(&mut server, &format!("{home}/{n2}/status"), "Approval")
            .await
            .echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!(report.created, 1);

    let mut forged = decided(&row, Some("carol"), &["platform-oncall"]);
    forged.metadata.namespace = Some("team-b".into());
    let (client, mut server) = mock_client();
    let ctx = context_placed(
        client,
        store.clone(),
        jiff::Timestamp::now(),
        approval::Placement::per_tenant(NS),
    );
    let n2 = name.clone();
    run(approval::reconcile(Arc::new(forged), ctx), async move {
        let st = server
            .expect(
                Method::PATCH,
                &format!("/apis/toolgate.dev/v1alpha1/namespaces/team-b/approvals/{n2}/status"),
            )
            .await;
        let msg = st.body["status"]["message"].as_str().unwrap();
        assert!(msg.contains("honoured only in namespace team-a"), "{msg}");
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

/// An object in the right namespace whose request shows another call than
/// the row (a harmless preview over a destructive call) resolves nothing.
#[tokio::test]
async fn a_request_that_misrepresents_its_row_is_ignored() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    record_version(&store, NS, &row.policy_version).await;
    let mut lying = decided(&row, Some("carol"), &["platform-oncall"]);
    lying.spec.request.as_mut().unwrap().preview = Some("ls -la".into());
    let name = approval::approval_name(&row.id);
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    run(approval::reconcile(Arc::new(lying), ctx), async move {
        let st = server
            .expect(Method::PATCH, &format!("{APPROVALS}/{name}/status"))
            .await;
        assert_eq!(st.body["status"]["phase"], "Pending");
        let msg = st.body["status"]["message"].as_str().unwrap();
        assert!(msg.contains("spec.request.preview differs"), "{msg}");
        st.echo_status(approval_json(&name));
    })
    .await
    .unwrap();
    let db = store
        .approvals()
        .get("team-a", &row.id, jiff::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(db.status, DbStatus::Pending);
}

/// Migration: an undecided request in the old queue ("agents" here) is
/// deleted once its copy is home, conditionally on the object as read; a
/// decided one stays, and is still honoured.
#[tokio::test]
async fn undecided_requests_move_out_of_the_old_queue() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    let mut old: Approval =
        serde_json::from_value(as_object(&approval::object_for(&row, NS))).unwrap();
    old.metadata.resource_version = Some("41".into());
    let mut home_copy = approval::object_for(&row, "team-a");
    home_copy.metadata.uid = Some("uid-home".into());
    let existing = [Arc::new(old.clone()), Arc::new(home_copy)];
    let (client, mut server) = mock_client();
    let ctx = context_placed(
        client,
        store.clone(),
        jiff::Timestamp::now(),
        approval::Placement::per_tenant(NS),
    );
    let n2 = name.clone();
    let report = run(approval::sync_once(&ctx, &existing, &[]), async move {
        let del = server
            .expect(Method::DELETE, &format!("{APPROVALS}/{n2}"))
            .await;
        assert_eq!(
            del.body["preconditions"],
            json!({"uid": "uid-apr", "resourceVersion": "41"})
        );
        del.respond(200, approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!((report.created, report.moved), (0, 1));

    // Decided in the old queue: not moved, and the decision is recorded.
    let decided_old = decided(&row, Some("carol"), &["platform-oncall"]);
    record_version(&store, "team-a", &row.policy_version).await;
    let (client, mut server) = mock_client();
    let ctx = context_placed(
        client,
        store.clone(),
        jiff::Timestamp::now(),
        approval::Placement::per_tenant(NS),
    );
    let cached = [Arc::new(decided_old.clone())];
    // Its home copy does not exist yet, so the pass creates it; nothing is
    // deleted.
    let n2 = name.clone();
    let report = run(approval::sync_once(&ctx, &cached, &[]), async move {
        let home = "/apis/toolgate.dev/v1alpha1/namespaces/team-a/approvals";
        let create = server.expect(Method::POST, home).await;
        let mut obj = create.body.clone();
        obj["metadata"]["uid"] = json!("uid-home");
        create.respond(201, obj);
        expect_applied_status(&mut server, &format!("{home}/{n2}/status"), "Approval")
            .await
            .echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!((report.created, report.moved), (1, 0));
    let (client, mut server) = mock_client();
    let ctx = context_placed(
        client,
        store.clone(),
        jiff::Timestamp::now(),
        approval::Placement::per_tenant(NS),
    );
    run(
        approval::reconcile(Arc::new(decided_old), ctx),
        async move {
            server
                .expect(Method::GET, TEAM_A_PROFILE)
                .await
                .respond(200, profile_json());
            let st = expect_applied_status(
                &mut server,
                &format!("{APPROVALS}/{name}/status"),
                "Approval",
            )
            .await;
            assert_eq!(st.body["status"]["phase"], "Approved");
            st.echo_status(approval_json(&name));
        },
    )
    .await
    .unwrap();
}

/// A standing grant squatting a pending approval's name at home is not
/// its mirror: nothing is created over it, the old queue's genuine request
/// is not deleted for it, and the approval counts as unmirrored.
#[tokio::test]
async fn a_squatted_name_is_not_a_mirror() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    let mut squatter: Approval =
        serde_json::from_value(grant(&name, None, "2099-01-01T00:00:00Z")).unwrap();
    squatter.metadata.namespace = Some("team-a".into());
    let old: Approval = serde_json::from_value(as_object(&approval::object_for(&row, NS))).unwrap();
    let existing = [Arc::new(squatter), Arc::new(old)];
    let (client, _server) = mock_client();
    let ctx = context_placed(
        client,
        store.clone(),
        jiff::Timestamp::now(),
        approval::Placement::per_tenant(NS),
    );
    // No request reaches the API server: the mock would time out answering.
    let report = run(approval::sync_once(&ctx, &existing, &[]), async {})
        .await
        .unwrap();
    assert_eq!((report.created, report.moved), (0, 0));
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_approvals_unmirrored 1"),
        "{metrics}"
    );
}

/// Review finding: one tenant's pending row that does not read back (here a
/// created_at no timestamp holds, as a tenant's own role could write before
/// migration 0021) used to fail the whole list, so no tenant's approvals
/// were mirrored. Now it is counted as unmirrored, its earlier object is
/// left alone, and the other tenants' rows are mirrored.
#[tokio::test]
async fn one_tenants_unreadable_row_does_not_stall_the_mirror() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    let name = approval::approval_name(&row.id);
    sqlx::raw_sql(&format!(
        "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, \
         policy_version, decision_id, requested_by, created_at, expires_at) \
         VALUES ('poison', 'team-z', 'inv-z', 'run-1', 't', 'd', 'p', 'd', 'me', {m}, {m})",
        m = i64::MAX
    ))
    .execute(store.as_sqlite().unwrap())
    .await
    .unwrap();
    // Mirrored while the row still read back: it must not be resolved
    // (nor fail the pass) now that it does not.
    let mut was = row.clone();
    was.id = "poison".into();
    was.tenant = "team-z".into();
    let earlier: Approval =
        serde_json::from_value(as_object(&approval::object_for(&was, NS))).unwrap();

    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), jiff::Timestamp::now());
    let n2 = name.clone();
    let report = run(
        approval::sync_once(&ctx, &[Arc::new(earlier)], &[]),
        async move {
            let create = server.expect(Method::POST, APPROVALS).await;
            assert_eq!(create.body["metadata"]["name"], n2.as_str());
            assert_eq!(create.body["spec"]["request"]["tenant"], "team-a");
            let mut obj = create.body.clone();
            obj["metadata"]["uid"] = json!("uid-apr");
            create.respond(201, obj);
            expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                .await
                .echo_status(approval_json(&n2));
        },
    )
    .await
    .unwrap();
    assert_eq!((report.created, report.updated), (1, 0));
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_approvals_unmirrored 1"),
        "{metrics}"
    );
}

/// The why of an approval is read from records its tenant writes too: a
/// flow label whose time does not read back (allowed by the flow label
/// check before migration 0021) holds back that tenant's approval only.
#[tokio::test]
async fn a_why_that_does_not_read_back_holds_back_only_its_approval() {
    let store = store().await;
    let _held = pending_row(&store, Duration::from_secs(900)).await;
    sqlx::raw_sql(
        "INSERT INTO flow_labels (tenant, scope, subject, label, decision_id, set_at) \
         VALUES ('team-a', 'run', 'run-1', 'late', 'dec-x', 253402300799999)",
    )
    .execute(store.as_sqlite().unwrap())
    .await
    .unwrap();
    let now = jiff::Timestamp::now();
    let other = team_b_row(&store, now).await;
    let name = approval::approval_name(&other.id);

    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now);
    let n2 = name.clone();
    let report = run(approval::sync_once(&ctx, &[], &[]), async move {
        let create = server.expect(Method::POST, APPROVALS).await;
        assert_eq!(create.body["metadata"]["name"], n2.as_str());
        assert_eq!(create.body["spec"]["request"]["tenant"], "team-b");
        let mut obj = create.body.clone();
        obj["metadata"]["uid"] = json!("uid-other");
        create.respond(201, obj);
        expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
            .await
            .echo_status(approval_json(&n2));
    })
    .await
    .unwrap();
    assert_eq!(report.created, 1);
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_approvals_unmirrored 1"),
        "{metrics}"
    );
}

/// Tenant team-b's pending approval, old enough at `now` to be mirrored
/// without its why.
async fn team_b_row(
    store: &toolgate_store::Store,
    now: jiff::Timestamp,
) -> toolgate_store::Approval {
    store
        .approvals()
        .request(
            toolgate_store::NewApproval {
                approval_id: Some("01J0OTHER".into()),
                invocation_id: "inv-b".into(),
                tenant: "team-b".into(),
                run_id: "run-b".into(),
                tool: "bash".into(),
                args_digest: "sha256:abc".into(),
                call_digest: None,
                policy_version: POLICY_VERSION.into(),
                decision_id: "dec-b".into(),
                requested_by: "sidecar/agent-b".into(),
                ttl: Duration::from_secs(900),
                action: None,
                preview: None,
            },
            now - SignedDuration::from_secs(60),
        )
        .await
        .unwrap()
}

/// Review finding: an approval mirrored while pending, whose row then left
/// `pending` with a time that does not read back (a tenant cancelling its
/// run with `p_now` far in the future before migration 0021), failed
/// reading it back for its object, and with it every later pass for every
/// tenant. Now that object is left as it is and counted, and the pass goes
/// on: the other tenant's approval is mirrored.
#[tokio::test]
async fn an_object_whose_row_does_not_read_back_does_not_stall_the_mirror() {
    let store = store().await;
    let row = pending_row(&store, Duration::from_secs(900)).await;
    sqlx::raw_sql(&format!(
        "UPDATE approvals SET status = 'cancelled', resolved_at = 100000000000000000 \
         WHERE id = '{}'",
        row.id
    ))
    .execute(store.as_sqlite().unwrap())
    .await
    .unwrap();
    let mut earlier: Approval =
        serde_json::from_value(as_object(&approval::object_for(&row, NS))).unwrap();
    earlier.status = Some(toolgate_controller::crd::ApprovalStatus {
        phase: Some(toolgate_controller::crd::Phase::Pending),
        ..Default::default()
    });
    let now = jiff::Timestamp::now();
    let other = team_b_row(&store, now).await;
    let name = approval::approval_name(&other.id);

    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now);
    let n2 = name.clone();
    // The only requests: team-b's object and its status. Nothing is
    // written to the object whose row does not read back.
    let report = run(
        approval::sync_once(&ctx, &[Arc::new(earlier)], &[]),
        async move {
            let create = server.expect(Method::POST, APPROVALS).await;
            assert_eq!(create.body["metadata"]["name"], n2.as_str());
            assert_eq!(create.body["spec"]["request"]["tenant"], "team-b");
            let mut obj = create.body.clone();
            obj["metadata"]["uid"] = json!("uid-other");
            create.respond(201, obj);
            expect_applied_status(&mut server, &format!("{APPROVALS}/{n2}/status"), "Approval")
                .await
                .echo_status(approval_json(&n2));
        },
    )
    .await
    .expect("one row that does not read back must not fail the pass");
    assert_eq!((report.created, report.updated), (1, 0));
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_approvals_unmirrored 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("toolgate_approvals{phase=\"Pending\"} 1"),
        "the pass reached the phase counts: {metrics}"
    );
}
