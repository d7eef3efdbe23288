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
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
// The schema says no other member is ever written (serde writes exactly these).
#[schemars(deny_unknown_fields)]
pub struct FlowLabel {
    /// The label's name, as the profile declares it.
    pub label: String,
    /// The decision whose allowed call set it.
    pub decision_id: String,
    /// When that call was decided.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub set_at: Timestamp,
}

/// The labels a call sets when it passes, written in the transaction that
/// charges its run ([`crate::Runs::admit_and_record`],
/// [`crate::Runs::admit_labelled`]): only a call its run admitted (not
/// cancelled, within budget) ever labels the run.
#[derive(Debug, Clone, Copy)]
pub struct LabelsOnPass<'a> {
    /// Where the profile reads the labels: the run, or the pod.
    pub scope: FlowScope,
    /// The run id, or the pod name.
    pub subject: &'a str,
    /// The other scope's copy, kept so a profile that changes its scope
    /// forgets nothing.
    pub other: (FlowScope, &'a str),
    /// The labels' names.
    pub names: &'a [&'a str],
    /// The decision that sets them.
    pub decision_id: &'a str,
}

impl LabelsOnPass<'_> {
    pub(crate) fn check(&self) -> Result<()> {
        check_labels(self.subject, self.names, self.decision_id)?;
        require("subject", self.other.1)
    }
}

fn check_labels(subject: &str, labels: &[&str], decision_id: &str) -> Result<()> {
    require("subject", subject)?;
    require("decision_id", decision_id)?;
    if labels.len() > MAX_LABELS_PER_CALL {
        return Err(StoreError::InvalidInput(format!(
            "at most {MAX_LABELS_PER_CALL} flow labels at once"
        )));
    }
    Ok(())
}

/// `INSERT … RETURNING label` of `n` labels; a label already set keeps its
/// first setter.
pub(crate) fn insert_sql(n: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO flow_labels (tenant, scope, subject, label, decision_id, set_at) VALUES ",
    );
    for i in 0..n {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("($1, $2, $3, ${}, $4, $5)", i + 6));
    }
    sql.push_str(" ON CONFLICT (tenant, scope, subject, label) DO NOTHING RETURNING label");
    sql
}

/// Runs [`insert_sql`] on `$exec` (a pool, or `&mut *tx`); the labels added.
macro_rules! insert_labels {
    ($exec:expr, $sql:expr, $tenant:expr, $scope:expr, $subject:expr, $labels:expr, $decision:expr, $at_ms:expr) => {{
        let mut q = sqlx::query_scalar::<_, String>($sql)
            .bind($tenant)
            .bind($scope.as_str())
            .bind($subject)
            .bind($decision)
            .bind($at_ms);
        for label in $labels {
            q = q.bind(*label);
        }
        q.fetch_all($exec).await?
    }};
}
pub(crate) use insert_labels;

/// Writes `$labels` (a [`LabelsOnPass`]) in transaction `$tx`: the primary
/// subject, then the other scope's copy; the labels the primary gained,
/// sorted.
macro_rules! write_labels_in {
    ($tx:expr, $tenant:expr, $labels:expr, $at_ms:expr) => {{
        let labels: &$crate::flows::LabelsOnPass<'_> = $labels;
        if labels.names.is_empty() {
            Vec::new()
        } else {
            let sql = $crate::flows::insert_sql(labels.names.len());
            let mut added: Vec<String> = $crate::flows::insert_labels!(
                &mut *$tx,
                &sql,
                $tenant,
                labels.scope,
                labels.subject,
                labels.names,
                labels.decision_id,
                $at_ms
            );
            let _: Vec<String> = $crate::flows::insert_labels!(
                &mut *$tx,
                &sql,
                $tenant,
                labels.other.0,
                labels.other.1,
                labels.names,
                labels.decision_id,
                $at_ms
            );
            added.sort();
            added
        }
    }};
}
pub(crate) use write_labels_in;

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
        check_labels(subject, labels, decision_id)?;
        if labels.is_empty() {
            return Ok(Vec::new());
        }
        let sql = insert_sql(labels.len());
        let at = at.as_millisecond();
        let mut added: Vec<String> = on_pool!(self.store, pool => {
            insert_labels!(pool, &sql, tenant, scope, subject, labels, decision_id, at)
        });
        added.sort();
        Ok(added)
    }
}
