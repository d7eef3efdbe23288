//! The cheap part of `toolgate analyze` on every new generation of a
//! profile, written to `status.warnings` in the words the admission
//! webhook uses: the webhook's warnings reach only whoever applied the
//! profile, the status reaches everyone who reads it later. A shadowed
//! escalate (which admission refuses) is a warning here, since a profile
//! stored without the webhook keeps being served.

use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use toolgate_policy::CompiledPolicy;
use toolgate_policy::analyze::{admission_check, admission_warnings};

use super::rejection_message;

/// How long one analysis may run.
pub const ANALYSIS_DEADLINE: Duration = Duration::from_secs(2);

/// One analysis at a time: it is CPU work beside every other reconcile.
static SLOTS: Semaphore = Semaphore::const_new(1);

/// The warnings of `policy`, as the webhook words them.
pub async fn warnings(policy: CompiledPolicy) -> Vec<String> {
    let Ok(_slot) = SLOTS.acquire().await else {
        return vec![skipped("the analysis is shut down")];
    };
    let deadline = Instant::now() + ANALYSIS_DEADLINE;
    match tokio::task::spawn_blocking(move || admission_check(&policy, deadline)).await {
        Ok(Ok(findings)) => admission_warnings(&findings),
        Ok(Err(refused_at_admission)) => vec![rejection_message(&refused_at_admission)],
        Err(e) => {
            tracing::error!(error = %e, "the profile analysis failed");
            vec![skipped("the analysis failed")]
        }
    }
}

fn skipped(why: &str) -> String {
    format!("not analysed: {why}; run `toolgate analyze` [analysis_skipped]")
}
