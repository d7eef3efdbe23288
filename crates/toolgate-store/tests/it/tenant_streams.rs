//! Decision streams under tenant roles: a tenant opens and appends to
//! streams of its own tenant only, never chooses a chain position, cannot
//! reset, reopen or write checkpoints, and its streams chain independently.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards. A's streams
//! [`S1`] and [`S2`], and the forged SQL, are `common::tenant_rows`.

use crate::common::rid;
use crate::common::tenant_rows::*;
use crate::common::tenants::*;
use jiff::Timestamp;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_sidecar_links_its_new_stream_to_the_last_head() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    t.close().await;
}

/// B's stream of the same name is another chain, and B verifies only its
/// own stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_stream_of_the_same_name_is_another_chain() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let (b, tb) = (&t.b, &t.tb);
    let b1 = b.decisions().append(tb, S1, record(0)).await.unwrap();
    assert_eq!(b1.seq, 1);
    let b_reports = b.decisions().verify(None).await.unwrap();
    assert_eq!(b_reports.len(), 1);
    assert_eq!(
        (b_reports[0].tenant.as_str(), b_reports[0].stream.as_str()),
        (tb.as_str(), S1)
    );
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_open_or_append_to_a_tenants_stream() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let (b, ta) = (&t.b, &t.ta);
    for err in [
        b.decisions()
            .open_stream(ta, "pod-b/x", None)
            .await
            .unwrap_err(),
        b.decisions().append(ta, S1, record(5)).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "permission_denied", "{err}");
    }
    assert_eq!(
        sqlstate(
            &t.pb,
            &format!(
                "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
                 verdict, reason, policy_version, risk, args_digest, created_at) \
                 VALUES ('{ta}', '{S1}', 'x', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
            )
        )
        .await,
        "42501"
    );
    t.close().await;
}

/// No reopening, no legacy stream, no made-up previous stream; the link is
/// read by the database, so B cannot link to A's stream either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cannot_be_reopened_or_linked_to_a_stream_its_tenant_cannot_read() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let (a, b, ta, tb) = (&t.a, &t.b, &t.ta, &t.tb);
    let code =
        |r: Result<toolgate_store::StreamHead, toolgate_store::StoreError>| r.unwrap_err().code();
    assert_eq!(
        code(a.decisions().open_stream(ta, S1, None).await),
        "conflict"
    );
    assert_eq!(
        code(a.decisions().open_stream(ta, "legacy", None).await),
        "invalid_input"
    );
    assert_eq!(
        code(a.decisions().open_stream(ta, "pod-a/3", Some("nope")).await),
        "invalid_input"
    );
    assert_eq!(
        code(b.decisions().open_stream(tb, "pod-b/2", Some(S2)).await),
        "invalid_input"
    );
    t.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_reset_delete_move_or_checkpoint_its_streams() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let (ta, tb) = (&t.ta, &t.tb);
    for sql in [
        format!("UPDATE decision_streams SET seq = 0 WHERE tenant = '{ta}' AND stream = '{S1}'"),
        format!("DELETE FROM decision_streams WHERE tenant = '{ta}' AND stream = '{S1}'"),
        format!(
            "INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash) \
             VALUES ('{ta}', 'pod-a/9', 5, '', '')"
        ),
        format!("DELETE FROM decisions WHERE tenant = '{ta}' AND stream = '{S1}'"),
        format!("UPDATE decisions SET stream = 'pod-a/9' WHERE tenant = '{ta}'"),
        format!(
            "INSERT INTO checkpoints (tenant, stream, seq, hash, at, keyid, envelope) \
             VALUES ('{ta}', '{S1}', 1, 'h', 0, 'k', 'e')"
        ),
        format!("SELECT toolgate_open_decision_stream('{tb}', 'pod-x/1', NULL)"),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "42501", "{sql}");
    }
    t.close().await;
}

