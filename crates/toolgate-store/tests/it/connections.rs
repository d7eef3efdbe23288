//! Connecting: URL schemes and SQLite modes, ping and re-migration, a
//! closed store, in-memory SQLite, and SQLite's bounded pool and page cache.

use crate::common::builders::new_intent;
use jiff::Timestamp;
use toolgate_store::{Store, StoreError};

#[tokio::test]
async fn connect_rejects_unknown_scheme() {
    let err = Store::connect("mysql://localhost/x").await.unwrap_err();
    assert_eq!(err.code(), "invalid_input");
    assert!(matches!(err, StoreError::InvalidInput(_)));
}

both_backends!(ping_and_remigrate, |db| {
    db.store.ping().await.unwrap();
    // Migrations are idempotent: re-running them on a live schema is a no-op.
    db.store.migrate().await.unwrap();
});

#[tokio::test]
async fn a_sqlite_url_without_mode_creates_the_file_and_an_explicit_mode_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    assert!(!path.exists());
    let store = Store::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    store.ping().await.unwrap();
    assert!(path.exists(), "sqlite://PATH must create the file");
    store.close().await;
    // Reopening the now existing file works the same way.
    let again = Store::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    again.ping().await.unwrap();
    again.close().await;
    // `mode=rw` asks for an existing file: a missing one is an error.
    let missing = dir.path().join("missing.db");
    let err = Store::connect(&format!("sqlite://{}?mode=rw", missing.display()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "store_unavailable", "{err}");
    assert!(!missing.exists());
}

#[tokio::test]
async fn closed_store_reports_unavailable() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    store.close().await;
    assert_eq!(store.ping().await.unwrap_err().code(), "store_unavailable");
}

#[tokio::test]
async fn in_memory_sqlite_works() {
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let i = store
        .intents()
        .begin(new_intent("run-m", "s"), Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        store.intents().pending("acme", "run-m").await.unwrap()[0]
            .intent
            .id,
        i.id
    );
    store.migrate().await.unwrap();
}

/// A file database pools at most four connections, each with a 1 MiB page
/// cache, however large a pool the caller asks for: the sidecar's memory
/// stays bounded as the database grows.
#[tokio::test]
async fn sqlite_pool_and_page_cache_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tg.db").display());
    let options = toolgate_store::StoreOptions {
        max_connections: 64,
        ..Default::default()
    };
    let store = toolgate_store::Store::connect_with(&url, options)
        .await
        .unwrap();
    let pool = store
        .as_sqlite()
        .expect("a sqlite url opens a sqlite store");
    assert_eq!(
        pool.options().get_max_connections(),
        toolgate_store::SQLITE_MAX_CONNECTIONS
    );
    let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(cache, -i64::from(toolgate_store::SQLITE_CACHE_KIB));
    store.close().await;
}

/// Whether a store can ever hear wake-ups is a property of how it reaches
/// the database, not of whether the database answers now: a PostgreSQL
/// store that cannot reach its server yet still can (its `None` from
/// `wakeups` is passing, and the sidecar tries again), SQLite and a pooler
/// without a direct URL never can.
#[tokio::test]
async fn hearing_wake_ups_depends_on_the_route_not_on_the_moment() {
    let sqlite = Store::connect("sqlite::memory:").await.unwrap();
    assert!(!sqlite.can_hear_wakeups());
    let unreachable = || {
        sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(std::time::Duration::from_millis(300))
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap()
    };
    let direct = Store::from_postgres_pool(unreachable());
    assert!(direct.can_hear_wakeups());
    assert!(
        direct.wakeups("acme").await.is_none(),
        "nothing to hear yet"
    );
    let pooled = Store::from_postgres_pool(unreachable())
        .through_transaction_pooler(None)
        .unwrap();
    assert!(!pooled.can_hear_wakeups());
    let pooled = Store::from_postgres_pool(unreachable())
        .through_transaction_pooler(Some("postgres://nobody@127.0.0.1:1/none"))
        .unwrap();
    assert!(pooled.can_hear_wakeups());
}
