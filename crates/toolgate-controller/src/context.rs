//! What every reconcile needs, behind one handle.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use toolgate_bundle::SigningKey;
use toolgate_store::Store;

use crate::error::ControllerError;
use crate::metrics::Metrics;

/// The source of "now"; tests pin it.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Tunables of the reconcilers.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a signed bundle stays valid (`expiresAt - issuedAt`).
    pub bundle_validity: SignedDuration,
    /// Where request Approvals mirrored from the database live.
    pub approvals: crate::approval::Placement,
    /// Namespace the controller runs in (signing key, trust set, lease).
    pub namespace: String,
    /// How recently a pod must have reported to count as current.
    pub fleet_window: SignedDuration,
    /// How often a profile is re-reconciled to refresh its fleet status.
    pub fleet_refresh: SignedDuration,
    /// Per-namespace database Secret the controller provisions for tenants
    /// (PostgreSQL only); `None` turns provisioning off.
    pub tenant_secret: Option<String>,
    /// Base URL tenant URLs are derived from (host, port, database, options);
    /// default: the controller's own database URL.
    pub tenant_base_url: Option<String>,
    /// How often approval notifications that are due are sent.
    pub notify_interval: std::time::Duration,
    /// How old an approval event may be and still be sent.
    pub notify_retention: SignedDuration,
    /// Channels for the approvals of profiles that name none, with their
    /// keys in Secret `toolgate-notify` of [`Settings::namespace`].
    pub default_notify: Vec<toolgate_policy::NotifyChannel>,
    /// Ranges notifications may reach although loopback, link-local, cloud
    /// metadata or in a profile's hardline CIDRs (`--notify-allow-cidr`).
    pub notify_allow: Arc<[ipnet::IpNet]>,
}

impl Settings {
    /// Defaults for a controller running in `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        Self {
            bundle_validity: SignedDuration::from_hours(24),
            approvals: crate::approval::Placement::per_tenant(&namespace),
            namespace,
            fleet_window: crate::fleet::FLEET_WINDOW,
            fleet_refresh: SignedDuration::from_secs(60),
            tenant_secret: Some(crate::tenancy::DATABASE_SECRET.to_owned()),
            tenant_base_url: None,
            notify_interval: std::time::Duration::from_secs(2),
            notify_retention: SignedDuration::from_hours(24),
            default_notify: Vec::new(),
            notify_allow: Arc::new([]),
        }
    }
}

/// Shared state of the reconcilers. Cheap to clone via `Arc`.
pub struct Context {
    /// Kubernetes client (a real one, or a `tower-test` mock in tests).
    pub client: kube::Client,
    /// toolgate database.
    pub store: Store,
    /// The key that signs bundles.
    pub key: SigningKey,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Kubernetes Events publisher.
    pub recorder: Recorder,
    /// Tunables.
    pub settings: Settings,
    /// The clock.
    pub clock: Clock,
    /// Namespaces whose `toolgate-trust` ConfigMap is known to list the key.
    pub(crate) trusted_namespaces: Mutex<HashSet<String>>,
    /// Namespaces whose tenant database Secret was checked or written.
    provisioned_namespaces: Mutex<HashSet<String>>,
    /// Pending approvals whose object could not be created (warned once).
    unmirrored: Mutex<HashSet<String>>,
    /// Rows of other passes that did not read back (warned and counted once).
    unreadable: Mutex<HashSet<String>>,
}

impl Context {
    /// A context with the wall clock.
    pub fn new(
        client: kube::Client,
        store: Store,
        key: SigningKey,
        metrics: Metrics,
        settings: Settings,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::MANAGER.into(),
                instance: std::env::var(toolgate_contract::env::POD_NAME).ok(),
            },
        );
        Self {
            client,
            store,
            key,
            metrics,
            recorder,
            settings,
            clock: Arc::new(Timestamp::now),
            trusted_namespaces: Mutex::new(HashSet::new()),
            provisioned_namespaces: Mutex::new(HashSet::new()),
            unmirrored: Mutex::new(HashSet::new()),
            unreadable: Mutex::new(HashSet::new()),
        }
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Records that `namespace` already trusts the key, so reconciles there
    /// do not check `toolgate-trust` again.
    pub fn mark_trusted(&self, namespace: &str) {
        self.trusted_namespaces
            .lock()
            .expect("trusted namespaces lock")
            .insert(namespace.to_owned());
    }

    pub(crate) fn is_trusted(&self, namespace: &str) -> bool {
        self.trusted_namespaces
            .lock()
            .expect("trusted namespaces lock")
            .contains(namespace)
    }

    pub(crate) fn mark_provisioned(&self, namespace: &str) {
        self.provisioned_namespaces
            .lock()
            .expect("provisioned namespaces lock")
            .insert(namespace.to_owned());
    }

    pub(crate) fn is_provisioned(&self, namespace: &str) -> bool {
        self.provisioned_namespaces
            .lock()
            .expect("provisioned namespaces lock")
            .contains(namespace)
    }

    /// Whether the row `key` of `pass` (one of
    /// [`crate::metrics::UNREADABLE_PASSES`]) is found unreadable for the
    /// first time; if so it is counted in `toolgate_unreadable_rows_total`
    /// and the caller logs it.
    pub(crate) fn first_unreadable(&self, pass: &str, key: &str) -> bool {
        let first = self
            .unreadable
            .lock()
            .expect("unreadable lock")
            .insert(format!("{pass} {key}"));
        if first {
            self.metrics
                .unreadable_rows
                .with_label_values(&[pass])
                .inc();
        }
        first
    }

    /// Whether approval `id` failed to mirror for the first time (so the
    /// failure is logged once, not every pass).
    pub(crate) fn first_unmirrored(&self, id: &str) -> bool {
        self.unmirrored
            .lock()
            .expect("unmirrored lock")
            .insert(id.to_owned())
    }

    /// Forgets approvals that mirrored since, or left `pending`.
    pub(crate) fn keep_unmirrored(&self, still: &HashSet<String>) {
        self.unmirrored
            .lock()
            .expect("unmirrored lock")
            .retain(|id| still.contains(id));
    }

    /// Current time.
    pub fn now(&self) -> Timestamp {
        (self.clock)()
    }

    /// Publishes an Event about `regarding`; a failure is logged, never
    /// fatal (an Event is a courtesy to whoever runs `kubectl describe`).
    pub(crate) async fn event(
        &self,
        regarding: &k8s_openapi::api::core::v1::ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %e, reason = %event.reason, "could not publish event");
        }
    }

    /// Writes `status` onto `obj` by server-side apply, as the controller's
    /// field manager with force: the controller owns every status field it
    /// sets, and a field it no longer sets (a cleared message, say) is
    /// removed rather than left behind as a merge patch would.
    pub(crate) async fn apply_status<K>(
        &self,
        obj: &K,
        status: &impl Serialize,
    ) -> Result<(), ControllerError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let ns = obj.namespace().ok_or_else(|| {
            ControllerError::InvalidObject(format!("{} without namespace", K::kind(&())))
        })?;
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        api.patch_status(
            &obj.name_any(),
            &PatchParams::apply(crate::MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        Ok(())
    }
}
