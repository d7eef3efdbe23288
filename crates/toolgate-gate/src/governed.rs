//! Every workspace operation is the tool call `workspace.<op>` with arguments
//! `{"path": …}` (write adds `"content"`), decided by the one decision path exactly as
//! `/v1/authorize` would decide it and recorded in the decision log. A
//! profile that declares no `workspace.*` tool denies them (`unknown_tool`);
//! a hardline path rule denies them in every mode. A high-risk write records
//! its intent around the write itself.
//!
//! The path is resolved first: one the workspace refuses (an escape, a bad
//! path, a link swapped in) is recorded as a `workspace_refused` denial,
//! the check naming its code, and is never decided as an allow. A path
//! that goes through a symbolic link inside the root is decided once on
//! both the name and where it leads (`{"path": [named, resolved]}`: the
//! stricter answer stands), so hardline paths, rules and flow labels see
//! the file that is actually opened; the operation then opens exactly
//! the resolved path (see [`crate::workspace`]).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolgate_policy::{Decision, Id, Provenance, Reason, RunId};
use toolgate_store::IntentOutcome;

use crate::decisions::Decisions;
use crate::intents::Intents;
use crate::shared::Shared;
use crate::workspace::{
    FileRead, FileWritten, Listing, Resolved, Stat, WorkspaceError, Workspaces,
};
use crate::{
    AuthorizeRequest, AuthorizeResponse, BeginIntentRequest, CompleteRequest, GateError, NO_STEP,
    RefusalRequest,
};

/// The tool a workspace write is decided and recorded as.
const WRITE_TOOL: &str = "workspace.write";

/// Body of workspace `read`, `list` and `stat`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathRequest {
    /// Run whose workspace to use, in its canonical spelling.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// Relative path; `""` is the root (list and stat only).
    pub path: String,
    /// Step within the run, for the decision record (`""` is none).
    #[serde(default, deserialize_with = "toolgate_policy::ids::empty_as_none")]
    #[schemars(with = "Option<String>")]
    pub step_id: Option<Id>,
}

/// Body of workspace `write`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteRequest {
    /// Run whose workspace to use, in its canonical spelling.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// Relative path.
    pub path: String,
    /// UTF-8 text to write.
    pub content: String,
    /// Step within the run, for the decision record (`""` is none).
    #[serde(default, deserialize_with = "toolgate_policy::ids::empty_as_none")]
    #[schemars(with = "Option<String>")]
    pub step_id: Option<Id>,
}

/// A workspace result with the decision that allowed it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
// The schema is named and described as its result (`FileRead`, ...):
// the answer is that result with the decision id beside it, and no
// other member is ever written.
#[schemars(rename = "{T}", description = "", deny_unknown_fields)]
pub struct Governed<T> {
    /// The allowing decision.
    pub decision_id: String,
    /// What the operation returned.
    #[serde(flatten)]
    pub result: T,
}

/// Concurrent workspace operations; the rest wait (bounded) for a slot, so
/// stuck file I/O can never take every blocking thread.
pub const WORKSPACE_SLOTS: usize = 8;
/// How long a workspace request waits for a slot.
const WORKSPACE_QUEUE_WAIT: Duration = Duration::from_secs(5);
/// How long one workspace operation may take.
const WORKSPACE_IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The workspace operations of this sidecar: its workspaces, the slots
/// their I/O runs in, and the decisions and intents each operation goes
/// through.
pub(crate) struct GovernedWorkspaces {
    shared: Arc<Shared>,
    decisions: Arc<Decisions>,
    intents: Arc<Intents>,
    /// Workspace roots.
    workspaces: Arc<Workspaces>,
    /// Bounds concurrent workspace I/O (see [`WORKSPACE_SLOTS`]).
    slots: Arc<tokio::sync::Semaphore>,
}

impl GovernedWorkspaces {
    pub(crate) fn new(
        shared: Arc<Shared>,
        decisions: Arc<Decisions>,
        intents: Arc<Intents>,
        workspaces: Workspaces,
    ) -> Self {
        Self {
            shared,
            decisions,
            intents,
            workspaces: Arc::new(workspaces),
            slots: Arc::new(tokio::sync::Semaphore::new(WORKSPACE_SLOTS)),
        }
    }
}

/// Runs file I/O on the blocking pool, holding one of [`WORKSPACE_SLOTS`].
/// A timed-out operation keeps its slot until its thread returns, so even
/// operations that never return cannot exceed the bound.
async fn workspace_io<T: Send + 'static>(
    app: &GovernedWorkspaces,
    f: impl FnOnce() -> Result<T, GateError> + Send + 'static,
) -> Result<T, GateError> {
    let permit = tokio::time::timeout(WORKSPACE_QUEUE_WAIT, app.slots.clone().acquire_owned())
        .await
        .map_err(|_| GateError::WorkspaceBusy("every workspace I/O slot is busy".into()))?
        .map_err(|_| GateError::WorkspaceBusy("workspace I/O is shut down".into()))?;
    let task = tokio::task::spawn_blocking(move || {
        let _slot = permit;
        f()
    });
    match tokio::time::timeout(WORKSPACE_IO_TIMEOUT, task).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(GateError::StoreUnavailable("workspace task failed".into())),
        Err(_) => Err(GateError::WorkspaceTimeout(format!(
            "workspace operation exceeded {} s",
            WORKSPACE_IO_TIMEOUT.as_secs()
        ))),
    }
}

