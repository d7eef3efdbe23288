//! Measurements of archiving (#45 part 5), ignored by default: run with
//! `cargo test --release -p toolgate --test it archive_measure -- --ignored
//! --nocapture` (`TOOLGATE_ARCHIVE_BENCH_ROWS`, default 100,000).

use std::path::Path;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use toolgate_store::Store;

use crate::archive_cli::{engines, records, toolgate};

/// Measures archiving: `TOOLGATE_ARCHIVE_BENCH_ROWS` rows (default
/// 100,000) of one stream, all old, on each engine; prints the archive's
/// and the offline verification's wall time. Run with `--ignored
/// --nocapture` (a release build for real numbers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_archive() {
    let rows = bench_rows();
    let tmp = tempfile::tempdir().unwrap();
    let (key_path, trust_path, _) = crate::common::key_files(tmp.path());
    for (n, url) in engines(tmp.path()).await.into_iter().enumerate() {
        let store = Store::connect(&url).await.unwrap();
        let appended = append_rows(&store, rows, SignedDuration::from_hours(2)).await;
        let out = tmp.path().join(format!("bench-{n}"));
        let (archived, archive_time) = archive(&url, &out, key_path.as_str());
        let started = std::time::Instant::now();
        let (code, offline) = toolgate(&[
            "audit",
            "verify",
            "--archive",
            out.to_str().unwrap(),
            "--trust",
            trust_path.as_str(),
        ]);
        let verify_time = started.elapsed();
        assert_eq!(code, Some(0), "{offline}");
        let bytes: u64 = archived["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                std::fs::metadata(out.join(s["file"].as_str().unwrap()))
                    .unwrap()
                    .len()
            })
            .sum();
        eprintln!(
            "MEASURE {} rows={} append={:?} archive={:?} (archived {} pruned {}, {} bytes gz) \
             verify_offline={:?}",
            &url[..8],
            rows,
            appended,
            archive_time,
            archived["records"],
            archived["pruned"],
            bytes,
            verify_time
        );
        store.close().await;
    }
}

/// PostgreSQL: archiving `TOOLGATE_ARCHIVE_BENCH_ROWS` rows of one stream
/// twice, each in a fresh schema. The peer: rows of this month, which
/// pruning deletes one by one (what every archive did before migration
/// 0018). Then the same rows two months old, in a month partition of their
/// own (a store that has run for months), which the run drops whole. Each
/// stream's head is a row of now, so it stays live. Prints the archive's
/// wall time and what it pruned and dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn measure_archive_by_partition() {
    let rows = bench_rows();
    let tmp = tempfile::tempdir().unwrap();
    let (key_path, _, _) = crate::common::key_files(tmp.path());
    for past in [false, true] {
        let Some(url) = engines(tmp.path()).await.into_iter().nth(1) else {
            return;
        };
        let store = Store::connect(&url).await.unwrap();
        let pool = store.as_postgres().unwrap().clone();
        let age = if past {
            past_month_layout(&pool).await
        } else {
            SignedDuration::from_hours(2)
        };
        let mut appended = append_rows(&store, rows, age).await;
        appended += append_rows_head(&store, rows).await;
        let out = tmp.path().join(format!("by-partition-{past}"));
        let (archived, archive_time) = archive(&url, &out, key_path.as_str());
        assert_eq!(archived["records"], rows as u64, "{archived}");
        let (code, live) = toolgate(&["audit", "verify", "--database", &url]);
        assert_eq!(code, Some(0), "{live}");
        eprintln!(
            "MEASURE postgres rows={rows} {} append={appended:?} archive={archive_time:?} \
             pruned={} partitions={}",
            if past { "past-month" } else { "this-month" },
            archived["pruned"],
            archived["partitions"],
        );
        store.close().await;
    }
}

/// Replaces the partition of the rows from before migration 0018 (empty in
/// a fresh schema) by one for two months ago and one per month since, as a
/// store that has run for months has them; returns an age that falls in
/// the oldest.
async fn past_month_layout(pool: &sqlx::PgPool) -> SignedDuration {
    let now = Timestamp::now().as_millisecond();
    let month = |m: i32| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT toolgate_decision_month($1, $2)")
                .bind(now)
                .bind(m)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    sqlx::raw_sql(
        "ALTER TABLE decisions DETACH PARTITION decisions_before_partitioning; \
         DROP TABLE decisions_before_partitioning",
    )
    .execute(pool)
    .await
    .unwrap();
    for m in [-2, -1] {
        let (lo, hi) = (month(m).await, month(m + 1).await);
        sqlx::raw_sql(&format!(
            "CREATE TABLE decisions_past{} PARTITION OF decisions FOR VALUES FROM ({lo}) TO ({hi})",
            -m
        ))
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("SELECT toolgate_ensure_decision_partitions(2)")
        .execute(pool)
        .await
        .unwrap();
    SignedDuration::from_millis(now - (month(-2).await + 86_400_000))
}

/// Rows of the bench (`TOOLGATE_ARCHIVE_BENCH_ROWS`, default 100,000).
fn bench_rows() -> usize {
    std::env::var("TOOLGATE_ARCHIVE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// Appends `rows` records created `age` ago to stream `pod/1`, in batches
/// of 10,000; returns the time it took.
async fn append_rows(store: &Store, rows: usize, age: SignedDuration) -> Duration {
    let started = Instant::now();
    let mut done = 0;
    while done < rows {
        let batch = (rows - done).min(10_000);
        store
            .decisions()
            .append_batch("bench", "pod/1", records(done, batch, age))
            .await
            .unwrap();
        done += batch;
    }
    started.elapsed()
}

/// `toolgate audit archive` of every row older than an hour into `out`;
/// its report and wall time. Fails the test when the command does.
fn archive(url: &str, out: &Path, key: &str) -> (Value, Duration) {
    let before = (Timestamp::now() - SignedDuration::from_hours(1)).to_string();
    let started = Instant::now();
    let (code, archived) = toolgate(&[
        "audit",
        "archive",
        "--database",
        url,
        "--before",
        &before,
        "--out",
        out.to_str().unwrap(),
        "--key",
        key,
    ]);
    let took = started.elapsed();
    assert_eq!(code, Some(0), "{archived}");
    (archived, took)
}

/// The stream's head: one row of now after the `rows` old ones, so it
/// stays live while they are archived.
async fn append_rows_head(store: &Store, rows: usize) -> Duration {
    let started = Instant::now();
    store
        .decisions()
        .append_batch("bench", "pod/1", records(rows, 1, SignedDuration::ZERO))
        .await
        .unwrap();
    started.elapsed()
}
