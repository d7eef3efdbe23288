//! Through a transaction-mode PgBouncer (`TOOLGATE_TEST_POOLER_URL`, which
//! `.ci/run` starts): a store told of the pooler loses nothing under
//! concurrency, one not told says what is wrong, and migrating needs the
//! direct URL. Unset, these tests skip with a notice, unless `CI=true`.
//!
//! The rest of the suite runs through the same pooler when
//! `TOOLGATE_TEST_THROUGH_POOLER=1` (see `common`).

use std::time::Duration;

use jiff::Timestamp;
use toolgate_store::{IntentOutcome, Store, StoreOptions};

use crate::common::builders::{new_approval, new_intent, record};
use crate::common::{pooled_schema, unique};

fn pooler_url() -> Option<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    match std::env::var("TOOLGATE_TEST_POOLER_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if ci => panic!("CI=true but TOOLGATE_TEST_POOLER_URL is not set"),
        _ => {
            eprintln!(
                "SKIP pooler test: set TOOLGATE_TEST_POOLER_URL (a transaction-mode PgBouncer)"
            );
            None
        }
    }
}

fn pooled(max: u32, direct: Option<&str>) -> StoreOptions {
    StoreOptions {
        max_connections: max,
        acquire_timeout: Duration::from_secs(30),
        transaction_pooler: true,
        direct_url: direct.map(str::to_owned),
        ..StoreOptions::default()
    }
}

/// 200 writes from 50 tasks at once (intents begun and completed,
/// approvals requested, decisions appended to one stream), every one
/// through the pooler, where server connections change hands between
/// statements. Each must succeed and the chain verify. Named statements
/// collide here ("prepared statement sqlx_s_1 already exists"), and an
/// unnamed one parsed outside a transaction is bound on whichever server
/// connection comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_through_the_pooler_all_land() {
    let Some(pooler) = pooler_url() else { return };
    let schema = pooled_schema(&pooler).await;
    let store = Store::connect_with(&schema.pooler, pooled(8, Some(&schema.direct)))
        .await
        .expect("connect through the pooler, migrating over the direct url");
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..50 {
        let store = store.clone();
        tasks.spawn(async move {
            let now = Timestamp::now();
            let run = format!("run-{task}");
            let intent = store.intents().begin(new_intent(&run, "s1"), now).await?;
            store
                .intents()
                .complete("acme", &intent.id, IntentOutcome::Completed, None, now)
                .await?;
            store
                .approvals()
                .request(
                    new_approval("acme", &unique("inv"), Duration::from_secs(60)),
                    now,
                )
                .await?;
            store
                .decisions()
                .append("acme", "pod-a/pooled", record(task))
                .await?;
            Ok::<_, toolgate_store::StoreError>(())
        });
    }
    let mut failures = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done.expect("task panicked") {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "through the pooler: {failures:?}");
    let reports = store.decisions().verify(Some("acme")).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert!(reports[0].ok, "{reports:?}");
    assert_eq!(reports[0].rows, 50);
    store.close().await;
    schema.drop().await;
}

/// A store that is not told of the pooler fails with a code that says so,
/// rather than a bare database error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_not_told_of_the_pooler_says_so() {
    let Some(pooler) = pooler_url() else { return };
    let schema = pooled_schema(&pooler).await;
    // Migrated over the direct URL first, so only statements remain.
    Store::connect(&schema.direct).await.unwrap().close().await;
    let plain = StoreOptions {
        max_connections: 4,
        ..StoreOptions::default()
    };
    let err = match Store::connect_with(&schema.pooler, plain).await {
        Err(e) => e,
        Ok(store) => {
            // Start-up may have run on one server session; concurrent
            // statements from four client connections meet on one.
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..16 {
                let store = store.clone();
                tasks.spawn(
                    async move { store.approvals().list("acme", None, Timestamp::now()).await },
                );
            }
            let mut first = None;
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done.unwrap() {
                    first.get_or_insert(e);
                }
            }
            first.expect("named statements through a transaction pooler collide")
        }
    };
    assert_eq!(err.code(), "pooler_not_declared", "{err}");
    assert!(
        err.to_string().contains("--database-pooler transaction"),
        "{err}"
    );
    schema.drop().await;
}

/// Behind a pooler without a direct URL an unmigrated database is
/// `schema_mismatch` naming the flag; with it, the same call migrates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrating_through_a_pooler_needs_the_direct_url() {
    let Some(pooler) = pooler_url() else { return };
    let schema = pooled_schema(&pooler).await;
    let err = Store::connect_with(&schema.pooler, pooled(2, None))
        .await
        .expect_err("nothing to migrate with");
    assert_eq!(err.code(), "schema_mismatch", "{err}");
    assert!(err.to_string().contains("--database-direct-url"), "{err}");
    let store = Store::connect_with(&schema.pooler, pooled(2, Some(&schema.direct)))
        .await
        .expect("migrates over the direct url");
    store.ping().await.unwrap();
    store.close().await;
    // Once migrated, the pooler alone is enough.
    let store = Store::connect_with(&schema.pooler, pooled(2, None))
        .await
        .expect("a migrated schema needs no direct url");
    store.ping().await.unwrap();
    store.close().await;
    schema.drop().await;
}
