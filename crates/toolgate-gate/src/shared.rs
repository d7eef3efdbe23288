//! What every component of the [`Gate`](crate::Gate) reads and none owns:
//! the store, the metrics, and who this sidecar is. Each component holds
//! it behind one `Arc`, so none reaches into another for it.

use toolgate_store::{Caller, Store};

use crate::{Enforced, Metrics};

/// The store, the metrics and this sidecar's identity.
pub(crate) struct Shared {
    /// The shared database.
    pub(crate) store: Store,
    /// Metrics.
    pub(crate) metrics: Metrics,
    /// Tenant this sidecar serves.
    pub(crate) tenant: String,
    /// This sidecar instance's decision stream (`{pod}/{uuidv7}`).
    pub(crate) stream: String,
    /// Who this sidecar is (for `requested_by`).
    pub(crate) identity: String,
    /// The pod this sidecar serves: what a pod-scoped cancellation and a
    /// per-pod budget are keyed by.
    pub(crate) pod: String,
    /// Whether a call's span carries its arguments (off unless the
    /// sidecar opts in: arguments may hold what a trace store must not).
    pub(crate) trace_arguments: bool,
}

impl Shared {
    /// This sidecar as the store charges and stops it: tenant, pod, and the
    /// profile of the bundle it enforces (none without one).
    pub(crate) fn caller<'a>(&'a self, enforced: Option<&'a Enforced>) -> Caller<'a> {
        Caller::new(
            &self.tenant,
            &self.pod,
            enforced.map(|e| e.profile.as_str()),
        )
    }
}
