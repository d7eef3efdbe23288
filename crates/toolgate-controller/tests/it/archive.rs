//! The controller's archive schedule (`--archive-after`): every pass moves
//! the rows older than the cutoff into the one archive directory, later
//! passes continue it (each stream's segments follow on), a failed pass
//! leaves the rows live and the next one archives them, and the metrics say
//! what was moved.

use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use toolgate_bundle::{CheckpointPayload, TrustSet};
use toolgate_controller::archive::schedule::{ArchiveSchedule, archive_once, run_archives};
use toolgate_controller::archive::{Segment, read_manifests};
use toolgate_store::{DecisionRecord, Store};

use crate::common::*;

/// [`decision`] `i`, made `age` before [`now`].
fn record(i: usize, age: SignedDuration) -> DecisionRecord {
    DecisionRecord {
        created_at: now() - age,
        ..decision(i)
    }
}

fn old(from: usize, n: usize) -> Vec<DecisionRecord> {
    (from..from + n)
        .map(|i| record(i, SignedDuration::from_hours(48)))
        .collect()
}

/// Every segment the directory's manifests list, by first seq.
fn segments(dir: &std::path::Path) -> Vec<Segment> {
    let mut all: Vec<Segment> = read_manifests(dir)
        .unwrap()
        .into_iter()
        .flat_map(|m| m.manifest.unwrap().segments)
        .collect();
    all.sort_by_key(|s| (s.stream.clone(), s.first_seq));
    all
}

async fn live(store: &Store, stream: &str) -> Vec<i64> {
    store
        .decisions()
        .list(NS, stream, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.seq)
        .collect()
}

#[tokio::test]
async fn passes_continue_one_directory_and_keep_each_streams_head() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", tmp.path().join("tg.db").display());
    let store = Store::connect(&url).await.unwrap();
    let d = store.decisions();
    d.append_batch(NS, "pod-a/1", old(0, 3)).await.unwrap();
    // A recent row: it stays live (the stream's head), the older ones go.
    d.append_batch(NS, "pod-a/1", vec![record(3, SignedDuration::from_mins(5))])
        .await
        .unwrap();
    d.append_batch(NS, "pod-b/1", old(10, 2)).await.unwrap();
    let (client, _server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let schedule = ArchiveSchedule {
        after: SignedDuration::from_hours(24),
        dir: tmp.path().join("archive"),
        interval: Duration::from_secs(3600),
    };

    let run = archive_once(&ctx, &schedule).await.unwrap();
    assert!(run.ok, "{run:?}");
    // pod-a: seq 1-3 (seq 4 is recent); pod-b: seq 1 (seq 2 is its head).
    assert_eq!((run.rows(), run.pruned()), (4, 4), "{run:?}");
    assert_eq!(live(&store, "pod-a/1").await, [4]);
    assert_eq!(live(&store, "pod-b/1").await, [2]);

    // Nothing new: no manifest, nothing pruned.
    let idle = archive_once(&ctx, &schedule).await.unwrap();
    assert!(idle.ok && idle.manifest.is_none() && idle.segments.is_empty());

    // Later rows, archived by a later pass into the same directory.
    d.append_batch(NS, "pod-a/1", old(4, 2)).await.unwrap();
    let ctx = context(
        mock_client().0,
        store.clone(),
        now() + SignedDuration::from_hours(24),
    );
    let again = archive_once(&ctx, &schedule).await.unwrap();
    assert!(again.ok, "{again:?}");
    // seq 4 to 5 (seq 6, the newest, stays as the head).
    assert_eq!(again.pruned(), 2, "{again:?}");
    assert_eq!(live(&store, "pod-a/1").await, [6]);
    assert_eq!(read_manifests(&schedule.dir).unwrap().len(), 2);
    let listed: Vec<(String, i64, i64)> = segments(&schedule.dir)
        .into_iter()
        .map(|s| (s.stream, s.first_seq, s.last_seq))
        .collect();
    assert_eq!(
        listed,
        [
            ("pod-a/1".into(), 1, 3),
            ("pod-a/1".into(), 4, 5),
            ("pod-b/1".into(), 1, 1)
        ]
    );
    // Every segment follows on from the one before, its checkpoint signed
    // by the controller's key, and its file is where the manifest says.
    let trust = TrustSet::from_keys([key().public_key()]).unwrap();
    let all = segments(&schedule.dir);
    assert_eq!(all[1].prev_hash, all[0].last_hash);
    for s in &all {
        let (payload, _) = CheckpointPayload::verify(s.checkpoint.as_bytes(), &trust).unwrap();
        assert_eq!((payload.seq, &payload.hash), (s.last_seq, &s.last_hash));
        assert!(schedule.dir.join(&s.file).is_file(), "{}", s.file);
    }
    // The live chain still verifies from its archive position.
    assert!(
        store
            .decisions()
            .verify(None)
            .await
            .unwrap()
            .iter()
            .all(|r| r.ok)
    );
    store.close().await;
}

