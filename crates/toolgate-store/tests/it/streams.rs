//! Decision chains per (tenant, stream), the legacy stream, stream links
//! and checkpoint positions, on both engines.

use crate::common::rid;
use std::sync::Arc;

use toolgate_store::{DecisionRecord, GENESIS_HASH, LEGACY_STREAM, Store, genesis_hash};

fn record(i: usize) -> DecisionRecord {
    DecisionRecord {
        decision_id: format!("dec-{i}"),
        run_id: "run-1".into(),
        step_id: format!("step-{i}"),
        tool: "shell.exec".into(),
        verdict: "allow".into(),
        reason: "rule_matched".into(),
        message: None,
        matched_rule: Some("r1".into()),
        policy_version: "default@0123456789ab+h01234567".into(),
        risk: "low".into(),
        args_digest: format!("sha256:{i}"),
        call_digest: Some(format!("sha256:call-{i}")),
        definition_digest: None,
        created_at: jiff::Timestamp::now(),
    }
}

async fn report(store: &Store, tenant: &str, stream: &str) -> toolgate_store::ChainReport {
    store
        .decisions()
        .verify_stream(tenant, stream)
        .await
        .unwrap()
}

both_backends!(streams_verify_independently, |db| {
    let d = db.store.decisions();
    d.append_batch("acme", "pod-a/1", (0..5).map(record).collect())
        .await
        .unwrap();
    d.append_batch("acme", "pod-b/1", (0..4).map(record).collect())
        .await
        .unwrap();
    d.append("acme", LEGACY_STREAM, record(0)).await.unwrap();
    // Same records, different streams: different hashes (the stream is hashed).
    let a = d.list("acme", "pod-a/1", 0, 10).await.unwrap();
    let b = d.list("acme", "pod-b/1", 0, 10).await.unwrap();
    assert_ne!(a[0].hash, b[0].hash);
    assert_eq!(d.streams("acme").await.unwrap().len(), 3);
    let all = d.verify(Some("acme")).await.unwrap();
    assert_eq!(
        all.iter()
            .map(|r| (r.stream.as_str(), r.rows))
            .collect::<Vec<_>>(),
        vec![(LEGACY_STREAM, 1), ("pod-a/1", 5), ("pod-b/1", 4)]
    );
    assert!(all.iter().all(|r| r.ok), "{all:?}");

    // Editing one stream breaks only that stream.
    db.raw_both(
        "UPDATE decisions SET verdict = 'deny' WHERE tenant = 'acme' AND stream = 'pod-a/1' \
         AND seq = 3",
    )
    .await;
    let broken = report(&db.store, "acme", "pod-a/1").await;
    assert_eq!(broken.first_broken_seq, Some(3), "{broken:?}");
    assert!(report(&db.store, "acme", "pod-b/1").await.ok);
    assert!(report(&db.store, "acme", LEGACY_STREAM).await.ok);

    // Moving a row to another stream is detected (the stream is hashed).
    db.raw_both(
        "UPDATE decisions SET stream = 'pod-c/1' WHERE tenant = 'acme' AND stream = 'pod-b/1' \
         AND seq = 1",
    )
    .await;
    assert_eq!(
        report(&db.store, "acme", "pod-b/1").await.first_broken_seq,
        Some(1)
    );
    assert_eq!(
        report(&db.store, "acme", "pod-c/1").await.first_broken_seq,
        Some(1)
    );
});

both_backends!(legacy_stream_keeps_v1_hashes, |db| {
    let d = db.store.decisions();
    let first = d.append("acme", LEGACY_STREAM, record(1)).await.unwrap();
    assert_eq!(first.prev_hash, GENESIS_HASH);
    // The legacy chain is the pre-stream chain: the same row in a named
    // stream hashes differently.
    let named = d.append("acme", "pod/1", record(1)).await.unwrap();
    assert_ne!(named.hash, first.hash);
    assert!(d.verify(None).await.unwrap().iter().all(|r| r.ok));
});

