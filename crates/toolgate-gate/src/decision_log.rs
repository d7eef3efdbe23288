//! Decision records for low- and write-risk calls, written in the background
//! in batches. The queue is bounded: when it is full a record is dropped and
//! counted (`toolgate_decision_log_dropped_total`), never silently lost.
//! High-risk decisions do not come through here: they are written before the
//! sidecar answers.
//!
//! Recorded inputs (`spec.audit.recordInputs`) of every decision do: each
//! batch's inputs are written after its decisions, within a byte budget of
//! their own ([`MAX_QUEUED_INPUT_BYTES`]) so that an agent sending large
//! arguments cannot fill memory or crowd out decisions. The writer prunes
//! expired inputs at start and once an hour (as a tenant's role, its own).
//! An input that cannot be queued or written is logged and lost; replay
//! then reports its decision as having no input, and nothing of the
//! decision itself is lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use toolgate_store::{DecisionInput, DecisionRecord, Store};

use crate::metrics::Metrics;

/// Most records written in one transaction.
const MAX_BATCH: usize = 256;
/// Attempts per batch before its records are counted as dropped.
const ATTEMPTS: u32 = 5;
/// How often expired inputs are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Most bytes of recorded inputs waiting to be written.
pub const MAX_QUEUED_INPUT_BYTES: usize = 16 << 20;

/// What the writer is handed. Decisions are nearly every entry, so they
/// stay unboxed: boxing would cost an allocation per call to save queue
/// space only on inputs.
#[allow(clippy::large_enum_variant)]
enum Entry {
    Decision(DecisionRecord),
    Input(DecisionInput),
}

/// Sending half: cheap to clone, never blocks. Every record goes to this
/// sidecar's own stream (see the sidecar's configuration), so the writer never
/// waits for another sidecar's appends.
#[derive(Clone)]
pub struct DecisionLog {
    tx: mpsc::Sender<(String, Entry)>,
    metrics: Metrics,
    /// Bytes of inputs queued and not yet taken by the writer.
    queued_input_bytes: Arc<AtomicUsize>,
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
        let queued_input_bytes = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(write_loop(
            store,
            stream,
            metrics.clone(),
            rx,
            queued_input_bytes.clone(),
        ));
        let log = Self {
            tx,
            metrics,
            queued_input_bytes,
        };
        (log, task)
    }

    /// Queues a record; drops and counts it when the queue is full.
    pub fn enqueue(&self, tenant: &str, record: DecisionRecord) {
        if self
            .tx
            .try_send((tenant.to_owned(), Entry::Decision(record)))
            .is_err()
        {
            self.metrics.decision_log_dropped.inc();
            tracing::error!("decision log queue full: record dropped");
        }
    }

    /// Queues a decided call's recorded input; drops it (logged) when the
    /// queue is full.
    pub fn enqueue_input(&self, tenant: &str, input: DecisionInput) {
        let bytes = input.call.len();
        let queued = self.queued_input_bytes.fetch_add(bytes, Ordering::Relaxed);
        if queued + bytes > MAX_QUEUED_INPUT_BYTES
            || self
                .tx
                .try_send((tenant.to_owned(), Entry::Input(input)))
                .is_err()
        {
            self.queued_input_bytes.fetch_sub(bytes, Ordering::Relaxed);
            tracing::warn!("decision log queue full: recorded input dropped");
        }
    }
}

async fn write_loop(
    store: Store,
    stream: String,
    metrics: Metrics,
    mut rx: mpsc::Receiver<(String, Entry)>,
    queued_input_bytes: Arc<AtomicUsize>,
) {
    let mut buffer = Vec::with_capacity(MAX_BATCH);
    // The first tick is at once: inputs that expired while no sidecar ran
    // are pruned at start.
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            got = rx.recv_many(&mut buffer, MAX_BATCH) => {
                if got == 0 {
                    break;
                }
            }
            _ = prune.tick() => {
                prune_inputs(&store).await;
                continue;
            }
        }
        let mut by_tenant: BTreeMap<String, (Vec<DecisionRecord>, Vec<DecisionInput>)> =
            BTreeMap::new();
        for (tenant, entry) in buffer.drain(..) {
            let (records, inputs) = by_tenant.entry(tenant).or_default();
            match entry {
                Entry::Decision(record) => records.push(record),
                Entry::Input(input) => {
                    queued_input_bytes.fetch_sub(input.call.len(), Ordering::Relaxed);
                    inputs.push(input);
                }
            }
        }
        for (tenant, (records, inputs)) in by_tenant {
            if !records.is_empty() {
                write_batch(&store, &metrics, &tenant, &stream, records).await;
            }
            if !inputs.is_empty() {
                write_inputs(&store, &tenant, &inputs).await;
            }
        }
    }
}

/// Writes one tenant's inputs, once more on a failure that may pass.
async fn write_inputs(store: &Store, tenant: &str, inputs: &[DecisionInput]) {
    for attempt in 1..=2 {
        match store.decision_inputs().put_batch(tenant, inputs).await {
            Ok(()) => return,
            Err(e) if retriable(&e) && attempt < 2 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, count = inputs.len(), "recorded inputs not written");
                return;
            }
        }
    }
}

/// Deletes expired inputs (a tenant's role deletes only its own).
async fn prune_inputs(store: &Store) {
    match store
        .decision_inputs()
        .prune_expired(jiff::Timestamp::now())
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(pruned = n, "expired recorded inputs pruned"),
        Err(e) => tracing::warn!(error = %e, "pruning recorded inputs failed"),
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
