//! Archiving a stream's prefix and pruning it from the live table (#45
//! part 5), on both engines: verification continues from the archive's
//! checkpoint, pruning needs a stored checkpoint of a live, non-head row,
//! rows deleted without one are still a gap, and appends go on.

use crate::common::builders::{checkpoint_of, record};
use jiff::{SignedDuration, Timestamp};
use toolgate_store::{Position, Store, StoreError, genesis_hash};

/// `n` records created `age` ago (and one millisecond apart).
fn aged(from: usize, n: usize, age: SignedDuration) -> Vec<toolgate_store::DecisionRecord> {
    let at = Timestamp::now() - age;
    (from..from + n)
        .map(|i| {
            let mut r = record(i);
            r.created_at = at + SignedDuration::from_millis(i as i64);
            r
        })
        .collect()
}

async fn verified(store: &Store, tenant: &str, stream: &str) -> toolgate_store::ChainReport {
    store
        .decisions()
        .verify_stream(tenant, stream)
        .await
        .unwrap()
}

const HOUR: SignedDuration = SignedDuration::from_hours(1);

both_backends!(archive_prune_then_verify_and_append, |db| {
    let d = db.store.decisions();
    let (t, s) = ("acme", "pod/1");
    d.append_batch(t, s, aged(0, 6, HOUR * 2)).await.unwrap();
    d.append_batch(t, s, aged(6, 4, SignedDuration::ZERO))
        .await
        .unwrap();
    let before = Timestamp::now() - HOUR;

    let range = d.archive_range(t, s, before).await.unwrap().unwrap();
    assert_eq!((range.first_seq, range.last_seq), (1, 6));
    assert_eq!(range.prev_hash, genesis_hash(t, s, None).unwrap());
    let rows = d.archive_prefix(t, s, before).await.unwrap();
    assert_eq!(rows.len(), 6);
    let mut prev = range.prev_hash.clone();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.chain_problem(i as i64 + 1, &prev), None);
        prev = row.hash.clone();
    }
    let ranges = d.archive_ranges(None, before).await.unwrap();
    assert_eq!(ranges, vec![range.clone()]);

    let last = rows.last().unwrap();
    let cp = checkpoint_of(last);
    assert!(db.store.checkpoints().record(&cp).await.unwrap());
    // On PostgreSQL rows of a past month (this test near a month's start)
    // go with the partition step that archiving runs next.
    let pruned = d.prune_through(&cp).await.unwrap();
    let rest = d.drop_archived_partitions().await.unwrap();
    assert_eq!(pruned + rest.rows_dropped + rest.rows_deleted, 6);
    assert_eq!(
        d.archived_through(t, s).await.unwrap(),
        Some(Position {
            seq: 6,
            hash: last.hash.clone()
        })
    );
    assert_eq!(d.list(t, s, 0, 100).await.unwrap()[0].seq, 7);

    // The live chain continues from the archive's checkpoint.
    let after = verified(&db.store, t, s).await;
    assert!(after.ok, "{after:?}");
    assert_eq!((after.rows, after.last_seq), (4, 10));
    let all = d.verify(None).await.unwrap();
    assert!(all.iter().all(|r| r.ok), "{all:?}");
    // Checkpoints at or below the archive are checked against it.
    assert_eq!(
        d.check_live_position(t, s, 6, &last.hash).await.unwrap(),
        None
    );
    assert_eq!(
        d.check_live_position(t, s, 3, &rows[2].hash).await.unwrap(),
        None
    );
    assert!(
        d.check_live_position(t, s, 6, &rows[2].hash)
            .await
            .unwrap()
            .unwrap()
            .contains("rewritten")
    );
    // A trusted position below or at the archive starts from the archive.
    for (seq, hash) in [(3, &rows[2].hash), (6, &last.hash)] {
        let trusted = [(
            (t.to_owned(), s.to_owned()),
            Position {
                seq,
                hash: hash.clone(),
            },
        )]
        .into();
        let r = d.verify_from(Some(t), &trusted).await.unwrap();
        assert!(r[0].ok, "{r:?}");
        assert_eq!(r[0].last_seq, 10);
    }

    // Appends continue the chain (from another process's view too).
    let peer = db.peer_store().await;
    let more = peer
        .decisions()
        .append_batch(t, s, aged(10, 2, SignedDuration::ZERO))
        .await
        .unwrap();
    assert_eq!(more[0].seq, 11);
    let grown = verified(&db.store, t, s).await;
    assert!(grown.ok && grown.last_seq == 12, "{grown:?}");

    // A second archive continues from the first; the head stays live.
    let future = Timestamp::now() + HOUR;
    let next = d.archive_range(t, s, future).await.unwrap().unwrap();
    assert_eq!((next.first_seq, next.last_seq), (7, 11));
    assert_eq!(next.prev_hash, last.hash);
    assert_eq!(next.previous, None);
    let rows2 = d.archive_prefix(t, s, future).await.unwrap();
    assert_eq!(rows2.len(), 5);
    assert_eq!(rows2[0].chain_problem(7, &last.hash), None);
    let cp2 = checkpoint_of(rows2.last().unwrap());
    db.store.checkpoints().record(&cp2).await.unwrap();
    assert_eq!(d.prune_through(&cp2).await.unwrap(), 5);
    let after2 = verified(&db.store, t, s).await;
    assert!(
        after2.ok && after2.rows == 1 && after2.last_seq == 12,
        "{after2:?}"
    );
    assert_eq!(d.archive_range(t, s, future).await.unwrap(), None);
    if peer.as_postgres().is_none() {
        peer.close().await;
    }
});