both_backends!(concurrent_streams_are_all_chained, |db| {
    let store = Arc::new(db.store.clone());
    let mut tasks = tokio::task::JoinSet::new();
    const STREAMS: usize = 16;
    const EACH: usize = 12;
    for w in 0..STREAMS {
        let store = store.clone();
        tasks.spawn(async move {
            let stream = format!("pod-{w}/x");
            let mut seqs = Vec::new();
            for i in 0..EACH {
                let d = if i % 4 == 0 {
                    store
                        .decisions()
                        .append_batch("acme", &stream, vec![record(i), record(i + 100)])
                        .await
                        .unwrap()
                } else {
                    vec![
                        store
                            .decisions()
                            .append("acme", &stream, record(i))
                            .await
                            .unwrap(),
                    ]
                };
                seqs.extend(d.into_iter().map(|d| d.seq));
            }
            (stream, seqs)
        });
    }
    while let Some(r) = tasks.join_next().await {
        let (stream, seqs) = r.unwrap();
        let n = EACH + EACH / 4;
        assert_eq!(seqs, (1..=n as i64).collect::<Vec<_>>(), "{stream}");
    }
    let reports = store.decisions().verify(Some("acme")).await.unwrap();
    assert_eq!(reports.len(), STREAMS);
    for r in &reports {
        assert!(r.ok, "{r:?}");
        assert_eq!(r.rows, (EACH + EACH / 4) as u64);
    }
});

