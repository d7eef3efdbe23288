//! One PostgreSQL `LISTEN` connection per [`Store`](crate::Store), fanned out
//! to every approval waiter in the process.
//!
//! A long-poll must not hold a pooled connection for its whole wait: twenty
//! waiters would starve the high-risk path that needs a connection to record
//! its decision. Instead the first waiter starts a listener task that owns
//! the one dedicated connection and rebroadcasts each notification payload;
//! waiters subscribe to the broadcast and only borrow a pooled connection
//! for the short re-reads of the row.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{OnceCell, broadcast, watch};

/// Notifications buffered per subscriber before it counts as lagging (a
/// lagging waiter just re-reads its row).
const FAN_OUT_CAPACITY: usize = 1024;
/// Pause before reconnecting a lost listener connection.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Shared by every clone of one store.
#[derive(Debug)]
pub(crate) struct Wakeups {
    fan_out: OnceCell<broadcast::Sender<Arc<str>>>,
    stop: watch::Sender<bool>,
}

impl Wakeups {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            fan_out: OnceCell::new(),
            stop: watch::channel(false).0,
        })
    }

    /// A receiver of `channel` payloads, subscribed before it is returned so
    /// that a notification sent after this call cannot be missed. `None`
    /// when no listener could be started (the caller then polls).
    pub(crate) async fn subscribe(
        &self,
        pool: &PgPool,
        channel: &'static str,
    ) -> Option<broadcast::Receiver<Arc<str>>> {
        let sender = self
            .fan_out
            .get_or_try_init(|| async {
                let listener = listen(pool, channel).await?;
                let (tx, _) = broadcast::channel(FAN_OUT_CAPACITY);
                tokio::spawn(relay(
                    listener,
                    pool.clone(),
                    channel,
                    tx.clone(),
                    self.stop.subscribe(),
                ));
                Ok::<_, sqlx::Error>(tx)
            })
            .await;
        match sender {
            Ok(tx) => Some(tx.subscribe()),
            Err(e) => {
                tracing::warn!(error = %e, "approval wake-ups unavailable; waiters poll");
                None
            }
        }
    }

    /// Ends the listener task so the pool can close.
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// Forwards every notification to the subscribers until the store closes.
/// A lost connection is re-established; waiters re-read their rows on a
/// timer, so notifications lost in between only delay them.
async fn relay(
    mut listener: PgListener,
    pool: PgPool,
    channel: &'static str,
    tx: broadcast::Sender<Arc<str>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
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
                        match listen(&pool, channel).await {
                            Ok(l) => {
                                listener = l;
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
