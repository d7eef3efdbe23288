//! The decision core of toolgate: every way into a decision — the HTTP API
//! (`/v1/authorize`, batches, intents, the workspace API), the MCP gateway
//! over HTTP and the hook — calls [`Gate`], so each keeps the one promise
//! in one place: a call is decided, recorded and remembered exactly once.
//!
//! No HTTP, no Kubernetes: the sidecar's HTTP module and the MCP gateway are
//! adapters over this crate, and it depends only on the policy, the bundle
//! and the store.

mod allowed;
mod authorize;
pub mod decision_log;
pub mod egress;
mod error;
mod escalation;
mod flows;
mod governed;
pub mod intents;
pub mod labels;
pub mod metrics;
mod parts;
pub mod policy_state;
mod refusals;
pub mod runs;
pub mod stops;
mod trace;
pub mod workspace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_policy::{Id, RunId, Verdict};
use toolgate_store::Store;
use tracing::Instrument;

use allowed::AllowedDecisions;
pub use decision_log::DecisionLog;
pub use egress::{EgressGuard, EgressRefusal};
pub use error::GateError;
pub use governed::{Governed, PathRequest, WORKSPACE_SLOTS, WriteRequest};
pub use intents::{BeginIntentRequest, CompleteRequest};
pub use metrics::Metrics;
pub use parts::GateParts;
pub use policy_state::{BundleFiles, Enforced, LoadFailure, PolicyState};
pub use refusals::{MessageScreen, RefusalRequest};
pub use runs::CancelledRuns;
pub use toolgate_contract::agent_api::{MAX_WAIT_SECONDS, RecordedRefusal, Screened};
pub use trace::with_sampling;
pub use workspace::Workspaces;

/// Step id recorded for calls made outside any step.
pub const NO_STEP: &str = "-";
/// Policy version recorded when no bundle is loaded.
pub const NO_POLICY: &str = "none";
/// How many fresh approvals one (run, step, call) may go through.
pub(crate) const MAX_APPROVAL_ROUNDS: u32 = 32;

/// The sidecar's decision core: the held policy, the shared database, the
/// decision log, workspaces, metrics, and who this sidecar is. Built once
/// at start-up; every adapter holds it behind an `Arc`.
pub struct Gate {
    /// The enforced policy.
    pub(crate) policy: Arc<PolicyState>,
    /// The shared database.
    pub(crate) store: Store,
    /// Background writer for low-risk decisions.
    pub(crate) decision_log: DecisionLog,
    /// Workspace roots.
    pub(crate) workspaces: Workspaces,
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
    /// Allowed high-risk decisions awaiting their intent.
    pub(crate) allowed: Mutex<AllowedDecisions>,
    /// Bounds concurrent workspace I/O (see [`WORKSPACE_SLOTS`]).
    pub(crate) workspace_slots: Arc<tokio::sync::Semaphore>,
    /// Runs and scopes of this tenant known to be cancelled.
    pub(crate) cancelled: Arc<CancelledRuns>,
    /// Whether a call's span carries its arguments (off unless the
    /// sidecar opts in: arguments may hold what a trace store must not).
    pub(crate) trace_arguments: bool,
    /// Flow labels this sidecar knows its runs and pod carry.
    pub(crate) known_labels: flows::KnownLabels,
}

impl Gate {
    /// The gate of one sidecar.
    pub fn new(parts: GateParts) -> Self {
        Self {
            policy: parts.policy,
            store: parts.store,
            decision_log: parts.decision_log,
            workspaces: parts.workspaces,
            metrics: parts.metrics,
            tenant: parts.tenant,
            stream: parts.stream,
            identity: parts.identity,
            pod: parts.pod,
            allowed: Mutex::new(AllowedDecisions::default()),
            workspace_slots: Arc::new(tokio::sync::Semaphore::new(WORKSPACE_SLOTS)),
            cancelled: Arc::new(CancelledRuns::default()),
            trace_arguments: parts.trace_arguments,
            known_labels: flows::KnownLabels::default(),
        }
    }

    /// The judge of the sidecar's own connections (MCP upstreams), on the
    /// bundle this gate enforces.
    pub fn egress(&self) -> EgressGuard {
        EgressGuard::new(self.policy.clone())
    }

    /// The bundle held (live or expired), for reporting; decisions go
    /// through the gate's methods.
    pub fn enforced(&self) -> Option<Arc<Enforced>> {
        self.policy.current()
    }

    /// The last bundle load that was rejected (the held one stays).
    pub fn last_rejected_bundle(&self) -> Option<policy_state::LoadFailure> {
        self.policy.last_failure()
    }

