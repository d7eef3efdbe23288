//! The one wait-then-ask-again routine: ask; on an escalation wait for the
//! human; once the approval is decided ask the same call again, which the
//! sidecar answers `approved` (consuming the approval, for exactly this
//! call) or `approval_denied`. Written once, generic over how one asks, so
//! the HTTP client and the MCP gateway's in-process decider share it.

use std::future::Future;
use std::time::Duration;

use toolgate_contract::ApprovalStatus;
use toolgate_policy::Decision;

use crate::AuthorizeResponse;

/// How a call ended after at most one wait.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The call may run (`reason` is `approved` when a human let it).
    Allowed(AuthorizeResponse),
    /// The call must not run; the verdict's `reason` says why
    /// (`approval_denied` when the human said no).
    Denied(AuthorizeResponse),
    /// A human must still approve `answer.approval_id`. `waited` is the
    /// status of the approval waited on: `None` when nothing was waited
    /// for, `Pending` when the wait ran out, `Expired` or `Cancelled` when
    /// it ended unused and asking again escalated anew.
    Escalated {
        /// The last answer.
        answer: AuthorizeResponse,
        /// The waited-on approval's last status.
        waited: Option<ApprovalStatus>,
    },
}

impl Outcome {
    /// The answer the outcome was read from.
    pub fn answer(&self) -> &AuthorizeResponse {
        match self {
            Self::Allowed(a) | Self::Denied(a) | Self::Escalated { answer: a, .. } => a,
        }
    }

    fn of(answer: AuthorizeResponse, waited: Option<ApprovalStatus>) -> Self {
        match answer.verdict.verdict {
            Decision::Allow => Self::Allowed(answer),
            Decision::Deny => Self::Denied(answer),
            Decision::Escalate => Self::Escalated { answer, waited },
        }
    }
}

/// Asks with `ask`; when it escalates with an approval and `total_wait` is
/// not zero, waits with `wait(approval, total_wait)` and, unless the
/// approval is still pending, asks once more. A failure of either step is
/// returned as it is: the caller fails closed.
pub async fn wait_then_ask_again<E, Ask, AskFut, Wait, WaitFut>(
    ask: Ask,
    wait: Wait,
    total_wait: Duration,
) -> Result<Outcome, E>
where
    Ask: Fn() -> AskFut,
    AskFut: Future<Output = Result<AuthorizeResponse, E>>,
    Wait: FnOnce(String, Duration) -> WaitFut,
    WaitFut: Future<Output = Result<ApprovalStatus, E>>,
{
    let answer = ask().await?;
    let approval = match (&answer.verdict.verdict, &answer.approval_id) {
        (Decision::Escalate, Some(id)) if !id.is_empty() && !total_wait.is_zero() => id.clone(),
        _ => return Ok(Outcome::of(answer, None)),
    };
    let status = wait(approval, total_wait).await?;
    if status.is_pending() {
        return Ok(Outcome::of(answer, Some(status)));
    }
    Ok(Outcome::of(ask().await?, Some(status)))
}