/// Decides `workspace.<op>` for these arguments, with the provenance of
/// the file read when the sidecar knows it; anything but an allow is a 403
/// carrying the verdict.
async fn govern_read(
    app: &GovernedWorkspaces,
    op: &str,
    run_id: &RunId,
    step_id: Option<Id>,
    arguments: serde_json::Map<String, serde_json::Value>,
    provenance: Option<Provenance>,
) -> Result<AuthorizeResponse, GateError> {
    let answer = app
        .decisions
        .authorize_read(
            &AuthorizeRequest {
                tool: Id::parse(format!("workspace.{op}"))?,
                action: None,
                arguments,
                run_id: run_id.clone(),
                step_id,
                tenant: None,
                definition_digest: None,
            },
            provenance,
        )
        .await?;
    if answer.verdict.verdict == Decision::Allow {
        return Ok(answer);
    }
    let code = if answer.verdict.verdict == Decision::Escalate {
        toolgate_contract::errors::APPROVAL_REQUIRED
    } else {
        toolgate_contract::errors::POLICY_DENIED
    };
    let message = format!(
        "workspace.{op}: {} ({})",
        answer.verdict.verdict.as_str(),
        answer.verdict.reason.as_str()
    );
    Err(GateError::PolicyDenied {
        code,
        message,
        verdict: Box::new(answer),
    })
}

/// Decides `workspace.<op>` on `arguments` (whose `path` is the path as
/// named): through a link, once, on both the name and where it leads
/// (`{"path": [NAMED, RESOLVED]}`, each read as the policy reads an array:
/// the stricter answer stands, and labels are set by either), so one
/// operation is one decision and one charge.
async fn govern_path(
    app: &GovernedWorkspaces,
    op: &'static str,
    req: &PathRequest,
    resolved: &Resolved,
    mut arguments: serde_json::Map<String, serde_json::Value>,
    provenance: Option<Provenance>,
) -> Result<AuthorizeResponse, GateError> {
    if resolved.through_link() {
        let both = serde_json::json!([resolved.requested(), resolved.resolved()]);
        arguments.insert("path".into(), both);
    }
    let step = req.step_id.clone();
    govern_read(app, op, &req.run_id, step, arguments, provenance).await
}

