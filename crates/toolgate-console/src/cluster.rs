//! The console's way to the cluster: the Kubernetes API, as the signed-in
//! person (`Impersonate-User`, `Impersonate-Group`). Everything a person
//! sees and decides here is read and written as them, so it is exactly
//! what RBAC, the validating webhook (which pins `decidedBy` to the
//! authenticated user) and the approvers check let them see and decide
//! with kubectl.
//!
//! The console's own account reviews tokens, impersonates, and keeps one
//! metadata-only watch of Approvals cluster-wide ([`crate::namespaces::Feed`]):
//! which namespaces hold Approvals and when something there changed, so
//! it knows where to ask on a person's behalf and whom to tell about a
//! change. It never shows what it reads that way to anyone.
//!
//! A client per person is kept for a while ([`Clients`]): setting one up
//! (TLS, connection pool) for every request would cost more than the
//! request; so is each person's set of readable namespaces (asked again
//! after [`READABLE_TTL`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use toolgate_k8s::crd::{Approval, Decision, Phase};

use crate::error::ConsoleError;
use crate::identity::{Identity, SESSION_SECONDS};
use crate::namespaces::{Feed, READABLE_TTL, REVIEWS_AT_ONCE, Readable};

/// The field manager of the console's patches.
const FIELD_MANAGER: &str = "toolgate-console";

/// Most people a client is kept for at once.
pub const MAX_CLIENTS: usize = 256;
/// How long a client is kept after it was made (then made again): never
/// longer than a session.
pub const CLIENT_TTL: Duration = Duration::from_secs(600);
const _: () = assert!(CLIENT_TTL.as_secs() <= SESSION_SECONDS.unsigned_abs());

/// A bounded cache: at most `cap` entries, each kept `ttl` after it was
/// made. When full, expired entries go first, then the least recently used.
pub struct Clients<K, V> {
    cap: usize,
    ttl: Duration,
    entries: HashMap<K, Entry<V>>,
}

struct Entry<V> {
    value: V,
    made: Instant,
    used: Instant,
}

impl<K: Hash + Eq + Clone, V: Clone> Clients<K, V> {
    /// An empty cache of at most `cap` entries, each kept `ttl`.
    pub fn new(cap: usize, ttl: Duration) -> Self {
        Self {
            cap: cap.max(1),
            ttl,
            entries: HashMap::new(),
        }
    }

