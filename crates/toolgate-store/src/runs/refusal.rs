//! Why a run refuses a charge, read from its row: the answer of a charge
//! that changed nothing, and the read-only check an escalation makes.

use super::{Admission, Budget, RunLimits, RunRow, count, limit};

/// Why a charge that changed no row was refused, read from the run's row.
pub(super) fn refusal(
    row: Option<RunRow>,
    limits: &RunLimits,
    high_risk: bool,
    now_ms: i64,
) -> Admission {
    let Some(row) = row else {
        // Inserted in this very transaction, so this cannot happen; refuse.
        return Admission::Cancelled {
            reason: Some("run row not visible".into()),
            scoped: false,
        };
    };
    refused(row, limits, high_risk, now_ms).unwrap_or_else(|| Admission::Cancelled {
        reason: Some("run state changed while charging".into()),
        scoped: false,
    })
}

/// The refusal a charge of one call would meet on the run's row as it is:
/// cancelled, or a budget used up; `None` when it would be counted.
pub(super) fn refused(
    row: RunRow,
    limits: &RunLimits,
    high_risk: bool,
    now_ms: i64,
) -> Option<Admission> {
    let (started_at, calls, high, cancelled, reason) = row;
    if cancelled.is_some() {
        return Some(Admission::Cancelled {
            reason,
            scoped: false,
        });
    }
    if let Some(max) = limits.max_calls
        && count(calls) >= max
    {
        return Some(Admission::Exhausted {
            budget: Budget::Calls,
            limit: max,
        });
    }
    if high_risk
        && let Some(max) = limits.max_high_risk_calls
        && count(high) >= max
    {
        return Some(Admission::Exhausted {
            budget: Budget::HighRiskCalls,
            limit: max,
        });
    }
    match limits.max_run_seconds {
        Some(max) if started_at.saturating_add(limit(Some(max)).unwrap_or(0) * 1000) <= now_ms => {
            Some(Admission::Exhausted {
                budget: Budget::RunSeconds,
                limit: max,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_budget_that_ran_out() {
        let limits = RunLimits {
            max_calls: Some(3),
            max_high_risk_calls: Some(1),
            max_run_seconds: Some(10),
            ..RunLimits::default()
        };
        assert_eq!(
            refusal(Some((0, 3, 0, None, None)), &limits, false, 1),
            Admission::Exhausted {
                budget: Budget::Calls,
                limit: 3
            }
        );
        assert_eq!(
            refusal(Some((0, 1, 1, None, None)), &limits, true, 1),
            Admission::Exhausted {
                budget: Budget::HighRiskCalls,
                limit: 1
            }
        );
        assert_eq!(
            refusal(Some((0, 1, 1, None, None)), &limits, false, 10_000),
            Admission::Exhausted {
                budget: Budget::RunSeconds,
                limit: 10
            }
        );
        assert_eq!(refused((0, 2, 0, None, None), &limits, true, 1), None);
        // Cancellation wins over every budget.
        assert_eq!(
            refusal(
                Some((0, 3, 1, Some(5), Some("stop".into()))),
                &limits,
                true,
                1
            ),
            Admission::Cancelled {
                reason: Some("stop".into()),
                scoped: false
            }
        );
    }
}