/// A path whose text the workspace refuses is decided first when the policy
/// denies it anyway (a hardlined file spelled another way is then refused
/// as `hardline_path`, as it would be anywhere), and otherwise refused by
/// the workspace: never recorded as an allow.
async fn resolve(
    app: &GovernedWorkspaces,
    op: &'static str,
    req: &PathRequest,
    allow_root: bool,
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> Result<Resolved, GateError> {
    let state = app.workspaces.clone();
    let (run_id, path) = (req.run_id.clone(), req.path.clone());
    let resolved = workspace_io(app, move || Ok(state.resolve(&run_id, &path, allow_root)?)).await;
    if let Err(GateError::Workspace(WorkspaceError::InvalidPath(_))) = &resolved
        && app
            .decisions
            .denies_anywhere(&format!("workspace.{op}"), arguments)
    {
        let step = req.step_id.clone();
        govern_read(app, op, &req.run_id, step, arguments.clone(), None).await?;
    }
    resolved
}

/// Counts a refused workspace request in
/// `toolgate_workspace_refusals_total{code}`; one the workspace itself
/// refused (not the policy, whose denial is already in the log) is recorded
/// as a `workspace_refused` denial of `workspace.<op>`, the check naming
/// its code, before it is answered.
async fn counted_refusal<T>(
    app: &GovernedWorkspaces,
    op: &str,
    req: &PathRequest,
    result: Result<T, GateError>,
) -> Result<T, GateError> {
    if let Err(e) = &result {
        app.shared
            .metrics
            .workspace_refusals
            .with_label_values(&[e.code()])
            .inc();
        if let GateError::Workspace(refused) = e {
            let refusal = RefusalRequest {
                tool: Id::parse(format!("workspace.{op}"))?,
                arguments: Some(path_arguments(&req.path)),
                run_id: req.run_id.clone(),
                step_id: req.step_id.clone(),
                reason: Reason::WorkspaceRefused,
                check: Id::parse(format!("workspace:{}", refused.code()))?,
                definition_digest: None,
            };
            app.decisions.record_refusal(&refusal).await;
        }
    }
    result
}

fn path_arguments(path: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut args = serde_json::Map::new();
    args.insert("path".into(), path.into());
    args
}

impl GovernedWorkspaces {
    /// `workspace.write`, decided and recorded; a high-risk write records
    /// its intent around the write itself.
    pub(crate) async fn write(
        &self,
        req: WriteRequest,
    ) -> Result<Governed<FileWritten>, GateError> {
        let target = PathRequest {
            run_id: req.run_id.clone(),
            path: req.path.clone(),
            step_id: req.step_id.clone(),
        };
        let written = workspace_write_inner(self, &target, req.content).await;
        counted_refusal(self, "write", &target, written).await
    }

    /// `workspace.read`, decided and recorded. Under a profile whose flow
    /// selectors name a provenance the file is read first, inside the run's workspace (nothing
    /// leaves the sidecar), so the decision and the labels it sets see the
    /// file's provenance; its content is answered only when allowed.
    pub(crate) async fn read(&self, req: PathRequest) -> Result<Governed<FileRead>, GateError> {
        let flows = self
            .decisions
            .current()
            .is_some_and(|e| e.policy.flows_use_provenance());
        if !flows {
            return governed_path(self, req, "read", Workspaces::read).await;
        }
        let read = read_then_govern(self, &req).await;
        counted_refusal(self, "read", &req, read).await
    }

    /// `workspace.list`, decided and recorded.
    pub(crate) async fn list(&self, req: PathRequest) -> Result<Governed<Listing>, GateError> {
        governed_path(self, req, "list", Workspaces::list).await
    }

    /// `workspace.stat`, decided and recorded.
    pub(crate) async fn stat(&self, req: PathRequest) -> Result<Governed<Stat>, GateError> {
        governed_path(self, req, "stat", Workspaces::stat).await
    }
}

async fn workspace_write_inner(
    app: &GovernedWorkspaces,
    target: &PathRequest,
    content: String,
) -> Result<Governed<FileWritten>, GateError> {
    let mut args = path_arguments(&target.path);
    args.insert("content".into(), content.clone().into());
    let resolved = resolve(app, "write", target, false, &args).await?;
    let answer = govern_path(app, "write", target, &resolved, args, None).await?;
    // A high-risk write is recorded like any high-risk call, through the
    // same intent steps an agent takes: begun on its allowing decision
    // (which marks it used and counts it), watermarked, closed with its
    // outcome.
    let intent = if answer.verdict.intent_required {
        let begun = app
            .intents
            .begin_intent(BeginIntentRequest {
                decision_id: Id::parse(answer.decision_id.clone())?,
                run_id: target.run_id.clone(),
                step_id: target
                    .step_id
                    .clone()
                    .unwrap_or_else(|| Id::from_static(NO_STEP)),
                tool: Id::from_static(WRITE_TOOL),
                args_digest: Id::parse(answer.verdict.args_digest.clone())?,
                call_digest: Some(Id::parse(answer.verdict.call_digest.clone())?),
                verification_probe: None,
            })
            .await?;
        app.intents.effect_sent(&begun.id).await?;
        Some(begun.id)
    } else {
        None
    };
    let state = app.workspaces.clone();
    let run_id = target.run_id.clone();
    let written = workspace_io(app, move || Ok(state.write(&run_id, &resolved, &content)?)).await;
    if let Some(id) = intent {
        let (outcome, detail) = match &written {
            Ok(_) => (IntentOutcome::Completed, None),
            Err(e) => (IntentOutcome::Error, Some(e.code().to_owned())),
        };
        app.intents
            .complete_intent(&id, CompleteRequest { outcome, detail })
            .await?;
    }
    Ok(Governed {
        decision_id: answer.decision_id,
        result: written?,
    })
}

/// A workspace read decided on the provenance of what was read: the path
/// is resolved and the file read first (inside the sidecar), then the path
/// is decided as named and, through a link, as resolved.
async fn read_then_govern(
    app: &GovernedWorkspaces,
    req: &PathRequest,
) -> Result<Governed<FileRead>, GateError> {
    let resolved = resolve(app, "read", req, false, &path_arguments(&req.path)).await?;
    let (state, run_id, target) = (app.workspaces.clone(), req.run_id.clone(), resolved.clone());
    let read = workspace_io(app, move || Ok(state.read(&run_id, &target)?)).await;
    let provenance = read.as_ref().ok().map(|r| r.provenance);
    let answer = govern_path(
        app,
        "read",
        req,
        &resolved,
        path_arguments(&req.path),
        provenance,
    );
    let answer = answer.await?;
    Ok(Governed {
        decision_id: answer.decision_id,
        result: read?,
    })
}

/// Resolves a path request, decides `workspace.<op>` on it (through a link:
/// twice) and, when allowed, runs `op` on the resolved path; refusals are
/// counted and the workspace's own recorded.
async fn governed_path<T: Send + 'static>(
    app: &GovernedWorkspaces,
    req: PathRequest,
    op: &'static str,
    run: fn(&Workspaces, &RunId, &Resolved) -> Result<T, WorkspaceError>,
) -> Result<Governed<T>, GateError> {
    let outcome = async {
        let args = path_arguments(&req.path);
        let resolved = resolve(app, op, &req, op != "read", &args).await?;
        let answer = govern_path(app, op, &req, &resolved, args, None).await?;
        let (state, run_id) = (app.workspaces.clone(), req.run_id.clone());
        let result = workspace_io(app, move || Ok(run(&state, &run_id, &resolved)?)).await?;
        Ok(Governed {
            decision_id: answer.decision_id,
            result,
        })
    }
    .await;
    counted_refusal(app, op, &req, outcome).await
}
