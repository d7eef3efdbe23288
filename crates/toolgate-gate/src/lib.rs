//! The decision core of toolgate: every way into a decision — the HTTP API
//! (`/v1/authorize`, batches, intents, the workspace API), the MCP gateway
//! over HTTP and the hook — calls [`Gate`], so each keeps the one promise
//! in one place: a call is decided, recorded and remembered exactly once.
//!
//! No HTTP, no Kubernetes: the sidecar's HTTP module and the MCP gateway are
//! adapters over this crate, and it depends only on the policy, the bundle
//! and the store.

mod allowed;
pub mod decision_log;
mod decisions;
pub mod egress;
mod error;
mod flows;
mod governed;
pub mod intents;
pub mod labels;
pub mod metrics;
mod parts;
pub mod policy_state;
pub mod runs;
pub mod shadow_tally;
mod shared;
pub mod stops;
mod trace;
pub mod workspace;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use toolgate_contract::agent_api::RecordedRefusal;
use toolgate_policy::{Id, RunId, Verdict};
use tracing::Instrument;

pub use decision_log::DecisionLog;
pub use decisions::{MessageScreen, RefusalRequest};
pub use egress::{EgressGuard, EgressRefusal};
pub use error::GateError;
pub use flows::flow_subject;
pub use governed::{Governed, PathRequest, WORKSPACE_SLOTS, WriteRequest};
pub use intents::{BeginIntentRequest, CompleteRequest};
pub use metrics::Metrics;
pub use parts::GateParts;
pub use policy_state::{BundleFiles, Enforced, LoadFailure, PolicyState};
pub use runs::CancelledRuns;
pub use toolgate_contract::agent_api::{MAX_WAIT_SECONDS, Screened};
pub use trace::with_sampling;
pub use workspace::Workspaces;

use decisions::Decisions;
use governed::GovernedWorkspaces;
use intents::Intents;
use runs::{
    BatchRequest, BatchResponse, CancelRequest, CancelResponse, PodCancelResponse, RunBook,
    RunStatus,
};
use shared::Shared;
use toolgate_store::{Intent, PendingIntent};
use workspace::{FileRead, FileWritten, Listing, Stat};

/// Step id recorded for calls made outside any step.
pub const NO_STEP: &str = "-";
/// Policy version recorded when no bundle is loaded.
pub const NO_POLICY: &str = "none";
/// How many fresh approvals one (run, step, call) may go through.
pub(crate) const MAX_APPROVAL_ROUNDS: u32 = 32;

/// The sidecar's decision core, composed of what each part owns: the
/// decision path (policy, decision log, flow labels), the run book
/// (stopped runs, budgets), the intents awaiting their calls, and the
/// governed workspaces; each reads the store, the metrics and who this
/// sidecar is from one `Shared`. Built once at start-up; every adapter
/// holds it behind an `Arc` and reaches the parts only through it.
pub struct Gate {
    shared: Arc<Shared>,
    decisions: Arc<Decisions>,
    runs: Arc<RunBook>,
    intents: Arc<Intents>,
    workspaces: GovernedWorkspaces,
}

impl Gate {
    /// The gate of one sidecar.
    pub fn new(parts: GateParts) -> Self {
        let shared = Arc::new(Shared {
            store: parts.store,
            metrics: parts.metrics,
            tenant: parts.tenant,
            stream: parts.stream,
            identity: parts.identity,
            pod: parts.pod,
            trace_arguments: parts.trace_arguments,
        });
        let runs = Arc::new(RunBook::new(shared.clone()));
        let intents = Arc::new(Intents::new(shared.clone()));
        let decisions = Arc::new(Decisions::new(
            shared.clone(),
            parts.policy,
            parts.decision_log,
            runs.clone(),
            intents.clone(),
        ));
        let workspaces = GovernedWorkspaces::new(
            shared.clone(),
            decisions.clone(),
            intents.clone(),
            parts.workspaces,
        );
        Self {
            shared,
            decisions,
            runs,
            intents,
            workspaces,
        }
    }

    // ---- Who this gate is, and what it holds ----

    /// The judge of the sidecar's own connections (MCP upstreams), on the
    /// bundle this gate enforces.
    pub fn egress(&self) -> EgressGuard {
        EgressGuard::new(self.decisions.policy().clone())
    }

    /// The bundle held (live or expired), for reporting; decisions go
    /// through the gate's methods.
    pub fn enforced(&self) -> Option<Arc<Enforced>> {
        self.decisions.current()
    }

    /// The last bundle load that was rejected (the held one stays).
    pub fn last_rejected_bundle(&self) -> Option<policy_state::LoadFailure> {
        self.decisions.policy().last_failure()
    }

