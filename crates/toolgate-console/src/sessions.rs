//! What the console remembers between requests, all of it bounded: the
//! sessions signed out before they expired (so a copied cookie dies with
//! the sign-out), and recent sign-in attempts per source address (so
//! nobody can try tokens as fast as the API server answers).
//!
//! Both live in this process's memory: with several replicas, a sign-out
//! is known to the replica that served it (route people to one replica,
//! or keep one replica), and each replica counts its own sign-ins.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Most signed-out sessions remembered at once (each a few dozen bytes).
pub const MAX_REVOKED: usize = 10_000;

/// Sign-in attempts one source address may make per [`SIGN_IN_WINDOW`].
pub const SIGN_INS_PER_WINDOW: usize = 10;
/// The window sign-in attempts are counted over.
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(60);
/// Most source addresses counted at once.
const MAX_ADDRESSES: usize = 4096;

/// Sessions signed out before their expiry, each kept until the moment its
/// cookie would have expired anyway, and no longer.
///
/// Bounded: at most [`MAX_REVOKED`] entries. Only expired entries are ever
/// evicted (dropping a live one would bring its session back); when the
/// list is full of live ones, new sign-ins are refused until the oldest
/// expires ([`Revocations::full`]), and so is a sign-out that cannot be
/// recorded (the person is told, not silently left signed in).
pub struct Revocations {
    cap: usize,
    /// Session id → its expiry (Unix seconds).
    entries: Mutex<HashMap<String, i64>>,
    /// Bumped on every sign-out, so open live-update streams can end.
    changed: watch::Sender<u64>,
}

impl Default for Revocations {
    fn default() -> Self {
        Self::with_capacity(MAX_REVOKED)
    }
}

impl Revocations {
    /// A list holding at most `cap` live entries.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            entries: Mutex::new(HashMap::new()),
            changed: watch::Sender::new(0),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the list is full of live entries: the seconds until one expires.
    fn wait_when_full(entries: &mut HashMap<String, i64>, cap: usize, now: i64) -> Option<u64> {
        if entries.len() >= cap {
            entries.retain(|_, expires| *expires > now);
        }
        (entries.len() >= cap).then(|| {
            let next = entries.values().copied().min().unwrap_or(now);
            (next - now).max(1).unsigned_abs()
        })
    }

