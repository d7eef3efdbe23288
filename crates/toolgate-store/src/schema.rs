//! Migrating PostgreSQL without waiting on anyone a tenant controls.
//!
//! sqlx serialises migrations behind an advisory lock whose key any role
//! can compute and hold, a tenant role included. So a session that finds
//! every embedded migration applied (the usual case: every restart of the
//! controller, every `toolgate tenant provision`) migrates nothing and
//! takes no lock. A schema that lacks a migration is migrated under a lock
//! of `toolgate_migration_lock` (migration 0012), an owner-only table no
//! tenant can lock, with sqlx's own lock turned off; only a schema older
//! than that table still waits for sqlx's key. Every lock wait (the lock,
//! and the tables the migrations alter) is bounded by the store's lock
//! timeout, so a held lock is a `lock_timeout` error instead of a hang.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::migrate::{MigrateError, Migrator};

use crate::pg::PgDb;
use crate::{Result, StoreError, tenancy};

/// Applies the PostgreSQL migrations as described in the module docs; a
/// tenant session only checks them (it may not migrate). Behind a
/// transaction pooler the migrations run over the direct URL, since they
/// need a session (a lock timeout, sqlx's own statements); without one a
/// schema that needs them is `schema_mismatch`.
pub(crate) async fn migrate_postgres(db: &PgDb, lock_timeout: Duration) -> Result<()> {
    let migrator = sqlx::migrate!("../../migrations/postgres");
    if tenancy::is_tenant_session(db).await? {
        return check_schema(db, &migrator).await;
    }
    if check_schema(db, &migrator).await.is_ok() {
        return ensure_partitions(db).await;
    }
    let Some(sessions) = db.sessions(2) else {
        return Err(StoreError::SchemaMismatch(
            "the database needs migrating, which a transaction pooler cannot do: give the \
             direct URL of the server (--database-direct-url) or migrate once without the pooler"
                .into(),
        ));
    };
    let ran = migrate_session(&sessions, migrator, lock_timeout).await;
    sessions.close().await;
    ran?;
    ensure_partitions(db).await
}

/// Creates the decision table's months ahead (migration 0018) when this
/// session may: a role that is neither a tenant nor the owner (a reader
/// verifying the log) opens the store without.
async fn ensure_partitions(db: &PgDb) -> Result<()> {
    match sqlx::query("SELECT toolgate_ensure_decision_partitions($1)")
        .bind(crate::decisions::PARTITION_MONTHS_AHEAD)
        .execute(db)
        .await
    {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42501") => Ok(()),
        other => other.map(drop).map_err(StoreError::from),
    }
}

/// Migrates over `pool`, whose connections are sessions of their own.
async fn migrate_session(
    pool: &PgPool,
    mut migrator: Migrator,
    lock_timeout: Duration,
) -> Result<()> {
    use sqlx::Connection;
    let set = format!("SET lock_timeout = {}", lock_timeout_ms(lock_timeout));
    let has_lock_table: bool =
        sqlx::query_scalar("SELECT to_regclass('toolgate_migration_lock') IS NOT NULL")
            .fetch_one(pool)
            .await?;
    if !has_lock_table {
        return run(pool, &migrator, &set).await;
    }
    // The lock's own connection holds a transaction for the whole run;
    // closing it (at the end, or dropped on error) releases the lock.
    let mut lock = pool.acquire().await?.detach();
    sqlx::query(&set).execute(&mut lock).await?;
    let mut tx = lock.begin().await?;
    sqlx::query("LOCK TABLE toolgate_migration_lock IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            lock_wait(
                e,
                "migration lock (table toolgate_migration_lock); another process is migrating",
            )
        })?;
    // Whoever held it may have migrated already.
    let ran = if check_schema(pool, &migrator).await.is_ok() {
        Ok(())
    } else {
        migrator.set_locking(false);
        run(pool, &migrator, &set).await
    };
    let _ = tx.rollback().await;
    let _ = lock.close().await;
    ran
}