both_backends!(restart_links_to_the_previous_stream, |db| {
    let d = db.store.decisions();
    let s1 = d.open_stream("acme", "pod/1", None).await.unwrap();
    assert_eq!(s1.seq, 0);
    assert_eq!(s1.hash, genesis_hash("acme", "pod/1", None).unwrap());
    let rows = d
        .append_batch("acme", "pod/1", (0..4).map(record).collect())
        .await
        .unwrap();
    assert_eq!(rows[0].prev_hash, s1.hash);
    assert_eq!(
        d.latest_stream("acme", "pod/").await.unwrap().as_deref(),
        Some("pod/1")
    );
    assert_eq!(d.latest_stream("acme", "other/").await.unwrap(), None);

    let s2 = d.open_stream("acme", "pod/2", Some("pod/1")).await.unwrap();
    let link = s2.previous.clone().unwrap();
    assert_eq!((link.stream.as_str(), link.seq), ("pod/1", 4));
    assert_eq!(link.hash, rows[3].hash);
    assert_eq!(s2.hash, genesis_hash("acme", "pod/2", Some(&link)).unwrap());
    let first = d.append("acme", "pod/2", record(9)).await.unwrap();
    assert_eq!(first.prev_hash, s2.hash);
    assert_eq!(
        d.latest_stream("acme", "pod/").await.unwrap().as_deref(),
        Some("pod/2")
    );
    // pod/1 may keep growing (an in-flight batch of the old instance).
    d.append("acme", "pod/1", record(5)).await.unwrap();
    assert!(d.verify(Some("acme")).await.unwrap().iter().all(|r| r.ok));

    // Reopening, the legacy name and an unknown previous are refused.
    assert_eq!(
        d.open_stream("acme", "pod/1", None)
            .await
            .unwrap_err()
            .code(),
        "conflict"
    );
    assert_eq!(
        d.open_stream("acme", LEGACY_STREAM, None)
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
    assert_eq!(
        d.open_stream("acme", "pod/3", Some("pod/9"))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );

    // Editing the link breaks the new stream's first row.
    db.raw_both(
        "UPDATE decision_streams SET previous_seq = 3 WHERE tenant = 'acme' AND stream = 'pod/2'",
    )
    .await;
    let r = report(&db.store, "acme", "pod/2").await;
    assert_eq!(r.first_broken_seq, Some(1), "{r:?}");
    db.raw_both(
        "UPDATE decision_streams SET previous_seq = 4 WHERE tenant = 'acme' AND stream = 'pod/2'",
    )
    .await;
    assert!(report(&db.store, "acme", "pod/2").await.ok);

    // Truncating the previous stream below the link verifies for pod/1
    // alone but breaks pod/2's link.
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND stream = 'pod/1' AND seq >= 3")
        .await;
    assert!(report(&db.store, "acme", "pod/1").await.ok);
    let r = report(&db.store, "acme", "pod/2").await;
    assert!(!r.ok);
    assert_eq!(r.first_broken_seq, Some(0), "{r:?}");
    assert!(r.problem.unwrap().contains("previous-stream link"));
});

// Truncating a stream's tail is invisible to the chain alone (its head is
// its last row); a recorded position (what a signed checkpoint holds)
// exposes it. The CLI test signs and checks real checkpoints.
both_backends!(truncation_needs_a_checkpoint, |db| {
    let d = db.store.decisions();
    let rows = d
        .append_batch("acme", "pod/1", (0..6).map(record).collect())
        .await
        .unwrap();
    let verified = report(&db.store, "acme", "pod/1").await;
    assert!(verified.ok);
    assert_eq!((verified.last_seq, &verified.last_hash), (6, &rows[5].hash));
    let (seq, hash) = (verified.last_seq, verified.last_hash.clone());
    assert_eq!(
        d.check_position("acme", "pod/1", seq, &hash).await.unwrap(),
        None
    );
    assert_eq!(
        d.check_position("acme", "pod/1", 0, &rows[0].prev_hash)
            .await
            .unwrap(),
        None
    );

    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND stream = 'pod/1' AND seq >= 5")
        .await;
    // The chain alone: ok.
    let after = report(&db.store, "acme", "pod/1").await;
    assert!(after.ok, "{after:?}");
    assert_eq!(after.last_seq, 4);
    // The recorded position: gone.
    let problem = d.check_position("acme", "pod/1", seq, &hash).await.unwrap();
    assert!(problem.unwrap().contains("truncated"));
    // A rewrite (new rows at the same seqs, by a writer that reads the head
    // from the database: on PostgreSQL another process) is caught too.
    let writer = match db.pg() {
        Some(_) => db.peer_store().await,
        None => db.store.clone(),
    };
    let rewritten = writer
        .decisions()
        .append_batch("acme", "pod/1", (50..52).map(record).collect())
        .await
        .unwrap();
    assert_eq!(rewritten[0].seq, 5);
    assert!(report(&db.store, "acme", "pod/1").await.ok);
    let problem = d.check_position("acme", "pod/1", seq, &hash).await.unwrap();
    assert!(problem.unwrap().contains("rewritten"));
});

// A stream's register row keeps the position recorded when it was
// registered: seq 0 for new streams, the head as of migration 0008 for
// older ones. Rows beyond it are appends; the chain must still reach it and
// hold its hash there.
both_backends!(the_recorded_head_must_be_reached_and_held, |db| {
    let d = db.store.decisions();
    d.append_batch("acme", "pod/1", (0..3).map(record).collect())
        .await
        .unwrap();
    // Recorded at seq 2 (as a stream from before 0008 would be): rows 3.. are
    // appends since, and the head is the last row.
    db.raw(
        "UPDATE decision_streams SET seq = d.seq, prev_hash = d.prev_hash, hash = d.hash \
           FROM decisions d WHERE d.tenant = 'acme' AND d.stream = 'pod/1' AND d.seq = 2 \
           AND decision_streams.tenant = 'acme' AND decision_streams.stream = 'pod/1';",
        "UPDATE decision_streams SET (seq, prev_hash, hash) = (SELECT seq, prev_hash, hash \
           FROM decisions WHERE tenant = 'acme' AND stream = 'pod/1' AND seq = 2) \
           WHERE tenant = 'acme' AND stream = 'pod/1';",
    )
    .await;
    let r = report(&db.store, "acme", "pod/1").await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.last_seq, 3);
    assert_eq!(d.head("acme", "pod/1").await.unwrap().unwrap().seq, 3);
    let appended = d.append("acme", "pod/1", record(9)).await.unwrap();
    assert_eq!(appended.seq, 4);

    // Truncated below the recorded position: detected.
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND stream = 'pod/1' AND seq >= 2")
        .await;
    let r = report(&db.store, "acme", "pod/1").await;
    assert_eq!(r.first_broken_seq, Some(2), "{r:?}");
    assert!(r.problem.unwrap().contains("recorded head is at seq 2"));

    // A recorded hash the row does not carry: detected at that row.
    d.append_batch("acme", "pod/2", (0..3).map(record).collect())
        .await
        .unwrap();
    db.raw_both(&format!(
        "UPDATE decision_streams SET seq = 2, hash = '{}' WHERE tenant = 'acme' AND stream = 'pod/2'",
        "e".repeat(64)
    ))
    .await;
    let r = report(&db.store, "acme", "pod/2").await;
    assert_eq!(r.first_broken_seq, Some(2), "{r:?}");
    assert!(r.problem.unwrap().contains("recorded head does not match"));
});