    /// Records that session `id`, valid until `expires`, was signed out;
    /// `Err(seconds to wait)` when the list is full of live entries.
    pub fn revoke(&self, id: &str, expires: i64, now: i64) -> Result<(), u64> {
        if expires <= now {
            return Ok(());
        }
        {
            let mut entries = self.entries();
            if !entries.contains_key(id)
                && let Some(wait) = Self::wait_when_full(&mut entries, self.cap, now)
            {
                return Err(wait);
            }
            entries.insert(id.to_owned(), expires);
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    /// Whether session `id` was signed out (its own expiry is checked with
    /// its signature, so an entry past it no longer matters).
    pub fn revoked(&self, id: &str) -> bool {
        self.entries().contains_key(id)
    }

    /// `Some(seconds to wait)` while the list is full of live entries: new
    /// sign-ins are refused then, since their sign-outs could not be kept.
    pub fn full(&self, now: i64) -> Option<u64> {
        Self::wait_when_full(&mut self.entries(), self.cap, now)
    }

    /// How many entries are held.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Completes when session `id` is signed out.
    pub async fn signed_out(&self, id: &str) {
        let mut changes = self.changed.subscribe();
        loop {
            if self.revoked(id) {
                return;
            }
            if changes.changed().await.is_err() {
                // The list is gone with the console: never signed out here.
                return std::future::pending().await;
            }
        }
    }
}

/// Sign-in attempts per source address: at most [`SIGN_INS_PER_WINDOW`] in
/// any [`SIGN_IN_WINDOW`] (a sliding window). Bounded: at most 4096
/// addresses are counted; when that many made attempts within the window,
/// the one idle longest is forgotten (an attacker who has that many
/// addresses gains nothing from it). IPv6 addresses count per /64, what
/// one host is usually given.
pub struct SignInLimit {
    per_window: usize,
    window: Duration,
    attempts: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl Default for SignInLimit {
    fn default() -> Self {
        Self::new(SIGN_INS_PER_WINDOW, SIGN_IN_WINDOW)
    }
}

impl SignInLimit {
    /// `per_window` attempts per address in any `window`.
    pub fn new(per_window: usize, window: Duration) -> Self {
        Self {
            per_window: per_window.max(1),
            window,
            attempts: Mutex::new(HashMap::new()),
        }
    }

    /// Counts an attempt from `from` at `now`: `Err(seconds to wait)` when
    /// it is one too many (a refused attempt is not counted).
    pub fn attempt(&self, from: IpAddr, now: Instant) -> Result<(), u64> {
        let key = match from {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let mut octets = v6.octets();
                    octets[8..].fill(0);
                    IpAddr::from(octets)
                }
            },
            v4 => v4,
        };
        let mut all = self
            .attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let window = self.window;
        let recent = |at: &Instant| now.saturating_duration_since(*at) < window;
        if !all.contains_key(&key) && all.len() >= MAX_ADDRESSES {
            all.retain(|_, times| times.back().is_some_and(recent));
            if all.len() >= MAX_ADDRESSES {
                let idle = all
                    .iter()
                    .min_by_key(|(_, times)| times.back().copied())
                    .map(|(ip, _)| *ip);
                if let Some(idle) = idle {
                    all.remove(&idle);
                }
            }
        }
        let times = all.entry(key).or_default();
        while times.front().is_some_and(|at| !recent(at)) {
            times.pop_front();
        }
        if times.len() >= self.per_window {
            let oldest = times.front().copied().unwrap_or(now);
            let wait = window.saturating_sub(now.saturating_duration_since(oldest));
            return Err(wait.as_secs().max(1));
        }
        times.push_back(now);
        Ok(())
    }

    /// How many addresses are counted.
    pub fn addresses(&self) -> usize {
        self.attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn sign_outs_last_as_long_as_their_sessions_and_the_list_is_bounded() {
        let r = Revocations::with_capacity(2);
        assert!(!r.revoked("a"));
        r.revoke("a", 100, 10).unwrap();
        assert!(r.revoked("a") && !r.revoked("b"));
        // Already expired: nothing to remember.
        r.revoke("old", 10, 10).unwrap();
        assert!(!r.revoked("old"));
        r.revoke("b", 200, 10).unwrap();
        assert_eq!(r.full(10), Some(90));
        // Full of live entries: a live one is never evicted, the sign-out
        // is refused, and so are sign-ins until "a" expires.
        assert_eq!(r.revoke("c", 300, 50), Err(50));
        assert!(r.revoked("a") && r.revoked("b") && !r.revoked("c"));
        // Signing the same session out again needs no room.
        r.revoke("a", 100, 50).unwrap();
        // Once "a" expired it is evicted to make room.
        assert_eq!(r.full(100), None);
        r.revoke("c", 300, 100).unwrap();
        assert_eq!(r.len(), 2);
        assert!(!r.revoked("a") && r.revoked("b") && r.revoked("c"));
    }

    #[tokio::test]
    async fn a_sign_out_ends_what_waits_on_it() {
        let r = std::sync::Arc::new(Revocations::default());
        let waiting = {
            let r = r.clone();
            tokio::spawn(async move { r.signed_out("s1").await })
        };
        tokio::task::yield_now().await;
        r.revoke("s2", 100, 0).unwrap();
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        r.revoke("s1", 100, 0).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }

    #[test]
    fn the_attempt_after_the_limit_waits() {
        let limit = SignInLimit::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let me = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        for i in 0..3 {
            limit.attempt(me, t0 + Duration::from_secs(i)).unwrap();
        }
        assert_eq!(limit.attempt(me, t0 + Duration::from_secs(10)), Err(50));
        // Others are not held up.
        limit
            .attempt(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), t0)
            .unwrap();
        // The window slides: one more once the first attempt is a minute old.
        limit.attempt(me, t0 + Duration::from_secs(60)).unwrap();
        assert!(limit.attempt(me, t0 + Duration::from_secs(60)).is_err());
        // One IPv6 /64 is one address; an IPv4-mapped one is its IPv4.
        let v6 = |last: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, last));
        for i in 0..3 {
            limit.attempt(v6(i), t0).unwrap();
        }
        assert!(limit.attempt(v6(99), t0).is_err());
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
        assert!(limit.attempt(mapped, t0 + Duration::from_secs(60)).is_err());
    }

    #[test]
    fn the_limit_counts_a_bounded_number_of_addresses() {
        let limit = SignInLimit::new(1, Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..(MAX_ADDRESSES as u32 + 10) {
            limit
                .attempt(
                    IpAddr::V4(Ipv4Addr::from(i)),
                    t0 + Duration::from_millis(i.into()),
                )
                .unwrap();
        }
        assert_eq!(limit.addresses(), MAX_ADDRESSES);
        // The latest ones are still counted.
        let last = IpAddr::V4(Ipv4Addr::from(MAX_ADDRESSES as u32 + 9));
        assert!(limit.attempt(last, t0 + Duration::from_secs(5)).is_err());
    }
}
