//! The heads of the streams this process appends to on PostgreSQL, kept in
//! memory so that an append is one INSERT carrying its own seq and hashes.
//!
//! A stream has one writer (a sidecar instance), so the head it last wrote
//! is still the head when it next appends. A stale one is refused: its next
//! seq is taken (the primary key), or, for roles other than the tables'
//! owner, the row does not continue the last row (migration 0008, SQLSTATE
//! TG006). A head that may be stale (after any failed append, or when a
//! second writer appended) is forgotten and read again.
//!
//! It also keeps how this store's session appends ([`AppendPath`]), found
//! out on the first append.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OnceCell, OwnedMutexGuard};

use crate::Result;

/// How a PostgreSQL session appends a chained row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppendPath {
    /// A plain INSERT: the owner of the tables (no link check), an admin
    /// role (the chain trigger checks the link), or a schema without
    /// tenancy.
    Insert,
    /// `toolgate_append_decision` (migration 0010): a session whose login
    /// role is mapped to a tenant. One owner-rights call does what row-level
    /// security and the chain trigger would do to its INSERT, at a fraction
    /// of their cost; a batch is one call of `toolgate_append_decisions`
    /// (migration 0011).
    TenantFunction,
}

/// A stream's last seq and hash as this process last saw them.
pub(crate) type KnownHead = Option<(i64, String)>;

/// Streams held before unused ones are dropped. A sidecar appends to one
/// stream; the bound only matters to processes that write many.
const MAX_STREAMS: usize = 4096;

/// One stream's known head behind its turn.
type Slot = Arc<AsyncMutex<KnownHead>>;

/// The known heads, one lock per stream: appends to one stream from one
/// process take turns (their rows would race for the same seq), appends to
/// different streams do not.
#[derive(Debug, Default)]
pub(crate) struct HeadCache {
    streams: Mutex<HashMap<(String, String), Slot>>,
    path: OnceCell<AppendPath>,
}

impl HeadCache {
    /// Waits for the turn to append to (`tenant`, `stream`) and returns the
    /// head as last known (`None`: read it from the database).
    pub(crate) async fn lock(&self, tenant: &str, stream: &str) -> OwnedMutexGuard<KnownHead> {
        let slot = {
            let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            let key = (tenant.to_owned(), stream.to_owned());
            if !streams.contains_key(&key) && streams.len() >= MAX_STREAMS {
                // Nobody is appending to a slot only the map holds.
                streams.retain(|_, slot| Arc::strong_count(slot) > 1);
            }
            streams.entry(key).or_default().clone()
        };
        slot.lock_owned().await
    }

    /// How this store's session appends, asked of the database once: the
    /// login role of a pool does not change.
    pub(crate) async fn append_path(&self, pool: &crate::pg::PgDb) -> Result<AppendPath> {
        self.path
            .get_or_try_init(|| async {
                Ok(
                    if crate::tenancy::pg_session_tenant(pool).await?.is_some() {
                        AppendPath::TenantFunction
                    } else {
                        AppendPath::Insert
                    },
                )
            })
            .await
            .copied()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.streams.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unused_streams_are_dropped_beyond_the_bound() {
        let cache = HeadCache::default();
        let held = cache.lock("t", "held").await;
        for i in 0..MAX_STREAMS + 10 {
            *cache.lock("t", &format!("s{i}")).await = Some((1, "h".into()));
        }
        assert!(cache.len() <= MAX_STREAMS, "{}", cache.len());
        // The slot in use survived the sweep: a second lock waits for it.
        let waiting = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            cache.lock("t", "held"),
        )
        .await;
        assert!(waiting.is_err(), "a held stream's turn was given twice");
        drop(held);
        assert!(cache.lock("t", "held").await.is_none());
    }
}
