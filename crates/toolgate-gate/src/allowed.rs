//! Allowed decisions remembered until their intent is recorded: an intent
//! must name a decision that allowed exactly its call.
//!
//! Memory is bounded by time as well as count. An intent is begun right
//! after its call is allowed (milliseconds, or seconds for a slow client),
//! so a decision is remembered for [`REMEMBER_FOR`] at most; and once its
//! intent exists only a small tombstone stays, so that a second intent for
//! it is told `intent_exists` rather than `decision_not_allowed`. A sidecar
//! serving a steady rate thus holds about rate × [`REMEMBER_FOR`] small
//! entries, not a number that grows with its uptime.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate_policy::Risk;

/// Most decisions remembered at once, whatever their age.
const MAX_REMEMBERED: usize = 100_000;

/// How long an allowed decision can still have its intent recorded.
pub(crate) const REMEMBER_FOR: Duration = Duration::from_secs(300);

/// What an allowed decision permits; an intent must match it exactly.
#[derive(Debug, Clone)]
pub(crate) struct AllowedCall {
    pub(super) run_id: toolgate_policy::RunId,
    pub(super) tool: String,
    pub(super) canonical_tool: String,
    pub(super) args_digest: String,
    pub(super) call_digest: String,
    pub(super) risk: Risk,
}

/// A remembered decision: still open for its intent, or already used.
#[derive(Debug)]
pub(crate) enum Remembered {
    /// No intent yet; one matching the call may be recorded. Boxed so that
    /// a tombstone costs a pointer's width in the map, not a whole call's.
    Open(Box<AllowedCall>),
    /// Its one intent is recorded.
    Used,
}

/// Recent allowed decisions, oldest evicted first.
#[derive(Debug, Default)]
pub struct AllowedDecisions {
    map: HashMap<Arc<str>, Remembered>,
    order: VecDeque<(Instant, Arc<str>)>,
}

impl AllowedDecisions {
    /// Remembers `call` under decision `id`, allowed at `now`; forgets
    /// decisions older than [`REMEMBER_FOR`] and the oldest beyond
    /// [`MAX_REMEMBERED`].
    pub(super) fn insert(&mut self, id: String, call: AllowedCall, now: Instant) {
        while let Some((at, old)) = self.order.front() {
            let expired = now.saturating_duration_since(*at) >= REMEMBER_FOR;
            if !expired && self.order.len() < MAX_REMEMBERED {
                break;
            }
            self.map.remove(old);
            self.order.pop_front();
        }
        let id: Arc<str> = id.into();
        self.order.push_back((now, Arc::clone(&id)));
        self.map.insert(id, Remembered::Open(Box::new(call)));
    }

    /// The decision `id`, if it is still remembered.
    pub(super) fn get(&self, id: &str) -> Option<&Remembered> {
        self.map.get(id)
    }

    /// Records that `id` has its intent: only a tombstone stays.
    pub(super) fn mark_used(&mut self, id: &str) {
        if let Some(slot) = self.map.get_mut(id) {
            *slot = Remembered::Used;
        }
    }

    /// Decisions remembered (open or used).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> AllowedCall {
        AllowedCall {
            run_id: toolgate_policy::RunId::parse("run-1").unwrap(),
            tool: "bash".into(),
            canonical_tool: "bash".into(),
            args_digest: "sha256:a".into(),
            call_digest: "sha256:c".into(),
            risk: Risk::High,
        }
    }

    #[test]
    fn used_decisions_keep_only_a_tombstone() {
        let mut allowed = AllowedDecisions::default();
        let t0 = Instant::now();
        allowed.insert("d1".into(), call(), t0);
        assert!(matches!(allowed.get("d1"), Some(Remembered::Open(_))));
        allowed.mark_used("d1");
        assert!(matches!(allowed.get("d1"), Some(Remembered::Used)));
        allowed.mark_used("unknown");
        assert!(allowed.get("unknown").is_none());
        // A tombstone is one pointer wide: the call itself was freed.
        assert_eq!(
            std::mem::size_of::<Remembered>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn decisions_older_than_the_window_are_forgotten() {
        let mut allowed = AllowedDecisions::default();
        let t0 = Instant::now();
        allowed.insert("old".into(), call(), t0);
        allowed.insert("used".into(), call(), t0 + Duration::from_secs(1));
        allowed.mark_used("used");
        allowed.insert("recent".into(), call(), t0 + REMEMBER_FOR / 2);
        assert_eq!(allowed.len(), 3);
        // One past the window of `old`: it goes; `used` (one second younger)
        // and `recent` stay.
        allowed.insert("new".into(), call(), t0 + REMEMBER_FOR);
        assert!(allowed.get("old").is_none());
        assert!(matches!(allowed.get("used"), Some(Remembered::Used)));
        assert!(allowed.get("recent").is_some());
        // Long after: only the newest remains.
        allowed.insert("last".into(), call(), t0 + REMEMBER_FOR * 3);
        assert_eq!(allowed.len(), 1);
        assert!(allowed.get("last").is_some());
    }

    #[test]
    fn a_steady_rate_holds_a_bounded_number_of_entries() {
        let mut allowed = AllowedDecisions::default();
        let t0 = Instant::now();
        // Ten decisions a second for three windows, each used at once.
        let per_second = 10u32;
        let seconds = 3 * REMEMBER_FOR.as_secs() as u32;
        let mut peak = 0;
        for i in 0..per_second * seconds {
            let now = t0 + Duration::from_millis(u64::from(i) * 1000 / u64::from(per_second));
            let id = format!("d{i}");
            allowed.insert(id.clone(), call(), now);
            allowed.mark_used(&id);
            peak = peak.max(allowed.len());
        }
        let window = per_second as usize * REMEMBER_FOR.as_secs() as usize;
        assert!(peak <= window + 1, "peak {peak}, window {window}");
        assert!(allowed.len() >= window - 1);
    }
}