/// Runs `migrator` on a connection of its own with `set` (the lock timeout)
/// applied, closed afterwards: sqlx does not release its session-level
/// migration lock when a migration fails, and a pooled connection holding
/// it would block every later attempt.
async fn run(pool: &PgPool, migrator: &Migrator, set: &str) -> Result<()> {
    use sqlx::Connection;
    let mut conn = pool.acquire().await?.detach();
    sqlx::query(set).execute(&mut conn).await?;
    let ran = migrator.run_direct(&mut conn).await;
    let _ = conn.close().await;
    ran.map_err(migrate_error)
}

/// `timeout` as a `lock_timeout` setting in milliseconds: at least 1 (0
/// would mean no limit).
pub(crate) fn lock_timeout_ms(timeout: Duration) -> u128 {
    timeout.as_millis().clamp(1, i32::MAX as u128)
}

/// `e`, saying which lock was not granted when it is a lock timeout.
pub(crate) fn lock_wait(e: sqlx::Error, lock: &str) -> StoreError {
    match StoreError::from(e) {
        StoreError::LockTimeout(m) => StoreError::LockTimeout(format!("{lock}: {m}")),
        other => other,
    }
}

/// A migration that gave up waiting for a lock is `lock_timeout`.
fn migrate_error(e: MigrateError) -> StoreError {
    let waited = match &e {
        MigrateError::Execute(sqlx::Error::Database(db))
        | MigrateError::ExecuteMigration(sqlx::Error::Database(db), _) => {
            db.code().as_deref() == Some("55P03")
        }
        _ => false,
    };
    // PostgreSQL's own refusal (not a migration's deliberate one, which
    // shares the code but says what it found).
    let refused = match &e {
        MigrateError::Execute(sqlx::Error::Database(db))
        | MigrateError::ExecuteMigration(sqlx::Error::Database(db), _) => {
            db.code().as_deref() == Some("42501") && db.message().starts_with("permission denied")
        }
        _ => false,
    };
    if waited {
        StoreError::LockTimeout(format!(
            "migrating: {e} (another session holds the migration lock or a table a \
             migration alters)"
        ))
    } else if refused {
        // A role that may not create the schema (a tenant's, on a database
        // nobody has migrated yet) is told what is wrong, not what failed.
        StoreError::SchemaMismatch(format!(
            "the database is not migrated and this role may not migrate it ({e}); run any \
             toolgate command against it once as its owner (the controller does at start)"
        ))
    } else {
        StoreError::MigrationFailed(e)
    }
}

/// Every embedded migration is applied, with the same checksum, and none
/// unknown to this build; `schema_mismatch` naming the first difference
/// otherwise.
pub(crate) async fn check_schema<'p, E>(pool: E, migrator: &Migrator) -> Result<()>
where
    E: sqlx::Executor<'p, Database = sqlx::Postgres>,
{
    let applied: Vec<(i64, bool, Vec<u8>)> =
        sqlx::query_as("SELECT version, success, checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(pool)
            .await
            .map_err(|e| {
                StoreError::SchemaMismatch(format!("cannot read _sqlx_migrations: {e}"))
            })?;
    for m in migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
    {
        match applied.iter().find(|(v, _, _)| *v == m.version) {
            Some((_, true, checksum)) if checksum.as_slice() == &*m.checksum => {}
            Some((_, true, _)) => {
                return Err(StoreError::SchemaMismatch(format!(
                    "migration {} was applied with different content",
                    m.version
                )));
            }
            Some((_, false, _)) => {
                return Err(StoreError::SchemaMismatch(format!(
                    "migration {} is partially applied",
                    m.version
                )));
            }
            None => {
                return Err(StoreError::SchemaMismatch(format!(
                    "migration {} ({}) is not applied; run the migrations as the admin role",
                    m.version, m.description
                )));
            }
        }
    }
    if let Some((v, _, _)) = applied
        .iter()
        .find(|(v, _, _)| !migrator.iter().any(|m| m.version == *v))
    {
        return Err(StoreError::SchemaMismatch(format!(
            "the database has migration {v}, which this build does not know"
        )));
    }
    Ok(())
}