/// The heads view of earlier releases reads with the caller's rights: A
/// sees its own heads (at the last row), never B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heads_view_reads_with_the_callers_rights() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let (a, ta, tb) = (&t.a, &t.ta, &t.tb);
    t.b.decisions().append(tb, S1, record(0)).await.unwrap();
    let (seq, hash): (i64, String) = sqlx::query_as(&format!(
        "SELECT seq, hash FROM decision_heads WHERE tenant = '{ta}' AND stream = '{S1}'"
    ))
    .fetch_one(&t.pa)
    .await
    .unwrap();
    let last = a.decisions().head(ta, S1).await.unwrap().unwrap();
    assert_eq!((seq, hash), (last.seq, last.hash));
    assert!(last.seq > 0);
    let heads_of_b = format!("SELECT count(*) FROM decision_heads WHERE tenant = '{tb}'");
    assert_eq!(count(&t.pa, &heads_of_b).await, 0);
    assert_eq!(
        count(&t.pb, &format!("{heads_of_b} AND stream = '{S1}'")).await,
        1
    );
    t.close().await;
}

/// A direct insert must continue its stream's last row: a made-up seq and
/// the next seq with a made-up prev_hash are refused (TG006), and so is a
/// rewind to a taken seq with the right prev_hash (TG006 since the table is
/// partitioned, migration 0018: the primary key said 23505).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_insert_must_continue_its_streams_last_row() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let ta = &t.ta;
    let s1_rows = t.a.decisions().list(ta, S1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    for sql in [
        forged_insert(ta, 1000, "bogus"),
        forged_insert(ta, head.seq + 1, "bogus"),
        forged_insert(ta, 1, &"0".repeat(64)),
        forged_insert(ta, head.seq, &s1_rows[s1_rows.len() - 2].hash),
        forged_insert(ta, 1, &s1_rows[0].prev_hash),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "TG006", "{sql}");
    }
    t.close().await;
}

/// The same through the append function a tenant's store calls (migration
/// 0010), which inserts with the owner's rights: the trigger checks the
/// link of every row; no seq is refused, and seq 0 continues nothing (the
/// trigger refuses it before the check constraint would, since 0018 runs it
/// for every row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_append_function_checks_the_link_of_every_row() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let ta = &t.ta;
    let s1_rows = t.a.decisions().list(ta, S1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    for sql in [
        forged_call(ta, "1000", "bogus"),
        forged_call(ta, &(head.seq + 1).to_string(), "bogus"),
        forged_call(ta, "1", &"0".repeat(64)),
        forged_call(ta, &head.seq.to_string(), &s1_rows[s1_rows.len() - 2].hash),
        forged_call(ta, "1", &s1_rows[0].prev_hash),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "TG006", "{sql}");
    }
    assert_eq!(
        sqlstate(&t.pa, &forged_call(ta, "NULL", &head.hash)).await,
        "22004"
    );
    assert_eq!(
        sqlstate(&t.pa, &forged_call(ta, "0", &head.hash)).await,
        "TG006"
    );
    t.close().await;
}

/// Both append functions check the tenant before the link: B appending to
/// A's stream, even with the right link, learns nothing of A's chain; the
/// owner's session is no tenant (it inserts directly) and is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_append_functions_refuse_another_tenant_and_the_owner_before_the_link() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let ta = &t.ta;
    let s1_rows = t.a.decisions().list(ta, S1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    let next = (head.seq + 1).to_string();
    for sql in [
        forged_call(ta, &next, &head.hash),
        forged_call(ta, &next, "bogus"),
    ] {
        assert_eq!(sqlstate(&t.pb, &sql).await, "42501", "{sql}");
    }
    assert_eq!(
        sqlstate(t.fx.admin_pool(), &forged_call(ta, &next, &head.hash)).await,
        "42501"
    );
    for pool in [&t.pb, t.fx.admin_pool()] {
        for sql in [
            batch_call(ta, &next, &head.hash, 2, false),
            batch_call(ta, &next, "bogus", 2, false),
        ] {
            assert_eq!(sqlstate(pool, &sql).await, "42501", "{sql}");
        }
    }
    assert_eq!(
        t.a.decisions().list(ta, S1, 0, 100).await.unwrap().len(),
        s1_rows.len(),
        "a refused append left rows behind"
    );
    t.close().await;
}

