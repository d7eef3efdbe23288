//! The decision table partitioned by month (#45 part 5, migration 0018):
//! an existing table becomes the first partition with its chains intact,
//! a seq is still taken once when two rows of it would land in different
//! partitions, and archived months are dropped whole.

use std::borrow::Cow;
use std::time::Duration;

use crate::common::TestDb;
use crate::common::builders::{checkpoint_of, record};
use crate::common::tenants::{admin_url, count, sqlstate, with_schema};
use jiff::Timestamp;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use toolgate_store::{DecisionRecord, Store};

const DAY_MS: i64 = 86_400_000;

/// The first millisecond of the UTC month `months` from now's.
async fn month(pool: &PgPool, months: i32) -> i64 {
    sqlx::query_scalar("SELECT toolgate_decision_month($1, $2)")
        .bind(Timestamp::now().as_millisecond())
        .bind(months)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// `n` records created from `at` on, a millisecond apart.
fn at(from: usize, n: usize, at_ms: i64) -> Vec<DecisionRecord> {
    (from..from + n)
        .map(|i| {
            let mut r = record(i);
            r.created_at = Timestamp::from_millisecond(at_ms + i as i64).unwrap();
            r
        })
        .collect()
}

async fn partition_of(pool: &PgPool, stream: &str, seq: i64) -> String {
    sqlx::query_scalar(
        "SELECT tableoid::regclass::text FROM decisions WHERE stream = $1 AND seq = $2",
    )
    .bind(stream)
    .bind(seq)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A raw INSERT of a row at `seq` by the session of `pool` (the owner's:
/// no link check, so the hash is arbitrary).
fn raw_row(stream: &str, seq: i64, created_at: i64) -> String {
    format!(
        "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
         VALUES ('acme', '{stream}', {seq}, 'd-{seq}-{created_at}', 'r', 's', 't', 'allow', \
         'x', 'p', 'low', 'd', {created_at}, '{}', '{}')",
        "0".repeat(64),
        "f".repeat(64)
    )
}

#[tokio::test]
async fn an_existing_table_becomes_the_first_partition_with_its_chains() {
    let Some(base) = admin_url() else { return };
    let root = PgPoolOptions::new()
        .max_connections(1)
        .connect(&base)
        .await
        .unwrap();
    let schema = format!("part_{}", uuid::Uuid::now_v7().simple());
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&root)
        .await
        .unwrap();
    let url = with_schema(&base, &schema);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    // The schema as the release before partitioning left it, with rows
    // chained by that release's trigger (rows without seq), one of them
    // two months old.
    let mut before = sqlx::migrate!("../../migrations/postgres");
    before.migrations = Cow::Owned(
        before
            .migrations
            .iter()
            .filter(|m| m.version < 18)
            .cloned()
            .collect(),
    );
    before.run(&pool).await.unwrap();
    let old = Timestamp::now().as_millisecond() - 62 * DAY_MS;
    for (i, stream) in ["pod/a", "pod/a", "pod/b", "pod/a", "pod/b"]
        .iter()
        .enumerate()
    {
        sqlx::query(
            "INSERT INTO decisions (tenant, stream, decision_id, run_id, step_id, tool, \
             verdict, reason, policy_version, risk, args_digest, created_at) \
             VALUES ('acme', $1, $2, 'r', 's', 't', 'allow', 'x', 'p', 'low', 'd', $3)",
        )
        .bind(stream)
        .bind(format!("old-{i}"))
        .bind(if i == 0 {
            old
        } else {
            Timestamp::now().as_millisecond()
        })
        .execute(&pool)
        .await
        .unwrap();
    }
    let heads_before: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT stream, seq, hash FROM decision_heads ORDER BY stream")
            .fetch_all(&pool)
            .await
            .unwrap();

    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_catalog.pg_partitioned_table \
             WHERE partrelid = 'decisions'::regclass"
        )
        .await,
        1
    );
    assert_eq!(
        partition_of(&pool, "pod/a", 1).await,
        "decisions_before_partitioning"
    );
    let reports = store.decisions().verify(None).await.unwrap();
    assert_eq!(reports.len(), 2);
    assert!(reports.iter().all(|r| r.ok), "{reports:?}");
    assert_eq!(reports.iter().map(|r| r.rows).sum::<u64>(), 5);
    let heads_after: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT stream, seq, hash FROM decision_heads ORDER BY stream")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(heads_after, heads_before);
    // Appends go on after the old rows; a row two months ahead lands in
    // its month's partition, created ahead.
    let d = store.decisions();
    let next = d.append("acme", "pod/a", record(9)).await.unwrap();
    assert_eq!(next.seq, 4);
    let ahead = month(&pool, 2).await + DAY_MS;
    let far = d
        .append_batch("acme", "pod/a", at(10, 1, ahead))
        .await
        .unwrap();
    assert_eq!(far[0].seq, 5);
    let name = partition_of(&pool, "pod/a", 5).await;
    assert!(name.starts_with("decisions_2"), "{name}");
    assert!(d.verify(None).await.unwrap().iter().all(|r| r.ok));
    store.close().await;
    pool.close().await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&root)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_seq_is_taken_once_across_partitions() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let pool = db.pg().unwrap().clone();
    let d = db.store.decisions();
    d.append_batch("acme", "pod/1", (0..3).map(record).collect())
        .await
        .unwrap();
    // Two writers race for seq 4, their rows a month apart: with the key
    // (tenant, stream, seq, created_at) alone both would land (a fork).
    let now = Timestamp::now().as_millisecond();
    let later = month(&pool, 1).await + DAY_MS;
    let mut first = pool.begin().await.unwrap();
    sqlx::raw_sql(&raw_row("pod/1", 4, now))
        .execute(&mut *first)
        .await
        .unwrap();
    let racer = {
        let pool = pool.clone();
        tokio::spawn(async move {
            match sqlx::raw_sql(&raw_row("pod/1", 4, later))
                .execute(&pool)
                .await
            {
                Ok(_) => "inserted".to_owned(),
                Err(sqlx::Error::Database(e)) => e.code().unwrap_or_default().into_owned(),
                Err(e) => panic!("{e}"),
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !racer.is_finished(),
        "the second writer waits for the stream"
    );
    first.commit().await.unwrap();
    assert_eq!(racer.await.unwrap(), "TG006");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM decisions WHERE stream = 'pod/1' AND seq = 4"
        )
        .await,
        1
    );
    // Below the head too, and at another isolation level not at all.
    assert_eq!(sqlstate(&pool, &raw_row("pod/1", 2, later)).await, "TG006");
    let mut repeatable = pool.begin().await.unwrap();
    sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *repeatable)
        .await
        .unwrap();
    let refused = sqlx::raw_sql(&raw_row("pod/1", 5, now))
        .execute(&mut *repeatable)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, sqlx::Error::Database(e) if e.code().as_deref() == Some("25000")),
        "{refused}"
    );
    repeatable.rollback().await.unwrap();
    db.finish().await;
}

