//! The console's only way to the cluster: the Kubernetes API, as the
//! signed-in person (`Impersonate-User`, `Impersonate-Group`). The console's
//! own account may impersonate and review tokens, nothing else, so what a
//! person sees and decides here is exactly what RBAC, the validating
//! webhook (which pins `decidedBy` to the authenticated user) and the
//! controller's approvers check let them see and decide with kubectl.
//!
//! A client per person is kept for a while ([`Clients`]): setting one up
//! (TLS, connection pool) for every request would cost more than the
//! request.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, Config};
use toolgate_k8s::crd::{Approval, Decision, Phase};

use crate::error::ConsoleError;
use crate::identity::{Identity, SESSION_SECONDS};

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

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The cluster as the console reaches it.
#[derive(Clone)]
pub struct Cluster {
    /// The console's own configuration (its service account).
    config: Config,
    /// Its own client: token reviews only.
    own: Client,
    /// Where Approvals live (the release namespace).
    namespace: String,
    /// A client per person, kept a while.
    clients: Arc<Mutex<Clients<Identity, Client>>>,
}

impl Cluster {
    /// The cluster of `config`, with Approvals in `namespace`.
    pub fn new(config: Config, namespace: String) -> Result<Self, ConsoleError> {
        let own =
            Client::try_from(config.clone()).map_err(|e| ConsoleError::Config(e.to_string()))?;
        Ok(Self {
            config,
            own,
            namespace,
            clients: Arc::new(Mutex::new(Clients::new(MAX_CLIENTS, CLIENT_TTL))),
        })
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Clients<Identity, Client>> {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    fn approvals(&self, who: &Identity) -> Result<Api<Approval>, ConsoleError> {
        Ok(Api::namespaced(self.as_user(who)?, &self.namespace))
    }

    /// Every Approval `who` may list, newest first.
    pub async fn list(&self, who: &Identity) -> Result<Vec<Approval>, ConsoleError> {
        let mut items = self
            .approvals(who)?
            .list(&ListParams::default())
            .await?
            .items;
        items.sort_by(|a, b| {
            b.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .cmp(&a.metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
        Ok(items)
    }

    /// Records `who`'s decision on Approval `name`, as `who`: the API server
    /// authenticates the impersonated user, and the webhook checks that
    /// `decidedBy` and `decidedByGroups` are exactly that.
    pub async fn decide(
        &self,
        who: &Identity,
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
        Ok(self
            .approvals(who)?
            .patch(name, &params, &Patch::Merge(&patch))
            .await?)
    }

    /// A stream that yields once whenever an Approval `who` may watch
    /// changes (and once when it starts), ending with the watch.
    pub fn changes(
        &self,
        who: &Identity,
    ) -> Result<impl Stream<Item = ()> + Send + 'static, ConsoleError> {
        let api = self.approvals(who)?;
        Ok(watcher(api, watcher::Config::default())
            .take_while(|event| futures::future::ready(event.is_ok()))
            .filter_map(|event| {
                futures::future::ready(match event {
                    Ok(
                        watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone,
                    ) => Some(()),
                    _ => None,
                })
            }))
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

    #[tokio::test]
    async fn one_client_per_person_and_no_more_than_the_bound() {
        let config = Config::new("http://127.0.0.1:9".parse().unwrap());
        let cluster = Cluster::new(config, "toolgate-system".into()).unwrap();
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
