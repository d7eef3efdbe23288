//! `POST /v1/authorize/batch`: each call decided (recorded and charged)
//! as one authorize would, and whether they may all run at once.

use serde::{Deserialize, Serialize};
use toolgate_policy::{Decision, Id, Reason, RunId, SideEffect, Verdict};

use super::Decisions;
use crate::{AuthorizeRequest, AuthorizeResponse, GateError};

/// Most calls one batch may hold.
pub const MAX_BATCH_CALLS: usize = 64;

/// One call of a batch: an authorize request without the run.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchCall {
    /// Tool as the agent calls it.
    #[schemars(with = "String")]
    pub tool: Id,
    /// Optional action.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub action: Option<Id>,
    /// Exact arguments.
    pub arguments: serde_json::Map<String, serde_json::Value>,
    /// Step within the run (`""` is none).
    #[serde(default, deserialize_with = "toolgate_policy::ids::empty_as_none")]
    #[schemars(with = "Option<String>")]
    pub step_id: Option<Id>,
    /// For MCP gateways: the tool's definition digest.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub definition_digest: Option<Id>,
}

/// Body of `POST /v1/authorize/batch`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// Run every call belongs to, in its canonical spelling.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// Must equal the sidecar's tenant when given.
    #[serde(default)]
    pub tenant: Option<String>,
    /// 1 to [`MAX_BATCH_CALLS`] calls the agent would like to run at once.
    #[schemars(length(min = 1, max = MAX_BATCH_CALLS))]
    pub calls: Vec<BatchCall>,
}

/// Answer of `POST /v1/authorize/batch`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
// The schema says no other member is ever written (serde writes exactly these).
#[schemars(deny_unknown_fields)]
pub struct BatchResponse {
    /// True only when every call may run concurrently with the others.
    pub parallel: bool,
    /// Why not (the first call that keeps the batch sequential), or
    /// `batch_parallel`.
    pub reason: String,
    /// Index of that call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_index: Option<usize>,
    /// Each call's own verdict, exactly as `/v1/authorize` answers it.
    pub verdicts: Vec<AuthorizeResponse>,
}

/// Why a call keeps its batch sequential, if it does. A closed allowlist:
/// only an allowed, enforced, read-only, parallel-safe, low-or-write-risk
/// call of a read class qualifies.
pub(crate) fn sequential_reason(
    verdict: &Verdict,
    effect: Option<&toolgate_policy::ToolEffect>,
) -> Option<&'static str> {
    if verdict.reason == Reason::BudgetExhausted
        || verdict.would_reason == Some(Reason::BudgetExhausted)
    {
        return Some("batch_budget");
    }
    if verdict.verdict != Decision::Allow {
        return Some(match verdict.verdict {
            Decision::Escalate => "batch_escalated",
            _ => "batch_denied",
        });
    }
    if !verdict.enforced {
        return Some("batch_not_enforced");
    }
    // A tool the profile allows always has an effect (the profile is
    // refused without one); none would not be known to be read-only.
    let Some(effect) = effect else {
        return Some("batch_not_read_only");
    };
    let read_class = matches!(
        effect.side_effect,
        SideEffect::None | SideEffect::WorkspaceRead | SideEffect::NetworkRead
    );
    if !(effect.read_only && effect.allow_parallel && read_class) || verdict.intent_required {
        return Some("batch_not_read_only");
    }
    None
}

impl Decisions {
    /// Decides each call of a batch as [`Decisions::authorize`] would (each is
    /// recorded and charged) and says whether they may all run at once.
    pub(crate) async fn authorize_batch(
        &self,
        req: BatchRequest,
    ) -> Result<BatchResponse, GateError> {
        if req.calls.is_empty() || req.calls.len() > MAX_BATCH_CALLS {
            return Err(GateError::InvalidRequest(format!(
                "a batch holds 1-{MAX_BATCH_CALLS} calls"
            )));
        }
        let mut verdicts = Vec::with_capacity(req.calls.len());
        let mut first_refusal: Option<(usize, &'static str)> = None;
        let requests: Vec<AuthorizeRequest> = req
            .calls
            .into_iter()
            .map(|c| AuthorizeRequest {
                tool: c.tool,
                action: c.action,
                arguments: c.arguments,
                run_id: req.run_id.clone(),
                step_id: c.step_id,
                tenant: req.tenant.clone(),
                definition_digest: c.definition_digest,
            })
            .collect();
        // Every call is checked before any is decided, so a malformed call
        // rejects the batch without recording half of it.
        for call in &requests {
            self.validate_call(call)?;
        }
        for (i, call) in requests.iter().enumerate() {
            let answer = self.authorize(call).await?;
            let effect = self
                .policy
                .current()
                .and_then(|e| e.policy.effect(&call.tool).cloned());
            if first_refusal.is_none()
                && let Some(reason) = sequential_reason(&answer.verdict, effect.as_ref())
            {
                first_refusal = Some((i, reason));
            }
            verdicts.push(answer);
        }
        let (parallel, reason, call_index) = match first_refusal {
            None => (true, "batch_parallel", None),
            Some((i, reason)) => (false, reason, Some(i)),
        };
        Ok(BatchResponse {
            parallel,
            reason: reason.to_owned(),
            call_index,
            verdicts,
        })
    }
}
