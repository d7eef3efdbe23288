//! The decision chain on both engines: appending (also concurrently),
//! tampering detected by verification, and a failed batch leaving nothing.

use std::sync::Arc;

use crate::common::builders::{S, record};
use crate::common::faults::{fail_inserts, stop_failing};
use toolgate_store::{GENESIS_HASH, Store};

both_backends!(decision_chain_basics, |db| {
    let decisions = db.store.decisions();
    let first = decisions.append("acme", S, record(1)).await.unwrap();
    assert_eq!(first.seq, 1);
    // An unopened stream starts from its unlinked genesis.
    assert_eq!(
        first.prev_hash,
        toolgate_store::genesis_hash("acme", S, None).unwrap()
    );
    assert_ne!(first.prev_hash, GENESIS_HASH);
    assert_eq!(first.stream, S);
    assert_eq!(first.hash.len(), 64);
    let batch = decisions
        .append_batch("acme", S, (2..=5).map(record).collect())
        .await
        .unwrap();
    assert_eq!(
        batch.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![2, 3, 4, 5]
    );
    assert_eq!(batch[0].prev_hash, first.hash);
    for w in batch.windows(2) {
        assert_eq!(w[1].prev_hash, w[0].hash);
    }
    // Chains are per tenant.
    let other = decisions.append("globex", S, record(1)).await.unwrap();
    assert_eq!(other.seq, 1);
    assert_eq!(
        other.prev_hash,
        toolgate_store::genesis_hash("globex", S, None).unwrap()
    );
    assert_ne!(other.hash, first.hash, "tenant is part of the hash");

    let listed = decisions.list("acme", S, 0, 100).await.unwrap();
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[0], first);
    assert_eq!(&listed[1..], &batch[..]);

    let reports = decisions.verify(None).await.unwrap();
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert!(r.ok, "{r:?}");
    }
    let acme = decisions.verify(Some("acme")).await.unwrap();
    assert_eq!(acme[0].rows, 5);
    assert_eq!(
        decisions.append_batch("acme", S, vec![]).await.unwrap(),
        vec![]
    );
});

both_backends!(decision_concurrent_appenders, |db| {
    let store = Arc::new(db.store.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32usize {
        let store = store.clone();
        tasks.spawn(async move {
            if i.is_multiple_of(4) {
                store
                    .decisions()
                    .append_batch("acme", S, vec![record(i), record(i + 100)])
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|d| d.seq)
                    .collect::<Vec<_>>()
            } else {
                vec![
                    store
                        .decisions()
                        .append("acme", S, record(i))
                        .await
                        .unwrap()
                        .seq,
                ]
            }
        });
    }
    let mut seqs = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let got = r.unwrap();
        // A batch is contiguous.
        for w in got.windows(2) {
            assert_eq!(w[1], w[0] + 1);
        }
        seqs.extend(got);
    }
    seqs.sort_unstable();
    let n = 32 + 8;
    assert_eq!(seqs, (1..=n as i64).collect::<Vec<_>>());
    let report = &store.decisions().verify(Some("acme")).await.unwrap()[0];
    assert!(report.ok, "{report:?}");
    assert_eq!(report.rows, n);
});

async fn chain_of(db: &crate::common::TestDb, tenant: &str, n: usize) {
    db.store
        .decisions()
        .append_batch(tenant, S, (1..=n).map(record).collect())
        .await
        .unwrap();
    assert!(db.store.decisions().verify(Some(tenant)).await.unwrap()[0].ok);
}

async fn broken_at(store: &Store, tenant: &str) -> Option<i64> {
    let report = store
        .decisions()
        .verify(Some(tenant))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(report.ok, report.first_broken_seq.is_none(), "{report:?}");
    assert_eq!(report.ok, report.problem.is_none(), "{report:?}");
    report.first_broken_seq
}

both_backends!(decision_tamper_update, |db| {
    chain_of(&db, "acme", 6).await;
    chain_of(&db, "clean", 3).await;
    db.raw_both("UPDATE decisions SET verdict = 'allow' WHERE tenant = 'acme' AND seq = 3")
        .await;
    assert_eq!(broken_at(&db.store, "acme").await, Some(3));
    assert_eq!(
        broken_at(&db.store, "clean").await,
        None,
        "other tenants unaffected"
    );
    let all = db.store.decisions().verify(None).await.unwrap();
    assert_eq!(all.iter().filter(|r| !r.ok).count(), 1);
});

both_backends!(decision_tamper_update_time, |db| {
    chain_of(&db, "acme", 4).await;
    db.raw_both(
        "UPDATE decisions SET created_at = created_at + 1 WHERE tenant = 'acme' AND seq = 4",
    )
    .await;
    assert_eq!(broken_at(&db.store, "acme").await, Some(4));
});

both_backends!(decision_tamper_delete_middle, |db| {
    chain_of(&db, "acme", 6).await;
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND seq = 4")
        .await;
    assert_eq!(broken_at(&db.store, "acme").await, Some(4));
});

// Removing the newest rows leaves a chain consistent in itself: the head is
// the last row, so the chain alone cannot tell. The position signed before
// (a checkpoint) can; streams::truncation_needs_a_checkpoint and the CLI
// tests check real signed checkpoints.
both_backends!(decision_tamper_truncate_tail, |db| {
    chain_of(&db, "acme", 6).await;
    let before = db.store.decisions().verify_stream("acme", S).await.unwrap();
    assert_eq!(before.last_seq, 6);
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND seq >= 5")
        .await;
    assert_eq!(broken_at(&db.store, "acme").await, None);
    let problem = db
        .store
        .decisions()
        .check_position("acme", S, before.last_seq, &before.last_hash)
        .await
        .unwrap();
    assert!(problem.unwrap().contains("truncated"));
});

both_backends!(decision_tamper_swap_seq, |db| {
    chain_of(&db, "acme", 6).await;
    db.raw_both(
        "UPDATE decisions SET seq = 1000000 WHERE tenant = 'acme' AND seq = 2; \
         UPDATE decisions SET seq = 2 WHERE tenant = 'acme' AND seq = 5; \
         UPDATE decisions SET seq = 5 WHERE tenant = 'acme' AND seq = 1000000;",
    )
    .await;
    assert_eq!(broken_at(&db.store, "acme").await, Some(2));
});

both_backends!(decision_batch_failure_leaves_nothing, |db| {
    chain_of(&db, "acme", 2).await;
    fail_inserts(&db, "decisions", Some("NEW.seq = 5")).await;
    let err = db
        .store
        .decisions()
        .append_batch("acme", S, (10..15).map(record).collect())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "database_error", "{err}");
    stop_failing(&db, "decisions").await;
    assert_eq!(
        db.store
            .decisions()
            .list("acme", S, 0, 100)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        broken_at(&db.store, "acme").await,
        None,
        "head not advanced"
    );
    assert_eq!(
        db.store
            .decisions()
            .append("acme", S, record(3))
            .await
            .unwrap()
            .seq,
        3
    );
});