#[tokio::test]
async fn a_failed_pass_is_retried_and_never_stops_the_loop() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", tmp.path().join("tg.db").display());
    let store = Store::connect(&url).await.unwrap();
    store
        .decisions()
        .append_batch(NS, "pod-a/1", old(0, 4))
        .await
        .unwrap();
    let (client, _server) = mock_client();
    let ctx = context(client, store.clone(), now());
    // The directory cannot be created: a file is in its way.
    let dir = tmp.path().join("archive");
    std::fs::write(&dir, b"not a directory").unwrap();
    let schedule = ArchiveSchedule {
        after: SignedDuration::from_hours(24),
        dir: dir.clone(),
        interval: Duration::from_millis(50),
    };
    let err = archive_once(&ctx, &schedule).await.unwrap_err();
    assert_eq!(err.code(), "archive_file", "{err}");
    assert_eq!(live(&store, "pod-a/1").await, [1, 2, 3, 4]);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_archives(Arc::clone(&ctx), schedule, stop_rx));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!task.is_finished());
    assert_eq!(ctx.metrics.archive_rows.get(), 0);
    assert_eq!(ctx.metrics.archive_last_success.get(), 0.0);
    std::fs::remove_file(&dir).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ctx.metrics.archive_rows.get() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never archived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ctx.metrics.archive_rows.get(), 3);
    assert_eq!(
        ctx.metrics.archive_last_success.get(),
        now().as_millisecond() as f64 / 1000.0
    );
    assert_eq!(live(&store, "pod-a/1").await, [4]);
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    store.close().await;
}

/// A decision row of `tenant`'s stream `pod-z/1` at `seq`, written around
/// the store (as a tenant's own role can insert its rows), with `hash` and
/// `created_at` as given.
async fn plant(store: &Store, tenant: &str, seq: i64, prev: &str, hash: &str, at: i64) {
    sqlx::query(
        "INSERT INTO decisions (tenant, stream, seq, decision_id, run_id, step_id, tool, \
         verdict, reason, policy_version, risk, args_digest, created_at, prev_hash, hash) \
         VALUES ($1, 'pod-z/1', $2, 'd', 'r', 's', 't', 'allow', 'x', 'p', 'low', 'a', $3, $4, $5)",
    )
    .bind(tenant)
    .bind(seq)
    .bind(at)
    .bind(prev)
    .bind(hash)
    .execute(store.as_sqlite().unwrap())
    .await
    .unwrap();
}

/// Review finding: each tenant writes its own decision rows, and one
/// stream whose chain is broken (a hash the database does not recompute)
/// or whose row does not read back (a time out of range, as a tenant's own
/// role could write before migration 0022) stopped the archive of every
/// tenant's log, every pass. Now such a stream is skipped, nothing of it
/// signed or deleted, and every other stream is archived; the pass logs
/// and counts each skipped stream once.
#[tokio::test]
async fn one_tenants_broken_stream_holds_back_only_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", tmp.path().join("tg.db").display());
    let store = Store::connect(&url).await.unwrap();
    store
        .decisions()
        .append_batch(NS, "pod-a/1", old(0, 3))
        .await
        .unwrap();
    let recent = now().as_millisecond();
    let long_ago = (now() - SignedDuration::from_hours(48)).as_millisecond();
    for (tenant, at, hash) in [("team-y", long_ago, "bogus"), ("team-z", i64::MIN, "h1")] {
        let genesis = toolgate_store::genesis_hash(tenant, "pod-z/1", None).unwrap();
        plant(&store, tenant, 1, &genesis, hash, at).await;
        plant(&store, tenant, 2, hash, "h2", recent).await;
    }
    let ctx = context(mock_client().0, store.clone(), now());
    let schedule = ArchiveSchedule {
        after: SignedDuration::from_hours(24),
        dir: tmp.path().join("archive"),
        interval: Duration::from_millis(50),
    };

    let run = archive_once(&ctx, &schedule).await.unwrap();
    assert!(!run.ok, "{run:?}");
    assert_eq!((run.rows(), run.pruned()), (2, 2), "{run:?}");
    assert_eq!(live(&store, "pod-a/1").await, [3]);
    let skipped: Vec<&str> = run.skipped.iter().map(|s| s.tenant.as_str()).collect();
    assert_eq!(skipped, ["team-y", "team-z"], "{run:?}");
    assert!(
        run.skipped[1].problem.contains("does not read back"),
        "{run:?}"
    );
    assert!(run.problem.unwrap().contains("team-y"));
    // Nothing of the skipped streams was signed or deleted.
    let checkpoints = store.checkpoints().list(None, None).await.unwrap();
    assert!(
        checkpoints.iter().all(|c| c.tenant == NS),
        "{checkpoints:?}"
    );
    for tenant in ["team-y", "team-z"] {
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM decisions WHERE tenant = $1")
            .bind(tenant)
            .fetch_one(store.as_sqlite().unwrap())
            .await
            .unwrap();
        assert_eq!(rows, 2, "{tenant}");
    }

    // The scheduled loop logs and counts each skipped stream once.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_archives(Arc::clone(&ctx), schedule, stop_rx));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_unreadable_rows_total{pass=\"archive\"} 2"),
        "{metrics}"
    );
    store.close().await;
}
