//! One PostgreSQL `LISTEN` connection per [`Store`](crate::Store), fanned out
//! to every approval waiter in the process.
//!
//! A long-poll must not hold a pooled connection for its whole wait: twenty
//! waiters would starve the high-risk path that needs a connection to record
//! its decision. Instead the first waiter starts a listener task that owns
//! the one dedicated connection and rebroadcasts each notification payload;
//! waiters subscribe to the broadcast and only borrow a pooled connection
//! for the short re-reads of the row.
//!
//! Each tenant's wake-ups arrive on a channel of their own (migration 0012:
//! LISTEN needs no privilege, so a shared channel told every tenant every
//! other tenant's approval and run ids). A tenant's store listens on its one
//! channel; an admin store waiting for several tenants listens on each, on
//! the same connection.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};

use crate::pg::PgDb;
use tokio::sync::{OnceCell, broadcast, mpsc, oneshot, watch};

/// Notifications buffered per subscriber before it counts as lagging (a
/// lagging waiter just re-reads its row).
const FAN_OUT_CAPACITY: usize = 1024;
/// Pause before reconnecting a lost listener connection.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// The payload a subscriber receives after the listener lost its
/// connection and listens again: whatever was sent meanwhile is lost, so
/// re-read.
pub const RELISTENED: &str = "";

/// Whether a wake-up payload (see [`crate::Store::wakeups`]) may mean a
/// stop: a run's (`run/…`, migration 0012), a scope's (`scope/…`, 0016), or
/// [`RELISTENED`]. Approval answers are not.
pub fn is_stop(payload: &str) -> bool {
    payload.starts_with("run/") || payload.starts_with("scope/") || payload == RELISTENED
}

/// Why no listener runs.
#[derive(Debug)]
enum NoSession {
    /// Behind a transaction pooler without a direct URL: waiters poll.
    Pooled,
    /// Connecting or listening failed.
    Failed(sqlx::Error),
}

impl From<sqlx::Error> for NoSession {
    fn from(e: sqlx::Error) -> Self {
        NoSession::Failed(e)
    }
}

/// A request to the listener task: LISTEN on a channel, then answer.
type ListenRequest = (String, oneshot::Sender<Result<(), sqlx::Error>>);

#[derive(Debug)]
struct Relay {
    fan_out: broadcast::Sender<Arc<str>>,
    listen: mpsc::UnboundedSender<ListenRequest>,
}

/// Shared by every clone of one store.
#[derive(Debug)]
pub(crate) struct Wakeups {
    relay: OnceCell<Relay>,
    /// Channels the listener has confirmed.
    listening: Mutex<HashSet<String>>,
    stop: watch::Sender<bool>,
}

