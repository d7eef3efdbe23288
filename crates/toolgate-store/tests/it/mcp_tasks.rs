//! MCP tasks the gateway holds (migration postgres 0019, sqlite 0013):
//! held, claimed for forwarding by exactly one process, ended once; a task
//! left forwarding fails with its outcome unknown; a tenant sees only its
//! own.

use crate::common::tenants::*;
use crate::common::unique;
use jiff::{SignedDuration, Timestamp};
use toolgate_store::{FORWARD_INTERRUPTED, McpTaskState, NewMcpTask};

fn new_task<'a>(tenant: &'a str, task_id: &'a str, session: Option<&'a str>) -> NewMcpTask<'a> {
    let at = Timestamp::now();
    NewMcpTask {
        tenant,
        task_id,
        server: "files",
        run_id: "run-1",
        session,
        approval_id: "appr-1",
        call_digest: Some("sha256:abc"),
        request: r#"{"message":{"method":"tools/call"}}"#,
        at,
        expires_at: at + SignedDuration::from_hours(1),
    }
}

both_backends!(a_task_is_held_claimed_once_and_ended_once, |db| {
    let tasks = db.store.mcp_tasks();
    let tenant = unique("t");
    let id = unique("task");
    tasks
        .hold(&new_task(&tenant, &id, Some("s1")))
        .await
        .unwrap();
    assert!(
        tasks
            .hold(&new_task(&tenant, &id, Some("s1")))
            .await
            .is_err(),
        "a task id is held once"
    );
    let held = tasks.get(&tenant, &id).await.unwrap().unwrap();
    assert_eq!(held.state, McpTaskState::Held);
    assert_eq!(held.session.as_deref(), Some("s1"));
    assert_eq!(held.call_digest.as_deref(), Some("sha256:abc"));
    assert_eq!(held.outcome, None);
    assert!(tasks.get("other-tenant", &id).await.unwrap().is_none());
    assert_eq!(tasks.list_open(&tenant, None).await.unwrap().len(), 1);
    assert_eq!(
        tasks.list_open(&tenant, Some("files")).await.unwrap().len(),
        1
    );
    assert!(
        tasks
            .list_open(&tenant, Some("other"))
            .await
            .unwrap()
            .is_empty()
    );
    let of_session = |s: Option<&'static str>| {
        let (tasks, tenant) = (db.store.mcp_tasks(), tenant.clone());
        async move {
            tasks
                .list_of_session(&tenant, "files", "run-1", s, 100)
                .await
                .unwrap()
                .len()
        }
    };
    assert_eq!(of_session(Some("s1")).await, 1);
    assert_eq!(of_session(Some("s2")).await, 0);
    assert_eq!(of_session(None).await, 0);

    let now = Timestamp::now();
    assert!(
        !tasks.complete(&tenant, &id, "{}", now).await.unwrap(),
        "not claimed yet"
    );
    assert!(tasks.claim_forward(&tenant, &id, now).await.unwrap());
    assert!(
        !tasks.claim_forward(&tenant, &id, now).await.unwrap(),
        "claimed once"
    );
    assert!(
        !tasks.cancel(&tenant, &id, now).await.unwrap(),
        "too late to cancel"
    );
    assert!(
        tasks
            .complete(&tenant, &id, r#"{"content":[]}"#, now)
            .await
            .unwrap()
    );
    assert!(
        !tasks
            .fail(&tenant, &id, r#"{"code":1}"#, now)
            .await
            .unwrap(),
        "ended once"
    );
    let done = tasks.get(&tenant, &id).await.unwrap().unwrap();
    assert_eq!(done.state, McpTaskState::Completed);
    assert_eq!(done.outcome.as_deref(), Some(r#"{"content":[]}"#));
    assert!(tasks.list_open(&tenant, None).await.unwrap().is_empty());

    // Cancelled while held: never claimed.
    let cancelled = unique("task");
    tasks
        .hold(&new_task(&tenant, &cancelled, None))
        .await
        .unwrap();
    assert!(tasks.cancel(&tenant, &cancelled, now).await.unwrap());
    assert!(!tasks.claim_forward(&tenant, &cancelled, now).await.unwrap());
    assert_eq!(of_session(None).await, 1);

    // Expired: never claimed, and purged.
    let expired = unique("task");
    let mut t = new_task(&tenant, &expired, None);
    t.expires_at = t.at + SignedDuration::from_millis(1);
    tasks.hold(&t).await.unwrap();
    let later = t.at + SignedDuration::from_secs(1);
    assert!(!tasks.claim_forward(&tenant, &expired, later).await.unwrap());
    let purged = tasks
        .purge_expired(&tenant, t.at + SignedDuration::from_hours(2))
        .await
        .unwrap();
    assert_eq!(purged, 3);
    assert!(tasks.hold(&new_task("", "x", None)).await.is_err());
});

both_backends!(
    a_task_left_forwarding_fails_and_is_never_claimed_again,
    |db| {
        let tasks = db.store.mcp_tasks();
        let tenant = unique("t");
        let (sent, waiting) = (unique("task"), unique("task"));
        tasks.hold(&new_task(&tenant, &sent, None)).await.unwrap();
        tasks
            .hold(&new_task(&tenant, &waiting, None))
            .await
            .unwrap();
        let now = Timestamp::now();
        assert!(tasks.claim_forward(&tenant, &sent, now).await.unwrap());
        // The sidecar stops here; the next one starts.
        let restarted = db.peer_store().await;
        let error = format!(r#"{{"code":-32603,"message":"toolgate: {FORWARD_INTERRUPTED}"}}"#);
        let failed = restarted
            .mcp_tasks()
            .fail_interrupted(&tenant, "files", &error, now)
            .await
            .unwrap();
        assert_eq!(failed, vec![sent.clone()]);
        let task = restarted
            .mcp_tasks()
            .get(&tenant, &sent)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(task.state, McpTaskState::Failed);
        assert!(task.outcome.unwrap().contains(FORWARD_INTERRUPTED));
        assert!(
            !restarted
                .mcp_tasks()
                .claim_forward(&tenant, &sent, now)
                .await
                .unwrap()
        );
        let open = restarted
            .mcp_tasks()
            .list_open(&tenant, Some("files"))
            .await
            .unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].task_id, waiting);
        assert_eq!(open[0].state, McpTaskState::Held);
    }
);

both_backends!(two_stores_racing_to_claim_a_task_one_wins, |db| {
    let tenant = unique("t");
    for _ in 0..5 {
        let id = unique("task");
        db.store
            .mcp_tasks()
            .hold(&new_task(&tenant, &id, None))
            .await
            .unwrap();
        let mut racers = Vec::new();
        for _ in 0..4 {
            let store = db.peer_store().await;
            let (tenant, id) = (tenant.clone(), id.clone());
            racers.push(tokio::spawn(async move {
                store
                    .mcp_tasks()
                    .claim_forward(&tenant, &id, Timestamp::now())
                    .await
            }));
        }
        let mut won = 0;
        for r in racers {
            won += usize::from(r.await.unwrap().unwrap());
        }
        assert_eq!(won, 1, "exactly one claim wins");
    }
});

/// A tenant role reads, claims and ends only its own tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_role_cannot_read_or_claim_another_tenants_task() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("ma-{}", suffix()), format!("mb-{}", suffix()));
    let a = fx.tenant_store(&ta).await;
    let b = fx.tenant_store(&tb).await;
    let id = unique("task");
    a.mcp_tasks()
        .hold(&new_task(&ta, &id, Some("s")))
        .await
        .unwrap();
    assert!(
        b.mcp_tasks()
            .hold(&new_task(&ta, "forged", None))
            .await
            .is_err(),
        "B cannot hold a task as A"
    );
    let bt = b.mcp_tasks();
    assert!(bt.get(&ta, &id).await.unwrap().is_none());
    assert!(bt.list_open(&ta, None).await.unwrap().is_empty());
    let now = Timestamp::now();
    assert!(!bt.claim_forward(&ta, &id, now).await.unwrap());
    assert!(!bt.cancel(&ta, &id, now).await.unwrap());
    assert!(!bt.fail(&ta, &id, "{}", now).await.unwrap());
    assert!(
        bt.fail_interrupted(&ta, "files", "{}", now)
            .await
            .unwrap()
            .is_empty()
    );
    let pool = b.as_postgres().unwrap();
    assert_eq!(count(pool, "SELECT count(*) FROM mcp_tasks").await, 0);
    let moved = sqlx::query("UPDATE mcp_tasks SET state = 'forwarding'")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(moved.rows_affected(), 0);
    // A may not move its own task to another tenant.
    let r = sqlx::query("UPDATE mcp_tasks SET tenant = $1")
        .bind(&tb)
        .execute(a.as_postgres().unwrap())
        .await;
    assert!(r.is_err(), "a row cannot change tenant");
    let task = a.mcp_tasks().get(&ta, &id).await.unwrap().unwrap();
    assert_eq!(task.state, McpTaskState::Held);
    assert!(a.mcp_tasks().claim_forward(&ta, &id, now).await.unwrap());
    assert_eq!(
        fx.admin
            .mcp_tasks()
            .get(&ta, &id)
            .await
            .unwrap()
            .unwrap()
            .state,
        McpTaskState::Forwarding
    );
    a.close().await;
    b.close().await;
}
