//! The PolicyProfile hook: the profile must load and compile
//! ([`validate::policy_profile`]), then the cheap part of `toolgate
//! analyze` runs ([`toolgate_policy::analyze::admission_check`]): a
//! `shadowed_escalate` refuses the profile, the other findings come back
//! as admission warnings (capped in number and length, escaped).
//!
//! The analysis is CPU work, so it runs on the blocking pool, never on the
//! async runtime that also answers pod injection; one analysis at a time
//! (the other core stays free for injection), and a deadline well under
//! the webhook's 5 s timeout. Whatever is not judged by then is admitted
//! with an `analysis_skipped` warning: the check is advisory, every other
//! rule has already been applied (see the module docs of
//! `toolgate_policy::analyze::admission` for why failing open is right
//! here and nowhere else).
//!
//! Only admission refuses a shadowed escalate: the controller and the
//! sidecar load stored profiles without this check, so a profile stored
//! before it existed keeps working.

use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use toolgate_policy::analyze::{Finding, Severity, admission_check, admission_warnings};

use crate::review::{AdmissionRequest, AdmissionResponse};
use crate::{WebhookError, validate};

/// How long the analysis may run: under half the 5 s webhook timeout, so
/// the answer (a refusal included) reaches the API server in time.
pub const ANALYSIS_DEADLINE: Duration = Duration::from_secs(2);

/// One analysis at a time.
static SLOTS: Semaphore = Semaphore::const_new(1);

/// The admission response to a PolicyProfile review.
pub async fn review(request: &AdmissionRequest) -> AdmissionResponse {
    review_within(request, ANALYSIS_DEADLINE).await
}

/// [`review`] with an explicit deadline for the analysis.
pub async fn review_within(request: &AdmissionRequest, deadline: Duration) -> AdmissionResponse {
    let policy = match validate::policy_profile(request) {
        Ok(Some(policy)) => policy,
        Ok(None) => return AdmissionResponse::allow(&request.uid),
        Err(e) => return AdmissionResponse::deny(&request.uid, &e),
    };
    match analyse(policy, Instant::now() + deadline).await {
        Ok(findings) => {
            AdmissionResponse::allow(&request.uid).with_warnings(admission_warnings(&findings))
        }
        Err(e) => AdmissionResponse::deny(&request.uid, &WebhookError::Policy(e)),
    }
}

async fn analyse(
    policy: toolgate_policy::CompiledPolicy,
    deadline: Instant,
) -> Result<Vec<Finding>, toolgate_policy::PolicyError> {
    let Ok(Ok(permit)) = tokio::time::timeout_at(deadline.into(), SLOTS.acquire()).await else {
        return Ok(vec![skipped(
            "another profile was being analysed until the deadline",
        )]);
    };
    let task = tokio::task::spawn_blocking(move || {
        // Held until the work really ends, even if the answer went out.
        let _permit = permit;
        admission_check(&policy, deadline)
    });
    // The check stops itself at the deadline; the grace covers a step.
    let grace = Duration::from_millis(250);
    match tokio::time::timeout_at((deadline + grace).into(), task).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the profile analysis failed");
            Ok(vec![skipped("the analysis failed")])
        }
        Err(_) => Ok(vec![skipped("the analysis ran out of time")]),
    }
}

fn skipped(why: &str) -> Finding {
    Finding {
        code: "analysis_skipped",
        severity: Severity::Warning,
        tool: None,
        field: "spec.rules".into(),
        glob: None,
        witness: None,
        message: format!(
            "the shadowed-escalate check was skipped ({why}); the profile is admitted \
             unchecked on this point, run `toolgate analyze` for the full check"
        ),
    }
}