both_backends!(stream_names_are_checked, |db| {
    let d = db.store.decisions();
    for bad in ["", " ", "a\nb"] {
        assert_eq!(
            d.append("acme", bad, record(1)).await.unwrap_err().code(),
            "invalid_input"
        );
    }
    assert_eq!(
        d.append("acme", &"x".repeat(2000), record(1))
            .await
            .unwrap_err()
            .code(),
        "invalid_input"
    );
});

/// The migrations up to 0005: the schema before streams existed.
fn before_streams(mut m: sqlx::migrate::Migrator) -> sqlx::migrate::Migrator {
    m.migrations = m
        .migrations
        .iter()
        .filter(|x| x.version <= 5)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    m
}

/// Rows chained by the 0004 trigger, before migration 0006, migrate into
/// the legacy stream with their hashes and keep verifying; the legacy
/// chain and new streams then grow side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_from_before_streams_keep_verifying() {
    use std::str::FromStr;
    let Some(db) = crate::common::TestDb::postgres().await else {
        return;
    };
    let url = std::env::var("TOOLGATE_TEST_DATABASE_URL").unwrap();
    let schema = format!("old_{}", uuid::Uuid::new_v4().simple());
    let admin = db.pg().unwrap().clone();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap();
    let options = sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    before_streams(sqlx::migrate!("../../migrations/postgres"))
        .run(&pool)
        .await
        .unwrap();
    for i in 0..3 {
        sqlx::query(
            "INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, reason, \
             policy_version, risk, args_digest, created_at) \
             VALUES ('acme', $1, 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', $2)",
        )
        .bind(format!("old-{i}"))
        .bind(1_700_000_000_000i64 + i)
        .execute(&pool)
        .await
        .unwrap();
    }
    let old: Vec<(i64, String)> = sqlx::query_as("SELECT seq, hash FROM decisions ORDER BY seq")
        .fetch_all(&pool)
        .await
        .unwrap();
    let store = Store::from_postgres_pool(pool);
    store.migrate().await.unwrap();
    let d = store.decisions();
    let reports = d.verify(Some("acme")).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].stream.as_str(), reports[0].rows),
        (LEGACY_STREAM, 3)
    );
    assert!(reports[0].ok, "{reports:?}");
    let migrated = d.list("acme", LEGACY_STREAM, 0, 10).await.unwrap();
    assert_eq!(
        migrated
            .iter()
            .map(|r| (r.seq, r.hash.clone()))
            .collect::<Vec<_>>(),
        old
    );
    assert_eq!(
        d.append("acme", LEGACY_STREAM, record(1))
            .await
            .unwrap()
            .seq,
        4
    );
    assert_eq!(d.append("acme", "pod/1", record(1)).await.unwrap().seq, 1);
    assert!(d.verify(None).await.unwrap().iter().all(|r| r.ok));
    store.close().await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await
        .unwrap();
    db.finish().await;
}

