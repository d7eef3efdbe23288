//! Decision records for low- and write-risk calls, written in the background
//! in batches. The queue is bounded: when it is full a record is dropped and
//! counted (`toolgate_decision_log_dropped_total`), never silently lost.
//! High-risk decisions do not come through here: they are written before the
//! sidecar answers.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;
use toolgate_store::{DecisionRecord, Store};

use crate::metrics::Metrics;

/// Most records written in one transaction.
const MAX_BATCH: usize = 256;
/// Attempts per batch before its records are counted as dropped.
const ATTEMPTS: u32 = 5;

/// Sending half: cheap to clone, never blocks. Every record goes to this
/// sidecar's own stream (see the sidecar's configuration), so the writer never
/// waits for another sidecar's appends.
#[derive(Clone)]
pub struct DecisionLog {
    tx: mpsc::Sender<(String, DecisionRecord)>,
    metrics: Metrics,
}

impl DecisionLog {
    /// Starts the writer task. The task ends, after writing everything
    /// queued, once every `DecisionLog` clone is dropped.
    pub fn start(
        store: Store,
        stream: String,
        metrics: Metrics,
        capacity: usize,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let task = tokio::spawn(write_loop(store, stream, metrics.clone(), rx));
        (Self { tx, metrics }, task)
    }

    /// Queues a record; drops and counts it when the queue is full.
    pub fn enqueue(&self, tenant: &str, record: DecisionRecord) {
        if self.tx.try_send((tenant.to_owned(), record)).is_err() {
            self.metrics.decision_log_dropped.inc();
            tracing::error!("decision log queue full: record dropped");
        }
    }
}

async fn write_loop(
    store: Store,
    stream: String,
    metrics: Metrics,
    mut rx: mpsc::Receiver<(String, DecisionRecord)>,
) {
    let mut buffer = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut buffer, MAX_BATCH).await > 0 {
        let mut by_tenant: BTreeMap<String, Vec<DecisionRecord>> = BTreeMap::new();
        for (tenant, record) in buffer.drain(..) {
            by_tenant.entry(tenant).or_default().push(record);
        }
        for (tenant, records) in by_tenant {
            write_batch(&store, &metrics, &tenant, &stream, records).await;
        }
    }
}

/// Writes one tenant's batch. A batch the store refuses as a whole (one
/// invalid record, or a database that stays down through every retry) is
/// written record by record, so only the offending records are lost, and
/// each of them is counted.
async fn write_batch(
    store: &Store,
    metrics: &Metrics,
    tenant: &str,
    stream: &str,
    records: Vec<DecisionRecord>,
) {
    let count = records.len() as u64;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match store
            .decisions()
            .append_batch(tenant, stream, records.clone())
            .await
        {
            Ok(_) => {
                metrics.decision_log_written.inc_by(count);
                return;
            }
            // Retrying cannot fix a refused record.
            Err(e) if retriable(&e) && attempt < ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "decision batch failed; retrying");
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, count, "decision batch failed; writing one by one");
                break;
            }
        }
    }
    for record in records {
        match store.decisions().append(tenant, stream, record).await {
            Ok(_) => metrics.decision_log_written.inc(),
            Err(e) => {
                metrics.decision_log_dropped.inc();
                tracing::error!(error = %e, "decision record dropped");
            }
        }
    }
}

fn retriable(e: &toolgate_store::StoreError) -> bool {
    !matches!(e, toolgate_store::StoreError::InvalidInput(_))
}
