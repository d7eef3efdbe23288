//! A run's flow labels at the gate (`spec.flows`). Before a call of a
//! profile with flows is decided, the labels its run (or pod) carries are
//! read from the store, which every sidecar of the run shares; an allowed
//! call that sets labels writes them, durably, before it is answered.
//!
//! Why a read per decision is enough, without locking the run: a label is
//! committed before the call that sets it is answered, and the agent only
//! has what that call returns (the secret, the injected text) after the
//! answer. Any later call that could carry it out is decided after the
//! commit, on whichever sidecar, and so sees the label.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use toolgate_policy::{CompiledPolicy, FlowScope, LabelSet, Provenance, RunId};

use crate::AuthorizeRequest;
use crate::shared::Shared;

/// Most runs and pods whose labels one sidecar remembers; past it the
/// memory starts again (it only saves reads).
const MAX_REMEMBERED: usize = 10_000;

/// Labels this sidecar knows a run or pod carries: what it read or set.
/// Labels only grow, so what is known is always a subset of the truth.
#[derive(Debug, Default)]
pub(crate) struct KnownLabels {
    by_subject: Mutex<HashMap<(FlowScope, String), BTreeSet<String>>>,
}

impl KnownLabels {
    /// The labels known for `key`, as a set of `policy`'s labels (read
    /// under the lock: nothing is copied on a decision's path).
    fn labels(&self, key: &(FlowScope, String), policy: &CompiledPolicy) -> LabelSet {
        self.lock().get(key).map_or(LabelSet::EMPTY, |known| {
            policy.flow_labels(known.iter().map(String::as_str))
        })
    }

    fn add<'a>(&self, key: (FlowScope, String), labels: impl IntoIterator<Item = &'a str>) {
        let mut map = self.lock();
        if map.len() >= MAX_REMEMBERED && !map.contains_key(&key) {
            map.clear();
        }
        map.entry(key)
            .or_default()
            .extend(labels.into_iter().map(str::to_owned));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(FlowScope, String), BTreeSet<String>>> {
        self.by_subject.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The labels a call's run or pod carries when it is decided.
#[derive(Debug, Clone)]
pub(crate) struct FlowState {
    pub(crate) scope: FlowScope,
    /// The run id, or the pod name for a pod scope.
    pub(crate) subject: String,
    /// The other scope's key: labels are kept for both the run and the
    /// pod whatever the profile reads, so a profile that changes its
    /// `scope` forgets nothing.
    pub(crate) other: (FlowScope, String),
    pub(crate) labels: LabelSet,
}

/// What carries a run's flow labels under a profile whose flows have
/// `scope`: the run itself, or the pod it runs in (`None` when the pod is
/// not known). The one rule the gate and `toolgate runs status` both read.
pub fn flow_subject<'a>(
    scope: FlowScope,
    run_id: &'a RunId,
    pod: Option<&'a str>,
) -> Option<&'a str> {
    match scope {
        FlowScope::Run => Some(run_id.as_str()),
        FlowScope::Pod => pod,
    }
}

/// The flow labels of this sidecar's runs and pod: read from the store,
/// written for the calls that set them, and what it already knows of them.
pub(crate) struct Flows {
    shared: Arc<Shared>,
    known: KnownLabels,
}

impl Flows {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            known: KnownLabels::default(),
        }
    }

    /// What carries a call's labels under `scope`: its run, or this pod.
    fn subject(&self, scope: FlowScope, run_id: &RunId) -> String {
        flow_subject(scope, run_id, Some(&self.shared.pod))
            .unwrap_or_default()
            .to_owned()
    }

    /// The labels `run_id` (or this pod) carries under `policy`; `None`
    /// for a profile without flows. Read from the store when some flow rule
    /// may select the call (`decides`) and this sidecar does not already
    /// know of every label a rule reads; otherwise what it knows (a subset
    /// of the truth, used only to skip writing labels already set).
    pub(crate) async fn flow_state(
        &self,
        policy: &CompiledPolicy,
        run_id: &RunId,
        decides: bool,
    ) -> Result<Option<FlowState>, toolgate_store::StoreError> {
        let Some(scope) = policy.flow_scope() else {
            return Ok(None);
        };
        let subject = self.subject(scope, run_id);
        let other_scope = match scope {
            FlowScope::Run => FlowScope::Pod,
            FlowScope::Pod => FlowScope::Run,
        };
        let other = (other_scope, self.subject(other_scope, run_id));
        let key = (scope, subject.clone());
        let mut labels = self.known.labels(&key, policy);
        if decides && !policy.flow_watched().is_subset(labels) {
            let stored = self
                .shared
                .store
                .flow_labels()
                .of(&self.shared.tenant, scope, &subject)
                .await?;
            self.known.add(key, stored.iter().map(|l| l.label.as_str()));
            labels = labels.union(policy.flow_labels(stored.iter().map(|l| l.label.as_str())));
        }
        Ok(Some(FlowState {
            scope,
            subject,
            other,
            labels,
        }))
    }

    /// The labels a call is decided with under `policy`: read from the
    /// store only when some flow rule could select the call (otherwise its
    /// verdict cannot depend on them).
    pub(crate) async fn call_flow_state(
        &self,
        policy: &CompiledPolicy,
        req: &AuthorizeRequest,
        provenance: Option<Provenance>,
    ) -> Result<Option<FlowState>, toolgate_store::StoreError> {
        let decides = policy.flow_rules_select(&req.call(), provenance);
        self.flow_state(policy, &req.run_id, decides).await
    }

    /// Records that `decision_id`'s allowed call set `new` labels (those
    /// the state did not hold); the names it was the first to set, or the
    /// store's refusal.
    pub(crate) async fn set_flow_labels(
        &self,
        policy: &CompiledPolicy,
        state: &FlowState,
        new: LabelSet,
        decision_id: &str,
        now: Timestamp,
    ) -> Result<Vec<String>, toolgate_store::StoreError> {
        let names = policy.flow_label_names(new.minus(state.labels));
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let added = self
            .shared
            .store
            .flow_labels()
            .add(
                &self.shared.tenant,
                state.scope,
                &state.subject,
                &names,
                decision_id,
                now,
            )
            .await?;
        self.known
            .add((state.scope, state.subject.clone()), names.iter().copied());
        // The other scope's copy (see `FlowState::other`): not read for
        // this profile's decisions, so only what this call adds is sent.
        let (other_scope, other_subject) = &state.other;
        self.shared
            .store
            .flow_labels()
            .add(
                &self.shared.tenant,
                *other_scope,
                other_subject,
                &names,
                decision_id,
                now,
            )
            .await?;
        // Labels another sidecar set first are not this call's to claim.
        Ok(added)
    }

    /// Remembers that `state`'s subject now carries `set` (written with a
    /// call's charge), so later calls skip writing them again.
    pub(crate) fn learned_labels(&self, policy: &CompiledPolicy, state: &FlowState, set: LabelSet) {
        let names = policy.flow_label_names(set);
        self.known
            .add((state.scope, state.subject.clone()), names.iter().copied());
    }
}