    /// The value kept for `key`, unless it is older than the TTL.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        let ttl = self.ttl;
        match self.entries.get_mut(key) {
            Some(e) if now.saturating_duration_since(e.made) < ttl => {
                e.used = now;
                Some(e.value.clone())
            }
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `key`, making room if the cache is full.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.cap {
            let ttl = self.ttl;
            self.entries
                .retain(|_, e| now.saturating_duration_since(e.made) < ttl);
            if self.entries.len() >= self.cap {
                let idle = self
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.used)
                    .map(|(k, _)| k.clone());
                if let Some(idle) = idle {
                    self.entries.remove(&idle);
                }
            }
        }
        self.entries.insert(
            key,
            Entry {
                value,
                made: now,
                used: now,
            },
        );
    }

    /// Changes the value kept for `key`, if it is still fresh, keeping
    /// the time it was made (so it still expires then).
    pub fn amend(&mut self, key: &K, now: Instant, change: impl FnOnce(&mut V)) {
        let ttl = self.ttl;
        if let Some(e) = self.entries.get_mut(key)
            && now.saturating_duration_since(e.made) < ttl
        {
            change(&mut e.value);
        }
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Where a person's list is read.
enum Scope {
    /// One cluster-wide list.
    Cluster,
    /// One list per namespace (none: nothing to see).
    Namespaces(Vec<String>),
}

/// The cluster as the console reaches it.
#[derive(Clone)]
pub struct Cluster {
    /// The console's own configuration (its service account).
    config: Config,
    /// Its own client: token reviews and the metadata watch.
    own: Client,
    /// A client per person, kept a while.
    clients: Arc<Mutex<Clients<Identity, Client>>>,
    /// Where each person may list Approvals, kept a little while.
    readable: Arc<Mutex<Clients<Identity, Readable>>>,
    /// The metadata watch, started at first use (inside the runtime).
    feed: Arc<OnceLock<Feed>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `items` newest first (then by namespace and name, so the order is stable).
pub fn newest_first(items: &mut [Approval]) {
    let key = |a: &Approval| {
        (
            std::cmp::Reverse(a.metadata.creation_timestamp.as_ref().map(|t| t.0)),
            a.metadata.namespace.clone(),
            a.metadata.name.clone(),
        )
    };
    items.sort_by_cached_key(key);
}

impl Cluster {
    /// The cluster of `config`; Approvals may be in any namespace.
    pub fn new(config: Config) -> Result<Self, ConsoleError> {
        let own =
            Client::try_from(config.clone()).map_err(|e| ConsoleError::Config(e.to_string()))?;
        Ok(Self {
            config,
            own,
            clients: Arc::new(Mutex::new(Clients::new(MAX_CLIENTS, CLIENT_TTL))),
            readable: Arc::new(Mutex::new(Clients::new(MAX_CLIENTS, READABLE_TTL))),
            feed: Arc::default(),
        })
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Clients<Identity, Client>> {
        locked(&self.clients)
    }

    /// Starts the metadata watch now rather than at first use (inside the
    /// Tokio runtime), so the first page does not wait for its first list.
    pub fn start_watch(&self) {
        self.feed.get_or_init(|| Feed::start(self.own.clone()));
    }

    /// The metadata watch, ready (started by the first caller).
    async fn feed(&self) -> Result<&Feed, ConsoleError> {
        let feed = self.feed.get_or_init(|| Feed::start(self.own.clone()));
        feed.ready().await?;
        Ok(feed)
    }

    /// A client that is `who` to the API server (the same one for a while).
    fn as_user(&self, who: &Identity) -> Result<Client, ConsoleError> {
        if let Some(client) = self.clients().get(who, Instant::now()) {
            return Ok(client);
        }
        // Made without holding the lock: it takes a moment.
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(who.user.clone());
        config.auth_info.impersonate_groups = Some(who.groups.clone());
        let client =
            Client::try_from(config).map_err(|e| ConsoleError::Unavailable(e.to_string()))?;
        let mut clients = self.clients();
        let now = Instant::now();
        // Someone else's request may have made one meanwhile: keep theirs.
        if let Some(kept) = clients.get(who, now) {
            return Ok(kept);
        }
        clients.insert(who.clone(), client.clone(), now);
        Ok(client)
    }

    /// Whether the API server lets `client`'s person list Approvals in
    /// `namespace` (`None`: in all of them), asked as that person.
    async fn may_list_in(client: &Client, namespace: Option<String>) -> Result<bool, ConsoleError> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some("toolgate.dev".into()),
                    resource: Some("approvals".into()),
                    verb: Some("list".into()),
                    namespace,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    /// Where `who` may list Approvals: everywhere, or which of the
    /// namespaces holding Approvals. Kept [`READABLE_TTL`] per person; a
    /// namespace that appeared since is reviewed when it is first needed.
    pub async fn readable(&self, who: &Identity) -> Result<Readable, ConsoleError> {
        let client = self.as_user(who)?;
        let cached = locked(&self.readable).get(who, Instant::now());
        let (mut known, kept) = match cached {
            Some(Readable::All) => return Ok(Readable::All),
            Some(known) => (known, true),
            None if Self::may_list_in(&client, None).await? => {
                locked(&self.readable).insert(who.clone(), Readable::All, Instant::now());
                return Ok(Readable::All);
            }
            None => (Readable::unreviewed(), false),
        };
        let unchecked = known.unchecked(&self.feed().await?.namespaces());
        if kept && unchecked.is_empty() {
            return Ok(known);
        }
        let answers: Vec<(String, bool)> = futures::stream::iter(unchecked)
            .map(|ns| {
                let client = client.clone();
                async move {
                    let yes = Self::may_list_in(&client, Some(ns.clone())).await?;
                    Ok::<_, ConsoleError>((ns, yes))
                }
            })
            .buffer_unordered(REVIEWS_AT_ONCE)
            .try_collect()
            .await?;
        known.with(&answers);
        let mut cache = locked(&self.readable);
        let now = Instant::now();
        if kept {
            cache.amend(who, now, |kept| kept.with(&answers));
        } else {
            cache.insert(who.clone(), known.clone(), now);
        }
        Ok(known)
    }

    /// Where `who`'s list is read. Someone who may list Approvals in none
    /// of the namespaces holding them gets the API server's own refusal
    /// (a cluster-wide list as them); while no Approval exists anywhere,
    /// there is nothing to refuse and the list is empty.
    async fn scope(&self, who: &Identity, client: &Client) -> Result<Scope, ConsoleError> {
        let readable = self.readable(who).await?;
        if readable == Readable::All {
            return Ok(Scope::Cluster);
        }
        let candidates = self.feed().await?.namespaces();
        let namespaces = readable.among(&candidates);
        if namespaces.is_empty() && !candidates.is_empty() {
            let api: Api<Approval> = Api::all(client.clone());
            api.list(&ListParams::default().limit(1)).await?;
            return Ok(Scope::Cluster);
        }
        Ok(Scope::Namespaces(namespaces))
    }

    /// Refuses `who` if they may list no Approvals (see [`Self::list`]).
    pub async fn may_list(&self, who: &Identity) -> Result<(), ConsoleError> {
        self.scope(who, &self.as_user(who)?).await.map(|_| ())
    }

    /// Every Approval `who` may list, as them, newest first: one
    /// cluster-wide list, or one per namespace they may read (a namespace
    /// refused meanwhile is skipped).
    pub async fn list(&self, who: &Identity) -> Result<Vec<Approval>, ConsoleError> {
        let client = self.as_user(who)?;
        let mut items = match self.scope(who, &client).await? {
            Scope::Cluster => {
                let api: Api<Approval> = Api::all(client);
                api.list(&ListParams::default()).await?.items
            }
            Scope::Namespaces(namespaces) => {
                let lists: Vec<Vec<Approval>> = futures::stream::iter(namespaces)
                    .map(|ns| {
                        let api: Api<Approval> = Api::namespaced(client.clone(), &ns);
                        async move {
                            match api.list(&ListParams::default()).await {
                                Ok(list) => Ok(list.items),
                                Err(kube::Error::Api(s)) if s.code == 403 => Ok(Vec::new()),
                                Err(e) => Err(ConsoleError::from(e)),
                            }
                        }
                    })
                    .buffer_unordered(REVIEWS_AT_ONCE)
                    .try_collect()
                    .await?;
                lists.into_iter().flatten().collect()
            }
        };
        newest_first(&mut items);
        Ok(items)
    }

    /// Records `who`'s decision on Approval `namespace/name`, as `who`: the
    /// API server authenticates the impersonated user (and RBAC decides
    /// whether they may patch there), and the webhook checks that
    /// `decidedBy` and `decidedByGroups` are exactly that.
    pub async fn decide(
        &self,
        who: &Identity,
        namespace: &str,
        name: &str,
        decision: Decision,
        reason: Option<&str>,
    ) -> Result<Approval, ConsoleError> {
        let patch = serde_json::json!({
            "spec": {
                "decision": decision,
                "reason": reason,
                "decidedBy": who.user,
                "decidedByGroups": who.groups,
            }
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let api: Api<Approval> = Api::namespaced(self.as_user(who)?, namespace);
        Ok(api.patch(name, &params, &Patch::Merge(&patch)).await?)
    }

    /// A stream that yields once when it starts and then whenever an
    /// Approval changes in a namespace `who` may read (their readable set,
    /// asked again as it expires); ends with the watch or when their
    /// access can no longer be asked. Changes elsewhere wake it but yield
    /// nothing.
    pub async fn changes(
        &self,
        who: &Identity,
    ) -> Result<impl Stream<Item = ()> + Send + 'static, ConsoleError> {
        let subscription = self.feed().await?.subscribe();
        let state = (subscription, self.clone(), who.clone());
        let later = futures::stream::unfold(state, |(mut sub, cluster, who)| async move {
            loop {
                let changed = sub.next().await?;
                match cluster.readable(&who).await {
                    Ok(readable) if readable.pings(&changed) => {
                        return Some(((), (sub, cluster, who)));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::info!(code = e.code(), "live updates end: access not known");
                        return None;
                    }
                }
            }
        });
        Ok(futures::stream::once(futures::future::ready(())).chain(later))
    }

    /// Who `token` belongs to, as the API server's TokenReview says.
    pub async fn review(&self, token: &str) -> Result<Identity, ConsoleError> {
        let token = token.trim();
        if token.is_empty() || token.len() > 16 * 1024 {
            return Err(ConsoleError::Unauthenticated(
                "paste a Kubernetes token".into(),
            ));
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.own.clone());
        let reviewed = api.create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Identity::checked(
                user.username.as_deref().unwrap_or_default(),
                user.groups.unwrap_or_default(),
            ),
            _ => Err(ConsoleError::Unauthenticated(
                status
                    .error
                    .unwrap_or_else(|| "the token was not accepted".into()),
            )),
        }
    }
}

/// Whether `approval` still waits for a person.
pub fn pending(approval: &Approval) -> bool {
    approval.spec.request.is_some()
        && approval.spec.decision.is_none()
        && approval
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_none_or(|p| p == Phase::Pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_a_bounded_number_for_a_while() {
        let t0 = Instant::now();
        let mut c: Clients<String, u32> = Clients::new(2, Duration::from_secs(60));
        c.insert("alice".into(), 1, t0);
        assert_eq!(
            c.get(&"alice".into(), t0 + Duration::from_secs(59)),
            Some(1)
        );
        c.insert("bob".into(), 2, t0 + Duration::from_secs(1));
        // Full: carol's takes the place of the one used least recently (bob).
        c.insert("carol".into(), 3, t0 + Duration::from_secs(2));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&"bob".into(), t0 + Duration::from_secs(3)), None);
        assert_eq!(c.get(&"alice".into(), t0 + Duration::from_secs(3)), Some(1));
        assert_eq!(c.get(&"carol".into(), t0 + Duration::from_secs(3)), Some(3));
        // Kept no longer than the TTL after it was made, however often used.
        assert_eq!(c.get(&"alice".into(), t0 + Duration::from_secs(60)), None);
        assert_eq!(c.len(), 1);
        // Expired ones make room before live ones are evicted.
        c.insert("dave".into(), 4, t0 + Duration::from_secs(61));
        c.insert("erin".into(), 5, t0 + Duration::from_secs(63));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&"dave".into(), t0 + Duration::from_secs(63)), Some(4));
        assert_eq!(c.get(&"erin".into(), t0 + Duration::from_secs(63)), Some(5));
    }

    #[test]
    fn merged_lists_are_newest_first() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use toolgate_k8s::crd::ApprovalSpec;
        let at = |ns: &str, name: &str, second: Option<i64>| {
            let mut a = Approval::new(
                name,
                ApprovalSpec {
                    request: None,
                    grant: None,
                    decision: None,
                    reason: None,
                    decided_by: None,
                    decided_by_groups: None,
                },
            );
            a.metadata.namespace = Some(ns.into());
            a.metadata.creation_timestamp =
                second.map(|s| Time(jiff::Timestamp::from_second(s).unwrap()));
            a
        };
        let mut items = vec![
            at("team-a", "apr-old", Some(100)),
            at("team-b", "apr-new", Some(300)),
            at("team-b", "apr-same", Some(200)),
            at("team-a", "apr-same", Some(200)),
            at("team-c", "apr-undated", None),
        ];
        newest_first(&mut items);
        let order: Vec<String> = items
            .iter()
            .map(|a| {
                format!(
                    "{}/{}",
                    a.metadata.namespace.as_deref().unwrap(),
                    a.metadata.name.as_deref().unwrap()
                )
            })
            .collect();
        assert_eq!(
            order,
            [
                "team-b/apr-new",
                "team-a/apr-same",
                "team-b/apr-same",
                "team-a/apr-old",
                "team-c/apr-undated"
            ]
        );
    }

    #[tokio::test]
    async fn one_client_per_person_and_no_more_than_the_bound() {
        let config = Config::new("http://127.0.0.1:9".parse().unwrap());
        let cluster = Cluster::new(config).unwrap();
        let alice = Identity::checked("alice", vec!["oncall".into()]).unwrap();
        cluster.as_user(&alice).unwrap();
        cluster.as_user(&alice).unwrap();
        assert_eq!(
            cluster.clients().len(),
            1,
            "the same person reuses their client"
        );
        // The same name with other groups is someone else to the API server.
        let other = Identity::checked("alice", vec!["admins".into()]).unwrap();
        cluster.as_user(&other).unwrap();
        assert_eq!(cluster.clients().len(), 2);
        for i in 0..MAX_CLIENTS + 20 {
            let who = Identity::checked(&format!("user-{i}"), vec![]).unwrap();
            cluster.as_user(&who).unwrap();
        }
        assert_eq!(cluster.clients().len(), MAX_CLIENTS);
    }
}
