//! Which namespaces' Approvals a person sees, and when to tell them that
//! something there changed.
//!
//! Approvals live in the namespace of the tenant that asked (or in one
//! central namespace the chart names), and an approver is usually bound
//! to `toolgate-approver` in a few namespaces only. A person may list
//! Approvals cluster-wide ([`Readable::All`]) or in some namespaces; which
//! ones is asked of the API server as them (SelfSubjectAccessReviews) for
//! each namespace that holds Approvals.
//!
//! Those namespaces, and when something in each changed, come from one
//! metadata-only watch of Approvals cluster-wide by the console's own
//! account ([`Feed`]): names, namespaces and resource versions, never an
//! Approval's content, which is only ever read as the person. Each live
//! update stream filters the feed by its person's readable namespaces, so
//! nothing of another namespace, not even the timing of a change, reaches
//! anyone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use toolgate_k8s::crd::Approval;

use crate::error::ConsoleError;

/// How long a person's readable namespaces are kept before they are asked
/// again (a RoleBinding given or taken counts after at most this long).
pub const READABLE_TTL: Duration = Duration::from_secs(20);
/// Most access reviews in flight for one person at once.
pub const REVIEWS_AT_ONCE: usize = 16;
/// How long a request waits for the feed's first complete list.
const READY_WAIT: Duration = Duration::from_secs(10);

/// Where a person may list Approvals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readable {
    /// In every namespace: one cluster-wide list.
    All,
    /// In `readable`, of the namespaces reviewed so far (`checked`).
    Namespaces {
        /// Every namespace asked about.
        checked: BTreeSet<String>,
        /// Those the answer was yes for.
        readable: BTreeSet<String>,
    },
}

impl Readable {
    /// Nothing reviewed yet.
    pub fn unreviewed() -> Self {
        Self::Namespaces {
            checked: BTreeSet::new(),
            readable: BTreeSet::new(),
        }
    }

    /// The `candidates` not reviewed yet (none for a cluster-wide reader).
    pub fn unchecked(&self, candidates: &BTreeSet<String>) -> Vec<String> {
        match self {
            Self::All => Vec::new(),
            Self::Namespaces { checked, .. } => candidates.difference(checked).cloned().collect(),
        }
    }

    /// With the `answers` of further reviews (namespace, may list).
    pub fn with(&mut self, answers: &[(String, bool)]) {
        if let Self::Namespaces { checked, readable } = self {
            for (namespace, yes) in answers {
                checked.insert(namespace.clone());
                if *yes {
                    readable.insert(namespace.clone());
                }
            }
        }
    }

    /// Whether the person may read `namespace` (`false` until reviewed).
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Namespaces { readable, .. } => readable.contains(namespace),
        }
    }

    /// The `candidates` to list in, in order (all of them for `All`).
    pub fn among(&self, candidates: &BTreeSet<String>) -> Vec<String> {
        candidates
            .iter()
            .filter(|ns| self.covers(ns))
            .cloned()
            .collect()
    }

    /// Whether a change in `changed` is one to tell the person about.
    pub fn pings(&self, changed: &BTreeSet<String>) -> bool {
        changed.iter().any(|ns| self.covers(ns))
    }
}

/// The objects of a snapshot: (namespace, name) -> (uid, resource version).
type Snapshot = BTreeMap<(String, String), (String, String)>;

fn snapshot(store: &Store<PartialObjectMeta<Approval>>) -> Snapshot {
    store
        .state()
        .iter()
        .filter_map(|o| {
            let m = &o.metadata;
            Some((
                (m.namespace.clone()?, m.name.clone()?),
                (
                    m.uid.clone().unwrap_or_default(),
                    m.resource_version.clone().unwrap_or_default(),
                ),
            ))
        })
        .collect()
}

/// The namespaces whose objects differ between two snapshots (what a
/// re-list after a broken watch found changed).
pub fn differing(before: &Snapshot, after: &Snapshot) -> BTreeSet<String> {
    let gone = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|((ns, _), _)| ns.clone());
    let new = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|((ns, _), _)| ns.clone());
    gone.chain(new).collect()
}

/// The namespaces changed after `seen`, and the newest change among all.
pub fn changed_since(changes: &HashMap<String, u64>, seen: u64) -> (BTreeSet<String>, u64) {
    let newest = changes.values().copied().max().unwrap_or(0).max(seen);
    let changed = changes
        .iter()
        .filter(|&(_, &v)| v > seen)
        .map(|(ns, _)| ns.clone())
        .collect();
    (changed, newest)
}

/// Per namespace, the number of the last change seen there (one entry per
/// namespace that held an Approval while the console ran).
type Changes = Arc<Mutex<HashMap<String, u64>>>;

fn lock(changes: &Changes) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
    changes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The console's one watch of Approvals' metadata, cluster-wide.