/// The batch function (migration 0011) checks the same, once for the
/// batch: its first row's link and the taken seqs (overlapping the chain
/// from a taken seq with that seq's true link: TG006 since migration 0018,
/// where the primary key said 23505); no seq is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_function_checks_its_first_link_and_the_taken_seqs() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let ta = &t.ta;
    let s1_rows = t.a.decisions().list(ta, S1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    let next = (head.seq + 1).to_string();
    let taken = (head.seq - 1).to_string();
    for sql in [
        batch_call(ta, "1000", &head.hash, 2, false),
        batch_call(ta, &next, "bogus", 2, false),
        batch_call(ta, "1", &"0".repeat(64), 3, false),
        batch_call(ta, &taken, &s1_rows[s1_rows.len() - 3].hash, 3, false),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "TG006", "{sql}");
    }
    assert_eq!(
        sqlstate(&t.pa, &batch_call(ta, "NULL", &head.hash, 2, false)).await,
        "22004"
    );
    assert_eq!(
        t.a.decisions().list(ta, S1, 0, 100).await.unwrap().len(),
        s1_rows.len(),
        "a refused batch left rows behind"
    );
    t.close().await;
}

/// Arrays that do not line up are refused: one shorter than the others, or
/// none at all; and row i's link is the hash array's element i - 1, so an
/// array indexed from 0, or one of two dimensions, which would shift or
/// blank the links, is refused rather than read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_function_refuses_arrays_that_do_not_line_up() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let ta = &t.ta;
    let s1_rows = t.a.decisions().list(ta, S1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    let next = (head.seq + 1).to_string();
    for sql in [
        batch_call(ta, &next, &head.hash, 3, true),
        batch_call(ta, &next, &head.hash, 0, false),
    ] {
        assert_eq!(sqlstate(&t.pa, &sql).await, "22023", "{sql}");
    }
    let (ha, hb) = ("a".repeat(64), "b".repeat(64));
    let listed = format!("ARRAY['{ha}', '{hb}']::text[]");
    let two_rows = batch_call(ta, &next, &head.hash, 2, false);
    assert!(two_rows.contains(&listed), "{two_rows}");
    for hashes in [
        format!("'[0:1]={{{ha},{hb}}}'::text[]"),
        format!("ARRAY[['{ha}'], ['{hb}']]::text[]"),
    ] {
        let sql = two_rows.replace(&listed, &hashes);
        assert_eq!(sqlstate(&t.pa, &sql).await, "22023", "{sql}");
    }
    assert_eq!(
        t.a.decisions().list(ta, S1, 0, 100).await.unwrap().len(),
        s1_rows.len(),
        "a refused batch left rows behind"
    );
    t.close().await;
}

/// Naming no seq (a sidecar of an earlier release), the row is chained by
/// the trigger at the stream's next position. Every stream verifies, on its
/// own and together; the link of S2 still holds (S1 grew past it, which is
/// fine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_naming_no_seq_is_chained_at_its_streams_next_position() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let rows = two_streams(&t).await;
    old_release_row(&t).await;
    let (a, ta) = (&t.a, &t.ta);
    let s1_rows = a.decisions().list(ta, S1, 0, 100).await.unwrap();
    assert_eq!(
        s1_rows.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(s1_rows[3].prev_hash, rows[2].hash);
    assert_eq!(s1_rows[3].record.decision_id, "old-release");
    let reports = t.fx.admin.decisions().verify(Some(ta)).await.unwrap();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    assert!(a.decisions().verify_stream(ta, S2).await.unwrap().ok);
    t.close().await;
}

