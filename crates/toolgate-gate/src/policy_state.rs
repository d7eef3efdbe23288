//! The policy a sidecar enforces: loaded from a signed bundle file, reloaded
//! when the file (or the trust file) changes, swapped atomically.
//!
//! A bundle that fails verification never replaces the one being enforced;
//! the failure is logged, counted and reported by `/readyz`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use jiff::Timestamp;
use serde::Serialize;
use sha2::{Digest, Sha256};
use toolgate_bundle::{TrustSet, VerifyOptions};
use toolgate_policy::CompiledPolicy;

use crate::metrics::Metrics;

/// A verified bundle, ready to evaluate.
#[derive(Debug)]
pub struct Enforced {
    /// The compiled policy.
    pub policy: CompiledPolicy,
    /// Profile name.
    pub profile: String,
    /// Profile namespace, when the bundle names one.
    pub namespace: Option<String>,
    /// `{name}@{sha12}+h{sha8}`.
    pub policy_version: String,
    /// Publication sequence of the bundle.
    pub sequence: u64,
    /// After this instant nothing is allowed.
    pub expires_at: Timestamp,
    /// `sha256:` digest of the bundle document.
    pub digest: String,
    /// Key that signed it.
    pub keyid: String,
    /// Approval time-to-live from the profile (seconds).
    pub approval_ttl_seconds: u32,
    /// The candidate the bundle carries: evaluated beside `policy` on every
    /// call, recorded, never enforced.
    pub candidate: Option<CompiledPolicy>,
}

impl Enforced {
    /// True while the bundle may decide: before its `expiresAt`. The one
    /// liveness rule every way in (decisions, tool listings, readiness)
    /// reads.
    pub fn is_live(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }
}

/// The last rejected bundle, for `/readyz` and logs.
#[derive(Debug, Clone, Serialize)]
pub struct LoadFailure {
    /// Stable error code, e.g. `bundle_bad_signature`.
    pub code: String,
    /// What was wrong.
    pub message: String,
    /// When it was seen.
    pub at: Timestamp,
}

/// Holds the enforced bundle and the record of the last failed load.
pub struct PolicyState {
    current: ArcSwapOption<Enforced>,
    last_failure: Mutex<Option<LoadFailure>>,
    /// Digest of the (bundle, trust) bytes last attempted, so an unchanged
    /// bad file is not re-counted on every poll.
    last_attempt: Mutex<Option<[u8; 32]>>,
    /// The durable anti-rollback floor: the newest bundle accepted for a
    /// profile by any sidecar, as recorded in the store.
    floor: Mutex<Option<Floor>>,
    metrics: Metrics,
}

/// Newest (sequence, digest) known for one profile.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Floor {
    namespace: String,
    profile: String,
    sequence: u64,
    digest: String,
}

impl Floor {
    /// Why `e` would roll back past this floor, if it would.
    fn refuses(&self, e: &Enforced) -> Option<String> {
        if e.namespace.as_deref().unwrap_or_default() != self.namespace || e.profile != self.profile
        {
            return None;
        }
        if e.sequence < self.sequence {
            Some(format!(
                "bundle sequence {} is older than sequence {} already accepted for {}/{}",
                e.sequence, self.sequence, self.namespace, self.profile
            ))
        } else if e.sequence == self.sequence && e.digest != self.digest {
            Some(format!(
                "bundle sequence {} of {}/{} was already accepted with another digest",
                e.sequence, self.namespace, self.profile
            ))
        } else {
            None
        }
    }
}

/// Outcome of one load attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadOutcome {
    /// A new bundle is now enforced.
    Swapped {
        /// Its policy version.
        policy_version: String,
    },
    /// The files are the same as last time: nothing to do.
    Unchanged,
    /// The files were rejected; the previous bundle (if any) stays.
    Rejected {
        /// Error code.
        code: String,
    },
}