/// SQLite: a database at migration 0005 holding a v1 chain (written here
/// as the store writes the legacy stream, whose hashes are the v1 hashes)
/// is rebuilt by 0006 with rows, hashes and head intact, and verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rows_from_before_streams_keep_verifying() {
    let source = crate::common::TestDb::sqlite().await;
    let chained = source
        .store
        .decisions()
        .append_batch("acme", LEGACY_STREAM, (0..4).map(record).collect())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    before_streams(sqlx::migrate!("../../migrations/sqlite"))
        .run(&pool)
        .await
        .unwrap();
    for c in &chained {
        let r = &c.record;
        sqlx::query(
            "INSERT INTO decisions (tenant, seq, decision_id, run_id, step_id, tool, verdict, \
             reason, message, matched_rule, policy_version, risk, args_digest, call_digest, \
             definition_digest, created_at, prev_hash, hash) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        )
        .bind(&c.tenant)
        .bind(c.seq)
        .bind(&r.decision_id)
        .bind(&r.run_id)
        .bind(&r.step_id)
        .bind(&r.tool)
        .bind(&r.verdict)
        .bind(&r.reason)
        .bind(&r.message)
        .bind(&r.matched_rule)
        .bind(&r.policy_version)
        .bind(&r.risk)
        .bind(&r.args_digest)
        .bind(&r.call_digest)
        .bind(&r.definition_digest)
        .bind(r.created_at.as_millisecond())
        .bind(&c.prev_hash)
        .bind(&c.hash)
        .execute(&pool)
        .await
        .unwrap();
    }
    let store = Store::from_sqlite_pool(pool);
    store.migrate().await.unwrap();
    let d = store.decisions();
    let reports = d.verify(None).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].stream.as_str(), reports[0].rows),
        (LEGACY_STREAM, 4)
    );
    assert!(reports[0].ok, "{reports:?}");
    assert_eq!(reports[0].last_hash, chained[3].hash);
    assert_eq!(d.list("acme", LEGACY_STREAM, 0, 10).await.unwrap(), chained);
    assert_eq!(
        d.append("acme", LEGACY_STREAM, record(7))
            .await
            .unwrap()
            .seq,
        5
    );
    assert!(d.verify(None).await.unwrap().iter().all(|r| r.ok));
    store.close().await;
    source.finish().await;
}

/// A cut the owner's writer did not see shows as a gap.
#[tokio::test]
async fn postgres_a_writer_that_missed_a_cut_leaves_a_gap() {
    let Some(db) = crate::common::TestDb::postgres().await else {
        return;
    };
    let d = db.store.decisions();
    d.append_batch("acme", "pod/1", (0..6).map(record).collect())
        .await
        .unwrap();
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND stream = 'pod/1' AND seq >= 5")
        .await;
    // The owner's writer keeps its head in memory and skips the link check
    // (migration 0008): it goes on after the seq it wrote, and the cut shows
    // as missing rows rather than a silently shorter chain.
    let next = d.append("acme", "pod/1", record(7)).await.unwrap();
    assert_eq!(next.seq, 7);
    let r = report(&db.store, "acme", "pod/1").await;
    assert_eq!(r.first_broken_seq, Some(5), "{r:?}");
    assert!(r.problem.unwrap().contains("seq 5 is missing"));
    db.finish().await;
}

