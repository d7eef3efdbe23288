//! Per-pod budgets (`spec.budgets.perPod`): every call of one pod counted
//! together, whatever run ids its agent uses. Charged in the transaction
//! that charges the run (see `charge_in!`): both or neither.

use super::{Admission, Budget, PodLimits, Runs, count};
use crate::{Result, StoreError, on_pool, require};

pub(super) const ENSURE: &str = "INSERT INTO pod_budgets (tenant, pod, started_at) \
    VALUES ($1, $2, $3) ON CONFLICT (tenant, pod) DO NOTHING";

/// Counts one call unless a pod budget would be passed. `$3` is 1 for a
/// high-risk call; `$4`, `$5` the limits (NULL = none).
pub(super) const CHARGE: &str = "UPDATE pod_budgets SET calls = calls + 1, \
    high_risk_calls = high_risk_calls + $3 WHERE tenant = $1 AND pod = $2 \
    AND ($4 IS NULL OR calls < $4) AND ($5 IS NULL OR $3 = 0 OR high_risk_calls < $5) \
    RETURNING calls, high_risk_calls";

pub(super) const READ: &str =
    "SELECT calls, high_risk_calls FROM pod_budgets WHERE tenant = $1 AND pod = $2";

/// The refusal a charge of one call would meet on the pod's counters as
/// they are; `None` when it would be counted.
pub(super) fn refused(row: (i64, i64), limits: &PodLimits, high_risk: bool) -> Option<Admission> {
    let (calls, high) = row;
    if let Some(max) = limits.max_calls
        && count(calls) >= max
    {
        return Some(Admission::Exhausted {
            budget: Budget::PodCalls,
            limit: max,
        });
    }
    match limits.max_high_risk_calls {
        Some(max) if high_risk && count(high) >= max => Some(Admission::Exhausted {
            budget: Budget::PodHighRiskCalls,
            limit: max,
        }),
        _ => None,
    }
}

/// Why a pod charge that changed no row was refused. The row is locked by
/// the transaction, so a charge that changed nothing has a budget to name;
/// anything else is a fault, never a made-up cancellation.
pub(super) fn refusal(
    row: Option<(i64, i64)>,
    limits: &PodLimits,
    high_risk: bool,
) -> Result<Admission> {
    row.and_then(|row| refused(row, limits, high_risk))
        .ok_or_else(|| StoreError::Corrupt("pod budget refused a charge without cause".into()))
}

impl Runs<'_> {
    /// Calls and high-risk calls `pod` of `tenant` has been charged, over
    /// all its runs (zero for a pod never charged).
    pub async fn pod_usage(&self, tenant: &str, pod: &str) -> Result<(u64, u64)> {
        require("tenant", tenant)?;
        require("pod", pod)?;
        let row: Option<(i64, i64)> = on_pool!(self.store, pool => {
            sqlx::query_as(READ).bind(tenant).bind(pod).fetch_optional(pool).await?
        });
        Ok(row.map_or((0, 0), |(c, h)| (count(c), count(h))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_refusals_name_the_pod_budget() {
        let limits = PodLimits {
            max_calls: Some(5),
            max_high_risk_calls: Some(0),
        };
        assert_eq!(
            refused((5, 0), &limits, false),
            Some(Admission::Exhausted {
                budget: Budget::PodCalls,
                limit: 5
            })
        );
        assert_eq!(
            refused((1, 0), &limits, true),
            Some(Admission::Exhausted {
                budget: Budget::PodHighRiskCalls,
                limit: 0
            })
        );
        assert_eq!(refused((1, 0), &limits, false), None);
    }
}