impl PolicyState {
    /// The metrics this state updates.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// An empty state: every call is denied with `no_bundle` until a load succeeds.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            current: ArcSwapOption::empty(),
            last_failure: Mutex::new(None),
            last_attempt: Mutex::new(None),
            floor: Mutex::new(None),
            metrics,
        }
    }

    /// The bundle being enforced, if any. Lock-free; callers hold the `Arc`
    /// for the whole request so no request ever sees two policies.
    pub fn current(&self) -> Option<Arc<Enforced>> {
        self.current.load_full()
    }

    /// The bundle being enforced when it is live at `now` (see
    /// [`Enforced::is_live`]); `None` otherwise, so a caller fails closed.
    pub fn live(&self, now: Timestamp) -> Option<Arc<Enforced>> {
        self.current().filter(|e| e.is_live(now))
    }

    /// The last rejected load.
    pub fn last_failure(&self) -> Option<LoadFailure> {
        self.last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Verifies `bundle` against `trust` and swaps it in when valid.
    pub fn load_bytes(&self, bundle: &[u8], trust: &[u8], now: Timestamp) -> LoadOutcome {
        let fingerprint: [u8; 32] = {
            let mut h = Sha256::new();
            h.update((bundle.len() as u64).to_be_bytes());
            h.update(bundle);
            h.update(trust);
            h.finalize().into()
        };
        {
            let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
            if *last == Some(fingerprint) {
                return LoadOutcome::Unchanged;
            }
            *last = Some(fingerprint);
        }
        let verified = self.verify(bundle, trust, now).and_then(|e| {
            let floor = self.floor.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match floor.and_then(|f| f.refuses(&e)) {
                Some(why) => Err(("bundle_rollback".to_owned(), why)),
                None => Ok(e),
            }
        });
        match verified {
            Ok(enforced) => {
                let policy_version = enforced.policy_version.clone();
                self.metrics.bundle_info.reset();
                self.metrics
                    .bundle_info
                    .with_label_values(&[&policy_version, &enforced.profile])
                    .set(1);
                self.metrics.bundle_expiry.reset();
                self.metrics
                    .bundle_expiry
                    .with_label_values(&[&enforced.profile])
                    .set(enforced.expires_at.as_millisecond() as f64 / 1000.0);
                tracing::info!(
                    policy_version,
                    sequence = enforced.sequence,
                    keyid = enforced.keyid,
                    "bundle loaded"
                );
                self.metrics
                    .precreate_decisions(&enforced.profile, &enforced.policy);
                self.raise_floor(&enforced);
                self.current.store(Some(Arc::new(enforced)));
                LoadOutcome::Swapped { policy_version }
            }
            Err((code, message)) => self.reject(code, message, now),
        }
    }

    /// Sets the durable anti-rollback floor for one profile (from the
    /// store, at start-up). A held bundle below it stops being enforced:
    /// every call is then denied `no_bundle` until a bundle at or above the
    /// floor arrives.
    pub fn set_floor(&self, namespace: &str, profile: &str, sequence: u64, digest: &str) {
        let floor = Floor {
            namespace: namespace.to_owned(),
            profile: profile.to_owned(),
            sequence,
            digest: digest.to_owned(),
        };
        *self.floor.lock().unwrap_or_else(|p| p.into_inner()) = Some(floor.clone());
        if let Some(held) = self.current()
            && let Some(why) = floor.refuses(&held)
        {
            self.current.store(None);
            self.metrics.bundle_info.reset();
            self.metrics.bundle_expiry.reset();
            self.reject("bundle_rollback".to_owned(), why, Timestamp::now());
        }
    }

    fn raise_floor(&self, e: &Enforced) {
        let mut floor = self.floor.lock().unwrap_or_else(|p| p.into_inner());
        let same_profile = floor.as_ref().is_some_and(|f| {
            f.namespace == e.namespace.as_deref().unwrap_or_default() && f.profile == e.profile
        });
        if floor.is_none()
            || (same_profile && floor.as_ref().is_some_and(|f| e.sequence > f.sequence))
        {
            *floor = Some(Floor {
                namespace: e.namespace.clone().unwrap_or_default(),
                profile: e.profile.clone(),
                sequence: e.sequence,
                digest: e.digest.clone(),
            });
        }
    }

    /// Records a rejected load: counted once per distinct input, logged,
    /// and kept for `/readyz`. The enforced bundle is left as it is.
    fn reject(&self, code: String, message: String, now: Timestamp) -> LoadOutcome {
        self.metrics
            .bundle_reload_failures
            .with_label_values(&[&code])
            .inc();
        tracing::warn!(code, message, "bundle rejected; keeping the current one");
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(LoadFailure {
            code: code.clone(),
            message,
            at: now,
        });
        LoadOutcome::Rejected { code }
    }

    fn verify(
        &self,
        bundle: &[u8],
        trust: &[u8],
        now: Timestamp,
    ) -> Result<Enforced, (String, String)> {
        let fail = |e: toolgate_bundle::BundleError| (e.code().to_owned(), e.to_string());
        let trust_text = std::str::from_utf8(trust).map_err(|_| {
            (
                "trust_invalid".to_owned(),
                "trust file is not UTF-8 PEM".to_owned(),
            )
        })?;
        let trust = TrustSet::from_pem(trust_text).map_err(fail)?;
        // One load: sequence and digest must describe the same held bundle.
        let held = self.current();
        let options = VerifyOptions {
            now,
            held_sequence: held.as_ref().map(|e| e.sequence),
            held_digest: held.as_ref().map(|e| e.digest.clone()),
        };
        let verified = toolgate_bundle::verify(bundle, &trust, &options).map_err(fail)?;
        let document = verified.document();
        let (profile, namespace) = (
            document.profile.name.clone(),
            document.profile.namespace.clone(),
        );
        let (sequence, expires_at) = (document.sequence, document.expires_at);
        let approval_ttl_seconds = document
            .spec
            .approvals
            .as_ref()
            .map_or(900, |a| a.ttl_seconds);
        let policy_version = verified.policy_version().to_owned();
        let (digest, keyid) = (verified.digest().to_owned(), verified.keyid().to_owned());
        let (policy, candidate) = verified.into_policies();
        Ok(Enforced {
            profile,
            namespace,
            policy_version,
            sequence,
            expires_at,
            digest,
            keyid,
            approval_ttl_seconds,
            policy,
            candidate,
        })
    }

    /// Reads both files and loads them. A missing or unreadable file is a
    /// rejected load (`bundle_unreadable`), not a crash.
    pub fn load_files(&self, bundle: &Path, trust: &Path, now: Timestamp) -> LoadOutcome {
        match (std::fs::read(bundle), std::fs::read(trust)) {
            (Ok(b), Ok(t)) => self.load_bytes(&b, &t, now),
            (b, t) => {
                let which = if b.is_err() { "bundle" } else { "trust" };
                let err = b
                    .err()
                    .or(t.err())
                    .map(|e| e.kind().to_string())
                    .unwrap_or_default();
                // The same missing file on every poll is one failure, not many.
                let fingerprint: [u8; 32] =
                    Sha256::digest(format!("unreadable:{which}:{err}")).into();
                {
                    let mut last = self.last_attempt.lock().unwrap_or_else(|p| p.into_inner());
                    if *last == Some(fingerprint) {
                        return LoadOutcome::Unchanged;
                    }
                    *last = Some(fingerprint);
                }
                self.reject(
                    "bundle_unreadable".to_owned(),
                    format!("cannot read the {which} file: {err}"),
                    now,
                )
            }
        }
    }
}

