//! Decision streams under tenant roles: confined to their tenant, and no
//! chain position, reset, reopening or checkpoint a tenant could forge.
//!
//! Against a real PostgreSQL (the admin URL comes from
//! `TOOLGATE_TEST_DATABASE_URL`; see `common::tenants`): each test migrates
//! its own schema and provisions tenants with random names (roles are
//! cluster-global), and drops schema and roles afterwards.

use crate::common::rid;
use crate::common::tenants::*;
use jiff::Timestamp;
use toolgate_store::Store;

/// Streams under tenant roles: a tenant opens and appends to streams of its
/// own tenant only, never chooses a chain position, cannot reset, reopen or
/// write checkpoints, and its streams chain independently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_streams_are_confined_and_unforgeable() {
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let (ta, tb) = (format!("ta-{}", suffix()), format!("tb-{}", suffix()));
    let creds_a = fx.provision(&ta).await;
    let creds_b = fx.provision(&tb).await;
    let a = Store::connect(&creds_a.database_url).await.unwrap();
    let b = Store::connect(&creds_b.database_url).await.unwrap();
    let pa = a.as_postgres().unwrap().clone();
    let pb = b.as_postgres().unwrap().clone();

    // A opens its first stream, appends, then "restarts" into a second one
    // linked to the first's head.
    let s1 = "pod-a/1";
    let s2 = "pod-a/2";
    let opened = a.decisions().open_stream(&ta, s1, None).await.unwrap();
    assert_eq!(opened.seq, 0);
    let rows = a
        .decisions()
        .append_batch(&ta, s1, (0..3).map(record).collect())
        .await
        .unwrap();
    assert_eq!(rows[0].prev_hash, opened.hash);
    assert_eq!(
        a.decisions()
            .latest_stream(&ta, "pod-a/")
            .await
            .unwrap()
            .as_deref(),
        Some(s1)
    );
    let second = a.decisions().open_stream(&ta, s2, Some(s1)).await.unwrap();
    let link = second.previous.clone().unwrap();
    assert_eq!((link.stream.as_str(), link.seq), (s1, 3));
    assert_eq!(link.hash, rows[2].hash);
    let first2 = a.decisions().append(&ta, s2, record(9)).await.unwrap();
    assert_eq!(first2.seq, 1);
    assert_eq!(first2.prev_hash, second.hash);
    // B's stream of the same name is another chain.
    let b1 = b.decisions().append(&tb, s1, record(0)).await.unwrap();
    assert_eq!(b1.seq, 1);

    // Refusals: another tenant's stream, reopening, legacy, a made-up
    // previous stream.
    for err in [
        b.decisions()
            .open_stream(&ta, "pod-b/x", None)
            .await
            .unwrap_err(),
        b.decisions().append(&ta, s1, record(5)).await.unwrap_err(),
    ] {
        assert_eq!(err.code(), "permission_denied", "{err}");
    }
    assert_eq!(
        a.decisions()
            .open_stream(&ta, s1, None)
            .await
            .unwrap_err()
            .code(),
        "conflict"
    );
    assert_eq!(
        a.decisions()
            .open_stream(&ta, "legacy", None)
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    assert_eq!(
        a.decisions()
            .open_stream(&ta, "pod-a/3", Some("nope"))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    // The link is read by the database: B cannot link to A's stream either.
    assert_eq!(
        b.decisions()
            .open_stream(&tb, "pod-b/2", Some(s2))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    for sql in [
        format!("UPDATE decision_streams SET seq = 0 WHERE tenant = '{ta}' AND stream = '{s1}'"),
        format!("DELETE FROM decision_streams WHERE tenant = '{ta}' AND stream = '{s1}'"),
        format!(
            "INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash) \
             VALUES ('{ta}', 'pod-a/9', 5, '', '')"
        ),
        format!("DELETE FROM decisions WHERE tenant = '{ta}' AND stream = '{s1}'"),
        format!("UPDATE decisions SET stream = 'pod-a/9' WHERE tenant = '{ta}'"),
        format!(
            "INSERT INTO checkpoints (tenant, stream, seq, hash, at, keyid, envelope) \
             VALUES ('{ta}', '{s1}', 1, 'h', 0, 'k', 'e')"
        ),
        format!("SELECT toolgate_open_decision_stream('{tb}', 'pod-x/1', NULL)"),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "42501", "{sql}");
    }
    assert_eq!(
        sqlstate(
            &pb,
            &format!(
                "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
                 verdict, reason, policy_version, risk, args_digest, created_at) \
                 VALUES ('{ta}', '{s1}', 'x', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
            )
        )
        .await,
        "42501"
    );
    // The heads view of earlier releases reads with the caller's rights: A
    // sees its own heads (at the last row), never B's.
    let (seq, hash): (i64, String) = sqlx::query_as(&format!(
        "SELECT seq, hash FROM decision_heads WHERE tenant = '{ta}' AND stream = '{s1}'"
    ))
    .fetch_one(&pa)
    .await
    .unwrap();
    let last = a.decisions().head(&ta, s1).await.unwrap().unwrap();
    assert_eq!((seq, hash), (last.seq, last.hash));
    assert!(last.seq > 0);
    assert_eq!(
        count(
            &pa,
            &format!("SELECT count(*) FROM decision_heads WHERE tenant = '{tb}'")
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &pb,
            &format!(
                "SELECT count(*) FROM decision_heads WHERE tenant = '{tb}' AND stream = '{s1}'"
            )
        )
        .await,
        1
    );
    // A direct insert must continue its stream's last row: a made-up seq and
    // the next seq with a made-up prev_hash are refused (TG006), and so is a
    // rewind to a taken seq with the right prev_hash (TG006 since the
    // table is partitioned, migration 0018: the primary key said 23505),
    // and the chain is unchanged.
    let s1_rows = a.decisions().list(&ta, s1, 0, 100).await.unwrap();
    let head = s1_rows.last().unwrap();
    let forged = |seq: i64, prev: &str| {
        format!(
            "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
             verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
             VALUES ('{ta}', '{s1}', {seq}, 'forged', 'r', 's', 't', 'allow', 'x', 'p', 'low', \
             'd', 0, '{prev}', '{}')",
            "f".repeat(64)
        )
    };
    for sql in [
        forged(1000, "bogus"),
        forged(head.seq + 1, "bogus"),
        forged(1, &"0".repeat(64)),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    for sql in [
        forged(head.seq, &s1_rows[s1_rows.len() - 2].hash),
        forged(1, &s1_rows[0].prev_hash),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    // The same through the append function a tenant's store calls
    // (migration 0010), which inserts with the owner's rights: it checks
    // the tenant itself, and the trigger the link of every row.
    let forged_call = |tenant: &str, seq: &str, prev: &str| {
        format!(
            "SELECT toolgate_append_decision('{tenant}', 'forged', 'r', 's', 't', 'allow', 'x', \
             NULL, NULL, 'p', 'low', 'd', 0, NULL, NULL, '{s1}', {seq}, '{prev}', '{}')",
            "f".repeat(64)
        )
    };
    for sql in [
        forged_call(&ta, "1000", "bogus"),
        forged_call(&ta, &(head.seq + 1).to_string(), "bogus"),
        forged_call(&ta, "1", &"0".repeat(64)),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    for sql in [
        forged_call(&ta, &head.seq.to_string(), &s1_rows[s1_rows.len() - 2].hash),
        forged_call(&ta, "1", &s1_rows[0].prev_hash),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    assert_eq!(
        sqlstate(&pa, &forged_call(&ta, "NULL", &head.hash)).await,
        "22004"
    );
    // Seq 0 continues nothing (the trigger refuses it before the check
    // constraint would, since 0018 runs it for every row).
    assert_eq!(
        sqlstate(&pa, &forged_call(&ta, "0", &head.hash)).await,
        "TG006"
    );
    // B appending to A's stream, even with the right link: refused before
    // the link is looked at, so B learns nothing of A's chain.
    for sql in [
        forged_call(&ta, &(head.seq + 1).to_string(), &head.hash),
        forged_call(&ta, &(head.seq + 1).to_string(), "bogus"),
    ] {
        assert_eq!(sqlstate(&pb, &sql).await, "42501", "{sql}");
    }
    // The owner's session is no tenant: it inserts directly, and the
    // function refuses it too.
    assert_eq!(
        sqlstate(
            fx.admin_pool(),
            &forged_call(&ta, &(head.seq + 1).to_string(), &head.hash)
        )
        .await,
        "42501"
    );
    // The batch function (migration 0011) checks the same, once for the
    // batch: its first row's link, the tenant before the link, the taken
    // seqs; and refuses arrays that do not line up.
    let batch = |tenant: &str, seq: &str, prev: &str, rows: usize, short: bool| {
        let texts = |value: &str| {
            let n = if short { rows - 1 } else { rows };
            format!(
                "ARRAY[{}]::text[]",
                vec![format!("'{value}'"); n].join(", ")
            )
        };
        let all = |value: &str| format!("ARRAY[{}]::text[]", vec![value; rows].join(", "));
        let hashes: Vec<String> = (0..rows)
            .map(|i| format!("'{}'", char::from(b'a' + i as u8).to_string().repeat(64)))
            .collect();
        format!(
            "SELECT toolgate_append_decisions('{tenant}', '{s1}', {seq}, '{prev}', \
             {ids}, {r}, {r}, {r}, {allow}, {r}, {null}, {null}, {r}, {low}, {r}, \
             ARRAY[{zeros}]::bigint[], {null}, {null}, ARRAY[{hashes}]::text[])",
            ids = texts("forged"),
            r = all("'r'"),
            allow = all("'allow'"),
            low = all("'low'"),
            null = all("NULL"),
            zeros = vec!["0"; rows].join(", "),
            hashes = hashes.join(", "),
        )
    };
    let next = (head.seq + 1).to_string();
    for sql in [
        batch(&ta, "1000", &head.hash, 2, false),
        batch(&ta, &next, "bogus", 2, false),
        batch(&ta, "1", &"0".repeat(64), 3, false),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "TG006", "{sql}");
    }
    // Overlapping the chain from a taken seq, with that seq's true link
    // (TG006 since migration 0018, where the primary key said 23505).
    let taken = (head.seq - 1).to_string();
    assert_eq!(
        sqlstate(
            &pa,
            &batch(&ta, &taken, &s1_rows[s1_rows.len() - 3].hash, 3, false)
        )
        .await,
        "TG006"
    );
    for sql in [
        batch(&ta, &next, &head.hash, 3, true),
        batch(&ta, &next, &head.hash, 0, false),
    ] {
        assert_eq!(sqlstate(&pa, &sql).await, "22023", "{sql}");
    }
    // Row i's link is the hash array's element i - 1: an array indexed
    // from 0, or one of two dimensions, would shift or blank the links, so
    // it is refused rather than read.
    let (ha, hb) = ("a".repeat(64), "b".repeat(64));
    let listed = format!("ARRAY['{ha}', '{hb}']::text[]");
    let two_rows = batch(&ta, &next, &head.hash, 2, false);
    assert!(two_rows.contains(&listed), "{two_rows}");
    for hashes in [
        format!("'[0:1]={{{ha},{hb}}}'::text[]"),
        format!("ARRAY[['{ha}'], ['{hb}']]::text[]"),
    ] {
        let sql = two_rows.replace(&listed, &hashes);
        assert_eq!(sqlstate(&pa, &sql).await, "22023", "{sql}");
    }
    assert_eq!(
        sqlstate(&pa, &batch(&ta, "NULL", &head.hash, 2, false)).await,
        "22004"
    );
    for pool in [&pb, fx.admin_pool()] {
        for sql in [
            batch(&ta, &next, &head.hash, 2, false),
            batch(&ta, &next, "bogus", 2, false),
        ] {
            assert_eq!(sqlstate(pool, &sql).await, "42501", "{sql}");
        }
    }
    assert_eq!(
        a.decisions().list(&ta, s1, 0, 100).await.unwrap().len(),
        s1_rows.len(),
        "a refused batch left rows behind"
    );
    // Naming no seq (a sidecar of an earlier release), the row is chained
    // by the trigger at the stream's next position.
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at) \
         VALUES ('{ta}', '{s1}', 'old-release', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', 0)"
    ))
    .execute(&pa)
    .await
    .unwrap();
    let s1_rows = a.decisions().list(&ta, s1, 0, 100).await.unwrap();
    assert_eq!(
        s1_rows.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(s1_rows[3].prev_hash, rows[2].hash);
    assert_eq!(s1_rows[3].record.decision_id, "old-release");

    // Every stream verifies, on its own and together; the link of s2 still
    // holds (s1 grew past it, which is fine).
    let reports = fx.admin.decisions().verify(Some(&ta)).await.unwrap();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    assert!(a.decisions().verify_stream(&ta, s2).await.unwrap().ok);
    // B sees only its own stream.
    let b_reports = b.decisions().verify(None).await.unwrap();
    assert_eq!(b_reports.len(), 1);
    assert_eq!(
        (b_reports[0].tenant.as_str(), b_reports[0].stream.as_str()),
        (tb.as_str(), s1)
    );

    // A row that continues the head but whose hash does not match its
    // content is accepted (the writer computes hashes) and is what verify
    // reports: here the first row of a stream nobody opened.
    let genesis = toolgate_store::genesis_hash(&ta, "pod-a/forged", None).unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
         VALUES ('{ta}', 'pod-a/forged', 1, 'forged', 'r', 's', 't', 'allow', 'x', 'p', \
         'low', 'd', 0, '{genesis}', '{}')",
        "f".repeat(64)
    ))
    .execute(&pa)
    .await
    .unwrap();
    let forged = a
        .decisions()
        .verify_stream(&ta, "pod-a/forged")
        .await
        .unwrap();
    assert!(!forged.ok, "{forged:?}");
    assert_eq!(forged.first_broken_seq, Some(1), "{forged:?}");
    // The sidecar's stream next to it still verifies.
    assert!(a.decisions().verify_stream(&ta, s1).await.unwrap().ok);

    // A high-risk call's run charge and decision, as a tenant role: the
    // head is read in the transaction (a tenant may not lock heads) and the
    // row continues it.
    let (_, charged) = a
        .runs()
        .admit_and_record(
            &ta,
            s1,
            &rid("run-t"),
            true,
            &toolgate_store::RunLimits::default(),
            Timestamp::now(),
            |_| record(40),
        )
        .await
        .unwrap();
    assert_eq!(charged.seq, 5);
    assert_eq!(charged.prev_hash, s1_rows[3].hash);
    let next = a.decisions().append(&ta, s1, record(41)).await.unwrap();
    assert_eq!(
        (next.seq, next.prev_hash.as_str()),
        (6, charged.hash.as_str())
    );
    assert!(a.decisions().verify_stream(&ta, s1).await.unwrap().ok);

    // A batch is chained by the function, not by the caller: each row after
    // the first takes the row before it as its link and the next seq, and
    // the count inserted is returned.
    let raw = "pod-a/raw-batch";
    let genesis = toolgate_store::genesis_hash(&ta, raw, None).unwrap();
    let hashes: Vec<String> = ["1", "2", "3"].iter().map(|d| d.repeat(64)).collect();
    let inserted: i64 = sqlx::query_scalar(
        "SELECT toolgate_append_decisions($1, $2, 1, $3, $4, $4, $4, $4, $5, $4, $6, $6, $4, \
         $7, $4, $8, $6, $6, $9)",
    )
    .bind(&ta)
    .bind(raw)
    .bind(&genesis)
    .bind(vec!["x"; 3])
    .bind(vec!["allow"; 3])
    .bind(vec![None::<String>; 3])
    .bind(vec!["low"; 3])
    .bind(vec![0_i64; 3])
    .bind(&hashes)
    .fetch_one(&pa)
    .await
    .unwrap();
    assert_eq!(inserted, 3);
    let chained: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT seq, prev_hash, hash FROM decisions WHERE tenant = $1 AND stream = $2 \
         ORDER BY seq",
    )
    .bind(&ta)
    .bind(raw)
    .fetch_all(&pa)
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

    a.close().await;
    b.close().await;
}