    /// Whether the database answers.
    pub async fn database_reachable(&self) -> bool {
        self.store.ping().await.is_ok()
    }

    /// The gate's metrics in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        self.metrics.render()
    }

    /// The tenant this gate decides for.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// This sidecar's decision stream (`{pod}/{uuidv7}`).
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// This sidecar as the store charges and stops it: tenant, pod, and the
    /// profile of the bundle it enforces (none without one).
    pub fn caller<'a>(&'a self, enforced: Option<&'a Enforced>) -> toolgate_store::Caller<'a> {
        toolgate_store::Caller::new(
            &self.tenant,
            &self.pod,
            enforced.map(|e| e.profile.as_str()),
        )
    }

    /// Which of the named tools the held profile declares and could allow
    /// or escalate, in the order asked, with their pinned definition where
    /// one is pinned; nothing without a live bundle (fail closed).
    pub fn visible_tools(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Result<Vec<String>, GateError> {
        Ok(match self.policy.live(Timestamp::now()) {
            Some(e) => tools
                .iter()
                .filter(|t| e.policy.may_permit(t))
                .filter(|t| {
                    e.policy.pinned_definition(t).is_none_or(|pinned| {
                        definitions.get(*t).map(String::as_str) == Some(pinned)
                    })
                })
                .cloned()
                .collect(),
            _ => Vec::new(),
        })
    }

    /// The approval `id` of this tenant, after waiting up to `wait` (at most
    /// [`MAX_WAIT_SECONDS`]) for it to be resolved.
    pub async fn approval(
        &self,
        id: &str,
        wait: Option<Duration>,
    ) -> Result<toolgate_store::Approval, GateError> {
        let approvals = self.store.approvals();
        Ok(match wait.filter(|w| !w.is_zero()) {
            Some(wait) => {
                let wait = wait.min(Duration::from_secs(MAX_WAIT_SECONDS));
                let span = trace::approval_wait(id, wait.as_millis());
                let answer = approvals
                    .wait(&self.tenant, id, wait)
                    .instrument(span.clone())
                    .await;
                match &answer {
                    Ok(a) => {
                        span.record("toolgate.approval.status", a.status.as_str());
                        if let Some(by) = &a.resolved_by {
                            span.record("toolgate.approval.decided_by", by.as_str());
                        }
                    }
                    Err(e) => trace::failed(&span, e.code()),
                }
                answer?
            }
            None => approvals.get(&self.tenant, id, Timestamp::now()).await?,
        })
    }
}

/// One call to decide: what `POST /v1/authorize` carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeRequest {
    /// Tool as the agent calls it.
    pub tool: Id,
    /// Optional action.
    #[serde(default)]
    pub action: Option<Id>,
    /// Exact arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Run the call belongs to, in its canonical spelling (a look-alike
    /// is refused when the body is read: `invalid_run_id`).
    pub run_id: RunId,
    /// Step within the run (`""` is none).
    #[serde(default, deserialize_with = "toolgate_policy::ids::empty_as_none")]
    pub step_id: Option<Id>,
    /// Must equal the sidecar's tenant when given.
    #[serde(default)]
    pub tenant: Option<String>,
    /// For MCP gateways: the `sha256:` digest of the tool's canonical
    /// definition as the server announced it; checked against a pinned
    /// `definitionDigest`.
    #[serde(default)]
    pub definition_digest: Option<Id>,
}

impl AuthorizeRequest {
    /// The call as the policy sees it.
    pub fn call(&self) -> toolgate_policy::Call<'_> {
        toolgate_policy::Call {
            tool: &self.tool,
            action: self.action.as_deref(),
            arguments: &self.arguments,
        }
    }
}

/// The answer to one call: the verdict plus its identifiers, in the
/// contract's shape ([`toolgate_contract::agent_api::AuthorizeResponse`]).
pub type AuthorizeResponse = toolgate_contract::agent_api::AuthorizeResponse<Verdict>;

/// The run a path segment, query or header names, in its canonical
/// spelling; a look-alike is `invalid_run_id`.
pub fn run_id(text: &str) -> Result<RunId, GateError> {
    Ok(RunId::parse(text)?)
}

/// `value` as a JSON object with one more member: how a record is shown
/// with its id under the name clients use (`intent_id`, `approval_id`).
pub fn json_with(value: &impl Serialize, key: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::to_value(value).unwrap_or_default();
    if let Some(obj) = v.as_object_mut() {
        obj.insert(key.into(), extra);
    }
    v
}