    /// Whether the database answers.
    pub async fn database_reachable(&self) -> bool {
        self.shared.store.ping().await.is_ok()
    }

    /// The gate's metrics in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        self.shared.metrics.render()
    }

    /// The tenant this gate decides for.
    pub fn tenant(&self) -> &str {
        &self.shared.tenant
    }

    /// This sidecar's decision stream (`{pod}/{uuidv7}`).
    pub fn stream(&self) -> &str {
        &self.shared.stream
    }

    /// This sidecar as the store charges and stops it: tenant, pod, and the
    /// profile of the bundle it enforces (none without one).
    pub fn caller<'a>(&'a self, enforced: Option<&'a Enforced>) -> toolgate_store::Caller<'a> {
        self.shared.caller(enforced)
    }

    // ---- Decisions ----

    /// Authorizes one call: decides it under the held bundle, records it
    /// (durably before answering for a high-risk tool), remembers an allow
    /// for its intent, and counts it.
    pub async fn authorize(&self, req: &AuthorizeRequest) -> Result<AuthorizeResponse, GateError> {
        self.decisions.authorize(req).await
    }

    /// The one field of a call not checked when it was read (ids are
    /// [`toolgate_policy::Id`]s and the run a [`RunId`]): its tenant.
    pub fn validate_call(&self, req: &AuthorizeRequest) -> Result<(), GateError> {
        self.decisions.validate_call(req)
    }

    /// Decides each call of a batch as [`Gate::authorize`] would (each is
    /// recorded and charged) and says whether they may all run at once.
    pub async fn authorize_batch(&self, req: BatchRequest) -> Result<BatchResponse, GateError> {
        self.decisions.authorize_batch(req).await
    }

    /// Records `refusal`, made at an edge, as a denial, durably, and counts
    /// it; the caller then answers the refusal (it stands whether or not it
    /// could be recorded: refusing is never the unsafe side).
    pub async fn refuse(&self, refusal: &RefusalRequest) -> Result<RecordedRefusal, GateError> {
        self.decisions.refuse(refusal).await
    }

    /// [`Gate::refuse`] where the refusal is answered anyway: a log that
    /// cannot take the record is reported, and the refusal stands.
    pub async fn record_refusal(&self, refusal: &RefusalRequest) {
        self.decisions.record_refusal(refusal).await
    }

    /// Screens a message a run sends an MCP server other than a
    /// `tools/call`: refused, and recorded as a `flow_rule` denial, when
    /// the run's flow rules deny it.
    pub async fn screen_message(&self, message: &MessageScreen) -> Result<Screened, GateError> {
        self.decisions.screen_message(message).await
    }

    /// Which of the named tools the held profile declares and could allow
    /// or escalate, in the order asked, with their pinned definition where
    /// one is pinned; nothing without a live bundle (fail closed).
    pub fn visible_tools(
        &self,
        tools: &[String],
        definitions: &HashMap<String, String>,
    ) -> Result<Vec<String>, GateError> {
        Ok(self.decisions.visible_tools(tools, definitions))
    }

    /// The approval `id` of this tenant, after waiting up to `wait` (at most
    /// [`MAX_WAIT_SECONDS`]) for it to be resolved.
    pub async fn approval(
        &self,
        id: &str,
        wait: Option<Duration>,
    ) -> Result<toolgate_store::Approval, GateError> {
        let approvals = self.shared.store.approvals();
        let tenant = &self.shared.tenant;
        Ok(match wait.filter(|w| !w.is_zero()) {
            Some(wait) => {
                let wait = wait.min(Duration::from_secs(MAX_WAIT_SECONDS));
                let span = trace::approval_wait(id, wait.as_millis());
                let answer = approvals
                    .wait(tenant, id, wait)
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
            None => approvals.get(tenant, id, Timestamp::now()).await?,
        })
    }

    // ---- Runs and stops ----

    /// The run's cancellation (its own or a scope's), budgets and open
    /// intents: what an agent checks between steps.
    pub async fn run_status(&self, run_id: &RunId) -> Result<RunStatus, GateError> {
        let enforced = self.decisions.current();
        self.runs.status(run_id, enforced.as_deref()).await
    }

    /// Cancels the run durably (idempotent): every later call of it is
    /// refused, by every sidecar.
    pub async fn cancel_run(
        &self,
        run_id: &RunId,
        req: &CancelRequest,
    ) -> Result<CancelResponse, GateError> {
        self.runs.cancel_run(run_id, req).await
    }

    /// Stops every run of this pod, whatever run id it uses.
    pub async fn cancel_pod(&self, req: &CancelRequest) -> Result<PodCancelResponse, GateError> {
        self.runs.cancel_pod(req).await
    }

    /// One read of the stops made elsewhere ([`stops::watch_cancellations`]),
    /// counted by what set it off.
    pub(crate) async fn learn_stops(
        &self,
        trigger: &str,
        since: Timestamp,
    ) -> Result<(), toolgate_store::StoreError> {
        let policy = self.decisions.policy();
        policy
            .metrics()
            .stop_reads
            .with_label_values(&[trigger])
            .inc();
        let enforced = policy.current();
        self.runs.learn_stops(enforced.as_deref(), since).await
    }

    // ---- Intents ----

    /// Records the pending intent of the call decision `req.decision_id`
    /// allowed: exactly that call, once.
    pub async fn begin_intent(&self, req: BeginIntentRequest) -> Result<Intent, GateError> {
        self.intents.begin_intent(req).await
    }

    /// Watermarks intent `id`: its effect is about to be sent.
    pub async fn effect_sent(&self, id: &str) -> Result<Intent, GateError> {
        self.intents.effect_sent(id).await
    }

    /// Closes intent `id` with its outcome.
    pub async fn complete_intent(
        &self,
        id: &str,
        req: CompleteRequest,
    ) -> Result<Intent, GateError> {
        self.intents.complete_intent(id, req).await
    }

    /// The run's open intents, each with its resume class.
    pub async fn pending_intents(&self, run_id: &RunId) -> Result<Vec<PendingIntent>, GateError> {
        self.intents.pending_intents(run_id).await
    }

    // ---- Workspaces ----

    /// `workspace.write`, decided and recorded; a high-risk write records
    /// its intent around the write itself.
    pub async fn workspace_write(
        &self,
        req: WriteRequest,
    ) -> Result<Governed<FileWritten>, GateError> {
        self.workspaces.write(req).await
    }

    /// `workspace.read`, decided and recorded (on the file's provenance,
    /// under a profile whose flows name one).
    pub async fn workspace_read(&self, req: PathRequest) -> Result<Governed<FileRead>, GateError> {
        self.workspaces.read(req).await
    }

    /// `workspace.list`, decided and recorded.
    pub async fn workspace_list(&self, req: PathRequest) -> Result<Governed<Listing>, GateError> {
        self.workspaces.list(req).await
    }

    /// `workspace.stat`, decided and recorded.
    pub async fn workspace_stat(&self, req: PathRequest) -> Result<Governed<Stat>, GateError> {
        self.workspaces.stat(req).await
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

/// An approval as `GET /v1/approvals/{id}` answers it: the row plus
/// `approval_id` (the contract's shape over the store's row).
pub type ApprovalView = toolgate_contract::agent_api::ApprovalView<toolgate_store::Approval>;

/// `approval` as the API shows it, its id also as `approval_id`.
pub fn approval_view(approval: toolgate_store::Approval) -> ApprovalView {
    let approval_id = approval.id.clone();
    ApprovalView {
        approval,
        approval_id,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An approval is shown as it always was: its row plus `approval_id`.
    #[test]
    fn an_approval_is_shown_with_its_approval_id() {
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let approval = toolgate_store::Approval {
            id: "a1".into(),
            tenant: "t".into(),
            invocation_id: "inv".into(),
            run_id: "r1".into(),
            tool: "payments.refund".into(),
            args_digest: "sha256:a".into(),
            call_digest: Some("sha256:c".into()),
            policy_version: "sha256:p".into(),
            decision_id: "d1".into(),
            requested_by: "pod".into(),
            status: toolgate_store::ApprovalStatus::Approved,
            created_at: at("2026-01-02T03:04:05Z"),
            expires_at: at("2026-01-02T04:04:05Z"),
            resolved_by: Some("alice".into()),
            reason: Some("ok".into()),
            resolved_at: Some(at("2026-01-02T03:05:05Z")),
            consumed_at: None,
            action: None,
            preview: Some("refund 5".into()),
        };
        assert_eq!(
            serde_json::to_value(approval_view(approval)).unwrap(),
            json!({
                "id": "a1", "approval_id": "a1", "tenant": "t", "invocation_id": "inv",
                "run_id": "r1", "tool": "payments.refund", "args_digest": "sha256:a",
                "call_digest": "sha256:c", "policy_version": "sha256:p",
                "decision_id": "d1", "requested_by": "pod", "status": "approved",
                "created_at": "2026-01-02T03:04:05Z", "expires_at": "2026-01-02T04:04:05Z",
                "resolved_by": "alice", "reason": "ok",
                "resolved_at": "2026-01-02T03:05:05Z", "consumed_at": null,
                "action": null, "preview": "refund 5",
            })
        );
    }
}
