//! The controller's checkpoint pass against the mock API server: it signs
//! changed heads, publishes each tenant's latest checkpoints by server-side
//! apply, skips tenants without a namespace, and never signs a broken chain.

use crate::common::*;
use http::Method;
use toolgate_bundle::SigningKey;
use toolgate_bundle::{CheckpointPayload, TrustSet};
use toolgate_controller::checkpoint::{
    CHECKPOINT_CONFIGMAP, CHECKPOINT_FIELD, Verification, checkpoint_once, sign_heads,
};
use toolgate_store::Checkpoint;
use toolgate_store::Store;

/// Answers the apply of `namespace`'s checkpoint ConfigMap and returns the
/// published list.
async fn published(server: &mut ApiServer, namespace: &str) -> serde_json::Value {
    let path = format!("/api/v1/namespaces/{namespace}/configmaps/{CHECKPOINT_CONFIGMAP}");
    let got = server.expect(Method::PATCH, &path).await;
    assert_eq!(got.content_type, "application/apply-patch+yaml");
    assert!(
        got.query.contains("fieldManager=toolgate-controller") && got.query.contains("force=true"),
        "{}",
        got.query
    );
    let list: serde_json::Value =
        serde_json::from_str(got.body["data"][CHECKPOINT_FIELD].as_str().unwrap()).unwrap();
    got.echo();
    list
}