/// Paths of the files a sidecar watches.
#[derive(Debug, Clone)]
pub struct BundleFiles {
    /// The DSSE envelope (in Kubernetes, a ConfigMap key behind `..data`).
    pub bundle: PathBuf,
    /// Trusted public keys (PEM).
    pub trust: PathBuf,
}

/// Polls the files and reloads on change. Polling (rather than inotify)
/// follows Kubernetes' atomic `..data` symlink swap without special cases,
/// because every poll re-opens the path from the top.
pub async fn watch(
    state: Arc<PolicyState>,
    store: toolgate_store::Store,
    files: BundleFiles,
    interval: std::time::Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                let loader = state.clone();
                let files = files.clone();
                let outcome = tokio::task::spawn_blocking(move || {
                    loader.load_files(&files.bundle, &files.trust, Timestamp::now())
                })
                .await;
                if let (Ok(LoadOutcome::Swapped { .. }), Some(e)) = (outcome, state.current()) {
                    record_high_water(&store, &e).await;
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Raises the profile's durable high-water mark to the enforced bundle, so
/// a restarted sidecar (this one or any other) refuses anything older.
pub async fn record_high_water(store: &toolgate_store::Store, e: &Enforced) {
    let namespace = e.namespace.clone().unwrap_or_default();
    if let Err(err) = store
        .profiles()
        .record_bundle_sequence(
            &namespace,
            &e.profile,
            e.sequence,
            &e.digest,
            jiff::Timestamp::now(),
        )
        .await
    {
        tracing::warn!(error = %err, "bundle high-water mark not recorded");
    }
}