pub struct Feed {
    store: Store<PartialObjectMeta<Approval>>,
    changes: Changes,
    /// The number of the latest change anywhere: a wake-up, nothing more.
    latest: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Feed {
    /// Starts the watch with `client` (the console's own account). Must be
    /// called inside the Tokio runtime.
    pub fn start(client: Client) -> Self {
        let (store, writer) = reflector::store();
        let changes = Changes::default();
        let (tx, latest) = watch::channel(0u64);
        // Metadata only: names, namespaces, resource versions.
        let api: Api<PartialObjectMeta<Approval>> = Api::all(client);
        let events = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).default_backoff(),
        );
        let (reader, recorded) = (store.clone(), changes.clone());
        let task = tokio::spawn(async move {
            let mut before: Option<Snapshot> = None;
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let touched: BTreeSet<String> = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                        o.metadata.namespace.into_iter().collect()
                    }
                    // The store still holds what was there before the re-list.
                    Ok(watcher::Event::Init) => {
                        before = Some(snapshot(&reader));
                        BTreeSet::new()
                    }
                    Ok(watcher::Event::InitDone) => {
                        differing(&before.take().unwrap_or_default(), &snapshot(&reader))
                    }
                    Ok(watcher::Event::InitApply(_)) => BTreeSet::new(),
                    Err(e) => {
                        tracing::warn!(error = %e, "the console's watch of Approvals failed; retrying");
                        BTreeSet::new()
                    }
                };
                if !touched.is_empty() {
                    let number = *tx.borrow() + 1;
                    let mut map = lock(&recorded);
                    for ns in touched {
                        map.insert(ns, number);
                    }
                    drop(map);
                    tx.send_replace(number);
                }
            }
        });
        Self {
            store,
            changes,
            latest,
            task,
        }
    }

    /// Waits (a while) for the first complete list.
    pub async fn ready(&self) -> Result<(), ConsoleError> {
        match tokio::time::timeout(READY_WAIT, self.store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(ConsoleError::Unavailable(
                "the console's watch of Approvals is not ready (may its ServiceAccount list \
                 and watch approvals.toolgate.dev cluster-wide?)"
                    .into(),
            )),
        }
    }

    /// The namespaces that hold Approvals now.
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.store
            .state()
            .iter()
            .filter_map(|o| o.metadata.namespace.clone())
            .collect()
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> Subscription {
        let mut latest = self.latest.clone();
        let seen = *latest.borrow_and_update();
        Subscription {
            latest,
            changes: self.changes.clone(),
            seen,
        }
    }
}

/// One live update stream's view of the feed.
pub struct Subscription {
    latest: watch::Receiver<u64>,
    changes: Changes,
    seen: u64,
}

impl Subscription {
    /// The namespaces changed since the last call (waiting for one), or
    /// `None` once the feed has ended.
    pub async fn next(&mut self) -> Option<BTreeSet<String>> {
        loop {
            self.latest.changed().await.ok()?;
            let (changed, newest) = changed_since(&lock(&self.changes), self.seen);
            self.seen = newest;
            if !changed.is_empty() {
                return Some(changed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_reviewed_namespaces_answered_yes_are_read() {
        let mut r = Readable::unreviewed();
        let candidates = set(&["team-a", "team-b", "team-c"]);
        assert_eq!(r.unchecked(&candidates), vec!["team-a", "team-b", "team-c"]);
        assert!(r.among(&candidates).is_empty());
        r.with(&[("team-a".into(), false), ("team-b".into(), true)]);
        assert_eq!(r.unchecked(&candidates), vec!["team-c"]);
        assert_eq!(r.among(&candidates), vec!["team-b"]);
        assert!(!r.covers("team-a") && r.covers("team-b") && !r.covers("team-c"));
        // A namespace no longer holding Approvals is not listed in.
        assert!(r.among(&set(&["team-a"])).is_empty());
        // Cluster-wide readers read everything and are asked nothing more.
        let mut all = Readable::All;
        assert!(all.unchecked(&candidates).is_empty());
        all.with(&[("team-a".into(), false)]);
        assert_eq!(all.among(&candidates).len(), 3);
    }

    #[test]
    fn pings_only_for_readable_namespaces() {
        let mut r = Readable::unreviewed();
        r.with(&[("team-a".into(), false), ("team-b".into(), true)]);
        assert!(!r.pings(&set(&["team-a"])));
        assert!(!r.pings(&set(&["team-z"])), "unreviewed: nothing");
        assert!(r.pings(&set(&["team-a", "team-b"])));
        assert!(!r.pings(&set(&[])));
        assert!(Readable::All.pings(&set(&["anything"])));
    }

    #[test]
    fn changes_are_counted_per_namespace() {
        let changes: HashMap<String, u64> = [
            ("team-a".into(), 3),
            ("team-b".into(), 5),
            ("team-c".into(), 1),
        ]
        .into();
        assert_eq!(
            changed_since(&changes, 0),
            (set(&["team-a", "team-b", "team-c"]), 5)
        );
        assert_eq!(changed_since(&changes, 3), (set(&["team-b"]), 5));
        assert_eq!(changed_since(&changes, 5), (set(&[]), 5));
        assert_eq!(changed_since(&HashMap::new(), 7), (set(&[]), 7));
    }

    #[test]
    fn a_relist_names_the_namespaces_it_found_changed() {
        let obj = |ns: &str, name: &str, rv: &str| {
            (
                (ns.to_owned(), name.to_owned()),
                ("uid".to_owned(), rv.to_owned()),
            )
        };
        let before: Snapshot = [obj("a", "x", "1"), obj("b", "y", "2"), obj("c", "z", "3")].into();
        let after: Snapshot = [obj("a", "x", "1"), obj("b", "y", "4"), obj("d", "w", "5")].into();
        assert_eq!(differing(&before, &after), set(&["b", "c", "d"]));
        assert!(differing(&before, &before).is_empty());
    }
}