both_backends!(pruning_needs_a_stored_checkpoint_and_keeps_the_head, |db| {
    let d = db.store.decisions();
    let (t, s) = ("acme", "pod/2");
    let rows = d.append_batch(t, s, aged(0, 5, HOUR * 2)).await.unwrap();

    // Not stored: refused, nothing deleted.
    let unstored = checkpoint_of(&rows[2]);
    let e = d.prune_through(&unstored).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
    // Stored under another hash: refused.
    let mut forged = checkpoint_of(&rows[2]);
    forged.hash = rows[1].hash.clone();
    db.store.checkpoints().record(&forged).await.unwrap();
    let e = d.prune_through(&checkpoint_of(&rows[2])).await.unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
    // The head stays live.
    let head = checkpoint_of(&rows[4]);
    db.store.checkpoints().record(&head).await.unwrap();
    let e = d.prune_through(&head).await.unwrap_err();
    assert!(e.to_string().contains("stays live"), "{e}");
    assert_eq!(d.list(t, s, 0, 100).await.unwrap().len(), 5);
    assert!(verified(&db.store, t, s).await.ok);
    // Never through seq 0.
    let mut zero = checkpoint_of(&rows[0]);
    zero.seq = 0;
    assert!(d.prune_through(&zero).await.is_err());

    // Archived through 2 properly...
    let cp = checkpoint_of(&rows[1]);
    db.store.checkpoints().record(&cp).await.unwrap();
    assert_eq!(d.prune_through(&cp).await.unwrap(), 2);
    assert!(verified(&db.store, t, s).await.ok);
    // ...but a row deleted beyond the archive is a gap.
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND stream = 'pod/2' AND seq = 3")
        .await;
    let gap = verified(&db.store, t, s).await;
    assert!(!gap.ok);
    assert_eq!(gap.first_broken_seq, Some(3));

    // Rows deleted with no archive at all fail as before.
    let other = "pod/3";
    d.append_batch(t, other, aged(0, 4, HOUR * 2))
        .await
        .unwrap();
    db.raw_both("DELETE FROM decisions WHERE tenant = 'acme' AND stream = 'pod/3' AND seq <= 2")
        .await;
    let cut = verified(&db.store, t, other).await;
    assert!(!cut.ok);
    assert_eq!(cut.first_broken_seq, Some(1));
    assert!(cut.problem.unwrap().contains("seq 1 is missing"));
});

// An archive record that disagrees with its checkpoint is corrupt, and a
// rewritten row at the archive's seq is refused for pruning.
both_backends!(a_forged_archive_record_fails_verification, |db| {
    let d = db.store.decisions();
    let (t, s) = ("acme", "pod/4");
    let rows = d.append_batch(t, s, aged(0, 5, HOUR * 2)).await.unwrap();
    let cp = checkpoint_of(&rows[2]);
    db.store.checkpoints().record(&cp).await.unwrap();
    assert_eq!(d.prune_through(&cp).await.unwrap(), 3);
    assert!(verified(&db.store, t, s).await.ok);
    db.raw_both(
        "UPDATE decision_archives SET hash = 'ab' WHERE tenant = 'acme' AND stream = 'pod/4'",
    )
    .await;
    let forged = verified(&db.store, t, s).await;
    assert!(!forged.ok, "{forged:?}");
    assert!(forged.problem.unwrap().contains("no checkpoint"));
    // Pretending an archive that the checkpoints table lacks is refused by
    // the foreign key.
    let e = sqlx_insert_archive(&db).await;
    assert!(
        e,
        "an archive record without its checkpoint must be refused"
    );
});

/// Whether inserting an archive record with no checkpoint fails.
async fn sqlx_insert_archive(db: &crate::common::TestDb) -> bool {
    let sql = "INSERT INTO decision_archives (tenant, stream, seq, hash, at) \
               VALUES ('acme', 'pod/9', 4, 'x', 0)";
    match (db.pg(), db.store.as_sqlite()) {
        (Some(pg), _) => sqlx::query(sql).execute(pg).await.is_err(),
        (None, Some(lite)) => sqlx::query(sql).execute(lite).await.is_err(),
        _ => unreachable!(),
    }
}

/// A tenant role cannot prune its own stream (it holds no DELETE on
/// decisions nor INSERT on decision_archives); the admin can.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_role_cannot_prune() {
    use crate::common::tenants::{Fixture, suffix};
    let Some(mut fx) = Fixture::new().await else {
        return;
    };
    let tenant = format!("ta-{}", suffix());
    let store = fx.tenant_store(&tenant).await;
    let rows = store
        .decisions()
        .append_batch(&tenant, "pod/1", aged(0, 4, HOUR * 2))
        .await
        .unwrap();
    let cp = checkpoint_of(&rows[1]);
    fx.admin.checkpoints().record(&cp).await.unwrap();
    let e = store.decisions().prune_through(&cp).await.unwrap_err();
    assert!(matches!(e, StoreError::PermissionDenied(_)), "{e}");
    assert_eq!(
        fx.admin
            .decisions()
            .list(&tenant, "pod/1", 0, 10)
            .await
            .unwrap()
            .len(),
        4
    );
    assert_eq!(fx.admin.decisions().prune_through(&cp).await.unwrap(), 2);
    // The tenant's own view verifies from the archive, and it appends on.
    assert!(
        store
            .decisions()
            .verify_stream(&tenant, "pod/1")
            .await
            .unwrap()
            .ok
    );
    let next = store
        .decisions()
        .append(&tenant, "pod/1", record(9))
        .await
        .unwrap();
    assert_eq!(next.seq, 5);
    assert!(
        fx.admin
            .decisions()
            .verify_stream(&tenant, "pod/1")
            .await
            .unwrap()
            .ok
    );
    store.close().await;
}
