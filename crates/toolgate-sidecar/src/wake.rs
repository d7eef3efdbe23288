//! What wakes the stop watcher ([`toolgate_gate::stops`]): the relay at
//! `--wakeups-url` when one is named (the way for a fleet behind a
//! transaction pooler, where a `LISTEN` per sidecar would cost a server
//! connection each), otherwise the store's own `LISTEN` where it has one.
//! Either way only stops wake it: approval answers are not its business.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use toolgate_gate::stops::StopSignal;
use toolgate_store::{Store, wakeup_is_stop};

/// Path of a tenant's stop wake-ups on a relay (`toolgate wakeups serve`).
pub const RELAY_PATH: &str = "/v1/wakeups";
/// Event name of a stop on the relay's stream.
pub const STOP_EVENT: &str = "stop";
/// Pause before connecting again to a lost source.
const RETRY: Duration = Duration::from_secs(1);
/// The longest wait between attempts to listen while the store cannot.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Wakes `signal` on every stop the store hears for `tenant` until
/// shutdown. Returns at once where the store can never hear anything
/// (SQLite, a pooler without a direct URL): the watcher then reads on its
/// fast timer. Where listening fails for now, it retries with backoff.
pub async fn from_store(
    store: Store,
    tenant: String,
    signal: Arc<StopSignal>,
    mut shutdown: watch::Receiver<bool>,
) {
    if !store.can_hear_wakeups() {
        signal.set_hearing(false);
        return;
    }
    let mut retry = RETRY;
    loop {
        let Some(mut rx) = store.wakeups(&tenant).await else {
            // Passing (the database is unreachable): the watcher reads on
            // its fast timer meanwhile, and listening is tried again.
            signal.set_hearing(false);
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            retry = (retry * 2).min(MAX_RETRY);
            continue;
        };
        retry = RETRY;
        signal.set_hearing(true);
        loop {
            tokio::select! {
                got = rx.recv() => match got {
                    Ok(payload) if wakeup_is_stop(&payload) => signal.wake(),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => signal.wake(),
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
        signal.set_hearing(false);
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Wakes `signal` on every `stop` event of the relay's stream for
/// `tenant`, reconnecting when it ends, until shutdown.
pub async fn from_relay(
    http: reqwest::Client,
    base: String,
    tenant: String,
    signal: Arc<StopSignal>,
    mut shutdown: watch::Receiver<bool>,
) {
    let url = format!("{}{RELAY_PATH}/{tenant}", base.trim_end_matches('/'));
    loop {
        tokio::select! {
            ended = follow(&http, &url, &signal) => {
                if let Err(e) = ended {
                    tracing::warn!(error = %e, url = %url, "wake-up relay lost; reading stops every second");
                }
            }
            _ = shutdown.wait_for(|s| *s) => return,
        }
        signal.set_hearing(false);
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// Follows one connection to the relay until it ends.
async fn follow(http: &reqwest::Client, url: &str, signal: &StopSignal) -> Result<(), String> {
    let mut response = http
        .get(url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("relay answered {}", response.status()));
    }
    // Connected: anything recorded while we were not is read now.
    signal.set_hearing(true);
    signal.wake();
    let mut events = EventLines::default();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        for _ in 0..events.stops_in(&chunk) {
            signal.wake();
        }
    }
    Err("relay closed the stream".into())
}

/// Counts `event: stop` lines across chunk boundaries.
#[derive(Default)]
struct EventLines {
    partial: Vec<u8>,
}

impl EventLines {
    /// Longest line kept while waiting for its end: the relay's are short.
    const MAX_LINE: usize = 1024;

    fn stops_in(&mut self, chunk: &[u8]) -> usize {
        let mut stops = 0;
        for &b in chunk {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.partial);
                if line.trim_end_matches('\r') == format!("event: {STOP_EVENT}") {
                    stops += 1;
                }
                self.partial.clear();
            } else if self.partial.len() < Self::MAX_LINE {
                self.partial.push(b);
            }
        }
        stops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_events_are_counted_across_chunks() {
        let mut lines = EventLines::default();
        assert_eq!(lines.stops_in(b"event: st"), 0);
        assert_eq!(lines.stops_in(b"op\r\ndata: {}\n\n: keep-alive\n"), 1);
        assert_eq!(lines.stops_in(b"event: stop\ndata: {}\n\nevent: stop\n"), 2);
        assert_eq!(lines.stops_in(b"event: stopped\nevent: other\n"), 0);
    }
}