/// A row that continues the head but whose hash does not match its content
/// is accepted (the writer computes hashes) and is what verify reports:
/// here the first row of a stream nobody opened. The sidecar's stream next
/// to it still verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_hash_does_not_match_its_content_is_what_verify_reports() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    let (a, ta) = (&t.a, &t.ta);
    let genesis = toolgate_store::genesis_hash(ta, "pod-a/forged", None).unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
         VALUES ('{ta}', 'pod-a/forged', 1, 'forged', 'r', 's', 't', 'allow', 'x', 'p', \
         'low', 'd', 0, '{genesis}', '{}')",
        "f".repeat(64)
    ))
    .execute(&t.pa)
    .await
    .unwrap();
    let forged = a
        .decisions()
        .verify_stream(ta, "pod-a/forged")
        .await
        .unwrap();
    assert!(!forged.ok, "{forged:?}");
    assert_eq!(forged.first_broken_seq, Some(1), "{forged:?}");
    assert!(a.decisions().verify_stream(ta, S1).await.unwrap().ok);
    t.close().await;
}

/// A high-risk call's run charge and decision, as a tenant role: the head
/// is read in the transaction (a tenant may not lock heads) and the row
/// continues it, and so does the next append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_charged_call_continues_its_streams_head() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    two_streams(&t).await;
    old_release_row(&t).await;
    let (a, ta) = (&t.a, &t.ta);
    let s1_rows = a.decisions().list(ta, S1, 0, 100).await.unwrap();
    let (_, charged) = a
        .runs()
        .admit_and_record(
            ta,
            S1,
            &rid("run-t"),
            true,
            &toolgate_store::RunLimits::default(),
            Timestamp::now(),
            None,
            |_, _| record(40),
        )
        .await
        .unwrap();
    assert_eq!(charged.seq, 5);
    assert_eq!(charged.prev_hash, s1_rows[3].hash);
    let next = a.decisions().append(ta, S1, record(41)).await.unwrap();
    assert_eq!(
        (next.seq, next.prev_hash.as_str()),
        (6, charged.hash.as_str())
    );
    assert!(a.decisions().verify_stream(ta, S1).await.unwrap().ok);
    t.close().await;
}

/// A batch is chained by the function, not by the caller: each row after
/// the first takes the row before it as its link and the next seq, and the
/// count inserted is returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_chained_by_the_function_not_the_caller() {
    let Some(t) = TwoTenants::new().await else {
        return;
    };
    let ta = &t.ta;
    let raw = "pod-a/raw-batch";
    let genesis = toolgate_store::genesis_hash(ta, raw, None).unwrap();
    let hashes: Vec<String> = ["1", "2", "3"].iter().map(|d| d.repeat(64)).collect();
    let inserted: i64 = sqlx::query_scalar(
        "SELECT toolgate_append_decisions($1, $2, 1, $3, $4, $4, $4, $4, $5, $4, $6, $6, $4, \
         $7, $4, $8, $6, $6, $9)",
    )
    .bind(ta)
    .bind(raw)
    .bind(&genesis)
    .bind(vec!["x"; 3])
    .bind(vec!["allow"; 3])
    .bind(vec![None::<String>; 3])
    .bind(vec!["low"; 3])
    .bind(vec![0_i64; 3])
    .bind(&hashes)
    .fetch_one(&t.pa)
    .await
    .unwrap();
    assert_eq!(inserted, 3);
    let chained: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT seq, prev_hash, hash FROM decisions WHERE tenant = $1 AND stream = $2 \
         ORDER BY seq",
    )
    .bind(ta)
    .bind(raw)
    .fetch_all(&t.pa)
    .await
    .unwrap();
    assert_eq!(
        chained,
        vec![
            (1, genesis.clone(), hashes[0].clone()),
            (2, hashes[0].clone(), hashes[1].clone()),
            (3, hashes[1].clone(), hashes[2].clone()),
        ]
    );
    t.close().await;
}