impl Wakeups {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            relay: OnceCell::new(),
            listening: Mutex::new(HashSet::new()),
            stop: watch::channel(false).0,
        })
    }

    /// A receiver of the payloads of `channel` (and of the other channels
    /// this store listens on), subscribed and listening before it is
    /// returned, so that a notification sent after this call cannot be
    /// missed. `None` when no listener could be started (the caller then
    /// polls).
    pub(crate) async fn subscribe(
        &self,
        db: &PgDb,
        channel: String,
    ) -> Option<broadcast::Receiver<Arc<str>>> {
        let relay = self
            .relay
            .get_or_try_init(|| async {
                // Behind a transaction pooler a LISTEN would be lost with
                // the server connection it ran on: listen over the direct
                // URL, or not at all.
                let Some(pool) = db.sessions(1) else {
                    return Err(NoSession::Pooled);
                };
                let pool = &pool;
                let listener = PgListener::connect_with(pool).await?;
                let (fan_out, _) = broadcast::channel(FAN_OUT_CAPACITY);
                let (listen, requests) = mpsc::unbounded_channel();
                tokio::spawn(relay(
                    listener,
                    pool.clone(),
                    requests,
                    fan_out.clone(),
                    self.stop.subscribe(),
                ));
                Ok::<_, NoSession>(Relay { fan_out, listen })
            })
            .await;
        let relay = match relay {
            Ok(relay) => relay,
            Err(NoSession::Pooled) => return None,
            Err(NoSession::Failed(e)) => {
                tracing::warn!(error = %e, "approval wake-ups unavailable; waiters poll");
                return None;
            }
        };
        let rx = relay.fan_out.subscribe();
        if self.is_listening(&channel) {
            return Some(rx);
        }
        let (done, answer) = oneshot::channel();
        relay.listen.send((channel.clone(), done)).ok()?;
        match answer.await {
            Ok(Ok(())) => {
                self.listening
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(channel);
                Some(rx)
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not listen for approval wake-ups; waiters poll");
                None
            }
            Err(_) => None,
        }
    }

    fn is_listening(&self, channel: &str) -> bool {
        self.listening
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(channel)
    }

    /// Ends the listener task so the pool can close.
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// Forwards every notification to the subscribers and adds channels on
/// request until the store closes. A lost connection is re-established and
/// listens on every channel again; waiters re-read their rows on a timer,
/// so notifications lost in between only delay them.
async fn relay(
    mut listener: PgListener,
    pool: PgPool,
    mut requests: mpsc::UnboundedReceiver<ListenRequest>,
    tx: broadcast::Sender<Arc<str>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut channels: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            request = requests.recv() => {
                let Some((channel, done)) = request else { return };
                let result = listener.listen(&channel).await;
                if result.is_ok() && !channels.contains(&channel) {
                    channels.push(channel);
                }
                let _ = done.send(result);
            }
            received = listener.recv() => match received {
                Ok(n) => {
                    let _ = tx.send(Arc::from(n.payload()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "approval listener lost; reconnecting");
                    drop(listener);
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep(RECONNECT_DELAY) => {}
                            _ = stop.changed() => return,
                        }
                        match listen_all(&pool, &channels).await {
                            Ok(l) => {
                                listener = l;
                                // Whatever was sent meanwhile is lost: an
                                // empty payload tells subscribers to re-read.
                                let _ = tx.send(Arc::from(RELISTENED));
                                break;
                            }
                            Err(e) => tracing::warn!(error = %e, "approval listener reconnect failed"),
                        }
                    }
                }
            },
            _ = stop.changed() => return,
        }
    }
}

async fn listen_all(pool: &PgPool, channels: &[String]) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all(channels.iter().map(String::as_str))
        .await?;
    Ok(listener)
}

impl crate::Store {
    /// Whether [`Store::wakeups`] can ever hear anything: not on SQLite, nor
    /// behind a pooler without a direct URL. Where it can, a `None` from it
    /// is passing (the database is down, say) and worth asking again.
    pub fn can_hear_wakeups(&self) -> bool {
        match &self.backend {
            crate::Backend::Postgres(db) => !db.pooled || db.direct.is_some(),
            crate::Backend::Sqlite(_) => false,
        }
    }

    /// A receiver of `tenant`'s wake-ups, subscribed before it is returned:
    /// approval answers (`TENANT/APPROVAL`), run stops (`run/TENANT/RUN`)
    /// and scope stops (`scope/TENANT`), and [`RELISTENED`] after a lost
    /// connection ([`is_stop`] tells stops apart). Each tenant's arrive on a channel
    /// of their own, named by the database (migration 0012), so no other
    /// tenant hears them. `None` where nothing can be heard (SQLite, a
    /// pooler without a direct URL, a database without the channel): the
    /// caller then reads on a timer.
    pub async fn wakeups(&self, tenant: &str) -> Option<broadcast::Receiver<Arc<str>>> {
        if !self.can_hear_wakeups() {
            return None;
        }
        let crate::Backend::Postgres(db) = &self.backend else {
            return None;
        };
        let channel: Option<String> = sqlx::query_scalar("SELECT toolgate_approval_channel($1)")
            .bind(tenant)
            .fetch_one(db)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "no wake-up channel; waiters poll"))
            .ok()
            .flatten();
        self.wakeups.subscribe(db, channel?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stops_and_a_relisten_may_mean_a_stop() {
        assert!(is_stop("run/acme/run-1"));
        assert!(is_stop("scope/acme"));
        assert!(is_stop(RELISTENED));
        assert!(!is_stop("acme/appr-1"));
    }
}