#[tokio::test]
async fn signs_changed_heads_and_publishes_them_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tg.db").display());
    let store = Store::connect(&url).await.unwrap();
    let d = store.decisions();
    d.append_batch(NS, "pod-a/1", (0..3).map(decision).collect())
        .await
        .unwrap();
    d.append_batch(
        "no-such-namespace",
        "pod-b/1",
        (0..2).map(decision).collect(),
    )
    .await
    .unwrap();

    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let trust = TrustSet::from_keys([key().public_key()]).unwrap();

    // First pass: both heads are signed; the tenant with a namespace gets
    // its ConfigMap, the other is skipped without failing the pass.
    let report = run(checkpoint_once(&ctx, Verification::Full), async move {
        let list = published(&mut server, NS).await;
        assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
        assert_eq!(
            (list[0]["stream"].as_str(), list[0]["seq"].as_i64()),
            (Some("pod-a/1"), Some(3))
        );
        let (payload, keyid) =
            CheckpointPayload::verify(list[0]["envelope"].as_str().unwrap().as_bytes(), &trust)
                .unwrap();
        assert_eq!((payload.tenant.as_str(), payload.seq), (NS, 3));
        assert_eq!(keyid, key().key_id());
        server
            .expect(
                Method::PATCH,
                &format!("/api/v1/namespaces/no-such-namespace/configmaps/{CHECKPOINT_CONFIGMAP}"),
            )
            .await
            .not_found();
    })
    .await
    .unwrap();
    assert_eq!((report.signed.len(), report.unchanged), (2, 0));
    assert_eq!(store.checkpoints().list(None, None).await.unwrap().len(), 2);

    // Nothing new: nothing signed, nothing written.
    let (client, server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let report = run(
        checkpoint_once(&ctx, Verification::SinceCheckpoint),
        async move { drop(server) },
    )
    .await
    .unwrap();
    assert_eq!((report.signed.len(), report.unchanged), (0, 2));

    // The stream grows: the new head is published, the old one replaced.
    d.append_batch(NS, "pod-a/1", (3..5).map(decision).collect())
        .await
        .unwrap();
    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let report = run(
        checkpoint_once(&ctx, Verification::SinceCheckpoint),
        async move {
            let list = published(&mut server, NS).await;
            assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
            assert_eq!(list[0]["seq"], 5);
        },
    )
    .await
    .unwrap();
    assert_eq!((report.signed.len(), report.unchanged), (1, 1));
    // Only the two appended rows were read: both streams start from their
    // signed heads.
    assert_eq!(report.rows_read, 2);

    // A cut of the newest rows is an intact-looking
    // chain; the checkpoint at seq 5 is what catches it. An edited row is
    // refused outright: a checkpoint must never vouch for a broken chain.
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE decisions SET verdict = 'deny' WHERE tenant = ? AND seq = 2")
        .bind(NS)
        .execute(&raw)
        .await
        .unwrap();
    let (client, server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let report = run(checkpoint_once(&ctx, Verification::Full), async move {
        drop(server)
    })
    .await
    .unwrap();
    assert!(report.signed.is_empty());
    assert_eq!(report.refused.len(), 1);
    assert_eq!(
        (
            report.refused[0].stream.as_str(),
            report.refused[0].first_broken_seq
        ),
        ("pod-a/1", Some(2))
    );
    assert_eq!(
        store
            .checkpoints()
            .list(Some(NS), None)
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn raw_exec(url: &str, sql: &str) {
    let raw = sqlx::SqlitePool::connect(url).await.unwrap();
    sqlx::query(sql).execute(&raw).await.unwrap();
    raw.close().await;
}

/// The incremental pass starts each stream at its latest checkpoint signed
/// by the key and reads only what follows; it cannot be steered by a
/// checkpoint row the key did not sign, and it still refuses a chain whose
/// checkpointed row was rewritten or cut away. An edit below the checkpoint
/// is the full pass's to find.
#[tokio::test]
async fn incremental_pass_reads_only_new_rows_and_still_catches_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tg.db").display());
    let store = Store::connect(&url).await.unwrap();
    let d = store.decisions();
    let key = key();
    let sign = |v: Verification| sign_heads(&store, &key, Some(NS), now(), v);
    d.append_batch(NS, "s", (0..3).map(decision).collect())
        .await
        .unwrap();

    // No checkpoint yet: the incremental pass reads the whole stream.
    let r = sign(Verification::SinceCheckpoint).await.unwrap();
    assert_eq!((r.signed.len(), r.rows_read), (1, 3));

    d.append_batch(NS, "s", (3..5).map(decision).collect())
        .await
        .unwrap();
    let r = sign(Verification::SinceCheckpoint).await.unwrap();
    assert_eq!((r.signed.len(), r.signed[0].seq, r.rows_read), (1, 5, 2));
    let full = sign(Verification::Full).await.unwrap();
    assert_eq!((full.unchanged, full.rows_read), (1, 5));

    // A checkpoint planted in the table under another key (claiming a seq
    // the chain never reached) is not a starting point: were it trusted,
    // the pass would refuse the chain for lacking seq 9.
    let forged = toolgate_bundle::CheckpointPayload {
        tenant: NS.into(),
        stream: "s".into(),
        seq: 9,
        hash: "sha256:forged".into(),
        at: now(),
    };
    let other = SigningKey::generate();
    store
        .checkpoints()
        .record(&Checkpoint {
            tenant: NS.into(),
            stream: "s".into(),
            seq: 9,
            hash: "sha256:forged".into(),
            at: now(),
            keyid: key.key_id(),
            envelope: String::from_utf8(forged.sign(&other)).unwrap(),
        })
        .await
        .unwrap();
    let r = sign(Verification::SinceCheckpoint).await.unwrap();
    assert!(r.refused.is_empty(), "{:?}", r.refused);
    assert_eq!((r.unchanged, r.rows_read), (1, 0));

    // An edit below the checkpoint: not read by the incremental pass, found
    // by the full one.
    raw_exec(
        &url,
        "UPDATE decisions SET verdict = 'deny' WHERE stream = 's' AND seq = 2",
    )
    .await;
    let r = sign(Verification::SinceCheckpoint).await.unwrap();
    assert_eq!(r.rows_read, 0);
    let r = sign(Verification::Full).await.unwrap();
    assert_eq!(r.refused[0].first_broken_seq, Some(2));
    raw_exec(
        &url,
        "UPDATE decisions SET verdict = 'allow' WHERE stream = 's' AND seq = 2",
    )
    .await;
    assert!(sign(Verification::Full).await.unwrap().refused.is_empty());

    // The checkpointed row itself rewritten (hash included): refused.
    raw_exec(
        &url,
        "UPDATE decisions SET hash = 'sha256:other' WHERE stream = 's' AND seq = 5",
    )
    .await;
    let r = sign(Verification::SinceCheckpoint).await.unwrap();
    assert_eq!(r.refused.len(), 1);
    assert_eq!(r.refused[0].first_broken_seq, Some(5));
    assert!(
        r.refused[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("trusted position"),
        "{:?}",
        r.refused[0].problem
    );

    // The newest rows cut back to an intact seq 3: the chain alone looks
    // whole, the checkpoint at seq 5 does not.
    raw_exec(&url, "DELETE FROM decisions WHERE stream = 's' AND seq > 3").await;
    let r = sign(Verification::SinceCheckpoint).await.unwrap();
    assert_eq!(r.refused.len(), 1, "{r:?}");
    assert!(r.signed.is_empty());
}

/// Issue 32, item 2: streams whose names the store refuses (left by a
/// tenant before the database checked names) are reported, with a Warning
/// Event in their tenant's namespace and a metric, and every other stream is
/// still signed and published: one bad name never stops a pass.
#[tokio::test]
async fn a_stream_with_a_bad_name_is_reported_and_stops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tg.db").display());
    let store = Store::connect(&url).await.unwrap();
    store
        .decisions()
        .append_batch(NS, "pod-a/1", (0..2).map(decision).collect())
        .await
        .unwrap();
    let long = "x".repeat(1100);
    for bad in ["x\ny", "   ", long.as_str()] {
        let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, started_at) \
             VALUES (?, ?, 0, ?, ?, 0)",
        )
        .bind(NS)
        .bind(bad)
        .bind(toolgate_store::GENESIS_HASH)
        .bind(toolgate_store::genesis_hash(NS, bad, None).unwrap())
        .execute(&raw)
        .await
        .unwrap();
        raw.close().await;
    }

    let (client, mut server) = mock_client();
    let ctx = context(client, store.clone(), now());
    let report = run(checkpoint_once(&ctx, Verification::Full), async move {
        let event = server.event().await;
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reason"], "InvalidDecisionStream");
        assert_eq!(event["regarding"]["kind"], "ConfigMap");
        assert_eq!(event["regarding"]["name"], CHECKPOINT_CONFIGMAP);
        let note = event["note"].as_str().unwrap();
        assert!(note.starts_with("3 decision stream(s)"), "{note}");
        assert!(note.contains(r#""x\ny""#) && note.len() <= 1024, "{note}");
        let list = published(&mut server, NS).await;
        assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
        assert_eq!(list[0]["stream"], "pod-a/1");
    })
    .await
    .unwrap();
    assert_eq!(report.signed.len(), 1);
    assert_eq!(report.invalid.len(), 3, "{:?}", report.invalid);
    assert!(report.refused.is_empty());
    let metrics = ctx.metrics.render();
    assert!(
        metrics.contains("toolgate_checkpoint_invalid_streams 3"),
        "{metrics}"
    );
}
