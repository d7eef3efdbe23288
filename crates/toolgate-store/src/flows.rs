//! Flow labels: what a run (or a pod) has touched, shared by every sidecar
//! serving it. Labels are only ever added (a row is never changed or
//! removed by a tenant), each naming the decision that set it.

use jiff::Timestamp;
use toolgate_policy::FlowScope;

use crate::fields::{require, ts_from_ms};
use crate::{Result, Store, StoreError, on_pool};

/// Most labels one call may set (a profile declares at most this many).
const MAX_LABELS_PER_CALL: usize = toolgate_policy::MAX_FLOW_LABELS;

/// One label a run or pod carries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlowLabel {
    /// The label's name, as the profile declares it.
    pub label: String,
    /// The decision whose allowed call set it.
    pub decision_id: String,
    /// When that call was decided.
    pub set_at: Timestamp,
}

/// Flow labels of a tenant's runs and pods.
pub struct FlowLabels<'a> {
    pub(crate) store: &'a Store,
}

const READ: &str = "SELECT label, decision_id, set_at FROM flow_labels \
    WHERE tenant = $1 AND scope = $2 AND subject = $3 ORDER BY set_at, label";

impl FlowLabels<'_> {
    /// The labels `subject` (a run id, or a pod name for
    /// [`FlowScope::Pod`]) of `tenant` carries, oldest first.
    pub async fn of(
        &self,
        tenant: &str,
        scope: FlowScope,
        subject: &str,
    ) -> Result<Vec<FlowLabel>> {
        require("tenant", tenant)?;
        require("subject", subject)?;
        let rows: Vec<(String, String, i64)> = on_pool!(self.store, pool => {
            sqlx::query_as(READ)
                .bind(tenant)
                .bind(scope.as_str())
                .bind(subject)
                .fetch_all(pool)
                .await?
        });
        rows.into_iter()
            .map(|(label, decision_id, at)| {
                Ok(FlowLabel {
                    label,
                    decision_id,
                    set_at: ts_from_ms(at)?,
                })
            })
            .collect()
    }

    /// Sets `labels` on `subject`, naming `decision_id` as what set them;
    /// a label it already carries keeps its first setter. Returns the
    /// labels this call added. Durable when it returns: a call is answered
    /// only after.
    pub async fn add(
        &self,
        tenant: &str,
        scope: FlowScope,
        subject: &str,
        labels: &[&str],
        decision_id: &str,
        at: Timestamp,
    ) -> Result<Vec<String>> {
        require("tenant", tenant)?;
        require("subject", subject)?;
        require("decision_id", decision_id)?;
        if labels.is_empty() {
            return Ok(Vec::new());
        }
        if labels.len() > MAX_LABELS_PER_CALL {
            return Err(StoreError::InvalidInput(format!(
                "at most {MAX_LABELS_PER_CALL} flow labels at once"
            )));
        }
        let mut sql = String::from(
            "INSERT INTO flow_labels (tenant, scope, subject, label, decision_id, set_at) VALUES ",
        );
        for i in 0..labels.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("($1, $2, $3, ${}, $4, $5)", i + 6));
        }
        sql.push_str(" ON CONFLICT (tenant, scope, subject, label) DO NOTHING RETURNING label");
        let mut added: Vec<String> = on_pool!(self.store, pool => {
            let mut q = sqlx::query_scalar(&sql)
                .bind(tenant)
                .bind(scope.as_str())
                .bind(subject)
                .bind(decision_id)
                .bind(at.as_millisecond());
            for label in labels {
                q = q.bind(*label);
            }
            q.fetch_all(pool).await?
        });
        added.sort();
        Ok(added)
    }
}
