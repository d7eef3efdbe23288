//! Hearing of stops recorded elsewhere (the CLI, the controller, another
//! sidecar): a sidecar that can be woken reads the database only when told
//! a stop was recorded, and otherwise once a [`STOP_SAFETY_POLL`]; one
//! that cannot be woken reads every [`CANCEL_POLL`], as before. What wakes
//! it (the store's `LISTEN`, or a wake-up relay when the database is behind
//! a transaction pooler) is the caller's: it only calls
//! [`StopSignal::wake`] and says with [`StopSignal::set_hearing`] whether
//! anything can.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::Notify;

use crate::Gate;

/// Time between reads of a sidecar that cannot be woken.
pub const CANCEL_POLL: Duration = Duration::from_secs(1);
/// Time between reads of a sidecar that can: what a lost wake-up may cost.
pub const STOP_SAFETY_POLL: Duration = Duration::from_secs(60);
/// How far back each read looks, so a writer whose clock runs behind ours
/// is still seen.
const CANCEL_OVERLAP: SignedDuration = SignedDuration::from_secs(120);
/// Cancelled runs read at start-up: those cancelled in the last day. Older
/// ones are still refused on every call that reaches the database.
const CANCEL_LOOKBACK: SignedDuration = SignedDuration::from_hours(24);

/// Wake-ups of the stop watcher.
#[derive(Debug, Default)]
pub struct StopSignal {
    wake: Notify,
    hearing: AtomicBool,
}

impl StopSignal {
    /// A stop may have been recorded: read now (a wake while a read is
    /// under way is kept for the next wait).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Whether a source of wake-ups is connected now. While none is, the
    /// watcher reads every [`CANCEL_POLL`].
    pub fn set_hearing(&self, hearing: bool) {
        let was = self.hearing.swap(hearing, Ordering::SeqCst);
        if was != hearing {
            // Losing the source may have lost a wake-up; gaining it ends a
            // fast wait.
            self.wake();
        }
    }

    fn hearing(&self) -> bool {
        self.hearing.load(Ordering::SeqCst)
    }
}

/// Reads this tenant's run cancellations and the cancelled scopes that
/// hold this sidecar (its pod, its profile, the namespace) until shutdown:
/// at start, whenever `signal` wakes it, and on the timer above. Only
/// those rows are read, so no other scope row, however many or however
/// written, can crowd them out or fail the read.
pub async fn watch_cancellations(
    gate: Arc<Gate>,
    signal: Arc<StopSignal>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut since = Timestamp::now() - CANCEL_LOOKBACK;
    let mut trigger = "start";
    loop {
        let polled_at = Timestamp::now();
        match gate.learn_stops(trigger, since).await {
            Ok(()) => since = polled_at - CANCEL_OVERLAP,
            Err(e) => tracing::warn!(error = %e, "could not read stops"),
        }
        let wait = if signal.hearing() {
            STOP_SAFETY_POLL
        } else {
            CANCEL_POLL
        };
        trigger = tokio::select! {
            _ = tokio::time::sleep(wait) => "timer",
            _ = signal.wake.notified() => "wake",
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
    }
}