/// Two writers of one stream (two processes sharing a stream name by
/// mistake, or a restarted writer reusing one) each know a head that the
/// other makes stale: the database refuses the stale append (its seq is
/// taken), the writer re-reads the head and appends after it,
/// and the chain stays one line with no seq lost or repeated. A run-charged
/// append reads the head in its own transaction, not from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writers_of_one_stream_recover_from_a_stale_head() {
    let Some(db) = crate::common::TestDb::postgres().await else {
        return;
    };
    let first = db.store.clone();
    // Same database, its own memory of heads: another process.
    let second = db.peer_store().await;
    let (tenant, stream) = ("acme", "pod-a/shared");
    let mut seqs = Vec::new();
    for i in 0..3 {
        let writer = if i % 2 == 0 { &first } else { &second };
        seqs.push(
            writer
                .decisions()
                .append(tenant, stream, record(i))
                .await
                .unwrap()
                .seq,
        );
    }
    let batch = first
        .decisions()
        .append_batch(tenant, stream, vec![record(10), record(11)])
        .await
        .unwrap();
    seqs.extend(batch.iter().map(|d| d.seq));
    let limits = toolgate_store::RunLimits::default();
    let (_, charged) = second
        .runs()
        .admit_and_record(
            tenant,
            stream,
            &rid("run-9"),
            true,
            &limits,
            jiff::Timestamp::now(),
            None,
            |_, _| record(20),
        )
        .await
        .unwrap();
    seqs.push(charged.seq);
    seqs.push(
        first
            .decisions()
            .append(tenant, stream, record(21))
            .await
            .unwrap()
            .seq,
    );
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6, 7]);
    let rows = first
        .decisions()
        .list(tenant, stream, 0, 100)
        .await
        .unwrap();
    assert_eq!(rows.len(), 7);
    for pair in rows.windows(2) {
        assert_eq!(pair[1].prev_hash, pair[0].hash);
    }
    let verified = report(&first, tenant, stream).await;
    assert!(verified.ok, "{verified:?}");
    assert_eq!(verified.rows, 7);
    db.finish().await;
}

both_backends!(latest_checkpoints_are_one_per_stream, |db| {
    let cps = db.store.checkpoints();
    let at = jiff::Timestamp::now();
    let cp = |tenant: &str, stream: &str, seq: i64, keyid: &str| toolgate_store::Checkpoint {
        tenant: tenant.into(),
        stream: stream.into(),
        seq,
        hash: format!("h{seq}"),
        at,
        keyid: keyid.into(),
        envelope: format!("{{\"seq\":{seq}}}"),
    };
    for c in [
        cp("acme", "pod-a/1", 1, "k1"),
        cp("acme", "pod-a/1", 5, "k1"),
        cp("acme", "pod-a/1", 3, "k1"),
        cp("acme", "pod-a/1", 7, "k2"),
        cp("acme", "pod-b/1", 2, "k1"),
        cp("other", "pod-a/1", 9, "k1"),
    ] {
        assert!(cps.record(&c).await.unwrap());
    }
    let positions = |list: Vec<toolgate_store::Checkpoint>| {
        list.into_iter()
            .map(|c| (c.tenant, c.stream, c.seq, c.keyid))
            .collect::<Vec<_>>()
    };
    let s = |t: &str, st: &str, seq: i64, k: &str| (t.to_owned(), st.to_owned(), seq, k.to_owned());
    // Newest per stream, any signer.
    assert_eq!(
        positions(cps.latest(None, None).await.unwrap()),
        vec![
            s("acme", "pod-a/1", 7, "k2"),
            s("acme", "pod-b/1", 2, "k1"),
            s("other", "pod-a/1", 9, "k1"),
        ]
    );
    // Newest per stream of one signer, one tenant.
    assert_eq!(
        positions(cps.latest(Some("acme"), Some("k1")).await.unwrap()),
        vec![s("acme", "pod-a/1", 5, "k1"), s("acme", "pod-b/1", 2, "k1")]
    );
    assert!(
        cps.latest(Some("acme"), Some("k3"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        cps.latest(Some(""), None).await.unwrap_err().code(),
        "invalid_input"
    );
});