#[tokio::test]
async fn archived_months_are_dropped_whole() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let pool = db.pg().unwrap().clone();
    // A store that has run for months: the partition of the rows from
    // before partitioning is gone, and months -3 to -1 have their own.
    sqlx::raw_sql(
        "ALTER TABLE decisions DETACH PARTITION decisions_before_partitioning; \
         DROP TABLE decisions_before_partitioning",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut names = Vec::new();
    for m in [-3, -2, -1] {
        let (lo, hi) = (month(&pool, m).await, month(&pool, m + 1).await);
        let name = format!("decisions_m{}", -m);
        sqlx::raw_sql(&format!(
            "CREATE TABLE {name} PARTITION OF decisions FOR VALUES FROM ({lo}) TO ({hi})"
        ))
        .execute(&pool)
        .await
        .unwrap();
        names.push(name);
    }
    let d = db.store.decisions();
    assert!(d.ensure_partitions().await.unwrap() >= 1, "this month's");
    let (m2, m1) = (
        month(&pool, -2).await + DAY_MS,
        month(&pool, -1).await + DAY_MS,
    );
    // Ten minutes ago: this month's unless the test runs in its first ten.
    let today = Timestamp::now().as_millisecond() - 10 * 60_000;
    d.append_batch("acme", "pod/a", at(0, 3, m2)).await.unwrap();
    d.append_batch("acme", "pod/a", at(3, 3, m1)).await.unwrap();
    d.append_batch("acme", "pod/a", at(6, 2, today))
        .await
        .unwrap();
    d.append_batch("acme", "pod/b", at(0, 2, m2)).await.unwrap();
    d.append_batch("acme", "pod/b", at(2, 1, today))
        .await
        .unwrap();
    assert_eq!(partition_of(&pool, "pod/a", 1).await, "decisions_m2");

    // Archive everything before month -1: pod/a through 3, pod/b through 2.
    let before = Timestamp::from_millisecond(month(&pool, -1).await).unwrap();
    let ranges = d.archive_ranges(None, before).await.unwrap();
    assert_eq!(
        ranges
            .iter()
            .map(|r| (r.stream.as_str(), r.last_seq))
            .collect::<Vec<_>>(),
        vec![("pod/a", 3), ("pod/b", 2)]
    );
    for r in &ranges {
        let row = d
            .list(&r.tenant, &r.stream, r.last_seq - 1, 1)
            .await
            .unwrap()
            .remove(0);
        let cp = checkpoint_of(&row);
        assert!(db.store.checkpoints().record(&cp).await.unwrap());
        assert_eq!(d.prune_through(&cp).await.unwrap(), 0, "past months wait");
    }
    let report = d.drop_archived_partitions().await.unwrap();
    assert_eq!(report.dropped, vec!["decisions_m3", "decisions_m2"]);
    assert_eq!((report.rows_dropped, report.rows_deleted), (5, 0));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'decisions_m2'"
        )
        .await,
        0
    );
    assert_eq!(d.list("acme", "pod/a", 0, 10).await.unwrap()[0].seq, 4);
    assert!(d.verify(None).await.unwrap().iter().all(|r| r.ok));

    // Archive up to five minutes ago: pod/a through 7 (its head, 8, stays),
    // so month -1 goes too; row 7 is this month's, deleted at once.
    let before = Timestamp::now() - jiff::SignedDuration::from_mins(5);
    let range = d
        .archive_range("acme", "pod/a", before)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((range.first_seq, range.last_seq), (4, 7));
    let row = d.list("acme", "pod/a", 6, 1).await.unwrap().remove(0);
    let cp = checkpoint_of(&row);
    assert!(db.store.checkpoints().record(&cp).await.unwrap());
    let pruned = d.prune_through(&cp).await.unwrap();
    let report = d.drop_archived_partitions().await.unwrap();
    assert_eq!(report.dropped, vec!["decisions_m1"]);
    assert_eq!(pruned + report.rows_dropped + report.rows_deleted, 4);
    assert_eq!(d.list("acme", "pod/a", 0, 10).await.unwrap()[0].seq, 8);
    assert!(d.verify(None).await.unwrap().iter().all(|r| r.ok));
    // Appends go on, and a second pass has nothing left to do.
    assert_eq!(d.append("acme", "pod/a", record(20)).await.unwrap().seq, 9);
    assert_eq!(
        d.drop_archived_partitions().await.unwrap(),
        Default::default()
    );
    db.finish().await;
}
