//! Signed checkpoints of the decision log, made by the controller.
//!
//! A hash chain shows edits, but not a cut of its newest rows (a stream's
//! head is its last row). A checkpoint — one stream head signed with the bundle
//! key, outside the database's control — does. The leading controller signs
//! every changed, intact stream head each `--checkpoint-interval` (and
//! `toolgate audit checkpoint` does it on demand, through [`sign_heads`]);
//! each tenant's latest checkpoints are also published in its namespace as
//! ConfigMap [`CHECKPOINT_CONFIGMAP`], where anyone allowed to read the
//! namespace can keep a copy the database cannot take back.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use serde::Serialize;
use toolgate_bundle::{CheckpointPayload, SigningKey, TrustSet};
use toolgate_store::{ChainReport, Checkpoint, Position, Store};

use crate::context::Context;
use crate::error::ControllerError;

/// ConfigMap (in each tenant's namespace) holding its latest checkpoints.
pub const CHECKPOINT_CONFIGMAP: &str = "toolgate-checkpoints";
/// Key of the JSON array of checkpoints in [`CHECKPOINT_CONFIGMAP`].
pub const CHECKPOINT_FIELD: &str = "checkpoints.json";
/// Streams listed per tenant in the ConfigMap, most recently signed first:
/// each restart of a sidecar opens a stream, and a ConfigMap holds at most
/// 1 MiB. Older checkpoints stay in the database.
pub const MAX_PUBLISHED_STREAMS: usize = 500;

/// How much of each chain a signing pass reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Every row of every stream.
    Full,
    /// Each stream from its latest checkpoint signed by the key (the row
    /// there must still carry the signed hash); streams without one in full.
    /// An edit below a checkpoint is left to the next full pass.
    SinceCheckpoint,
}

/// Every how many controller passes one verifies in full (the first pass
/// after start-up always does): with the default 10-minute interval, an
/// edit below the latest checkpoint is found within the hour, while the
/// passes between read only what was appended since the last one.
pub const FULL_VERIFICATION_EVERY: u64 = 6;

/// What one signing pass did.
#[derive(Debug, Default, Serialize)]
pub struct SigningReport {
    /// Heads signed now.
    pub signed: Vec<CheckpointPayload>,
    /// Intact heads already signed at the same position.
    pub unchanged: usize,
    /// Chains that did not verify: never signed, since a checkpoint would
    /// vouch for them.
    pub refused: Vec<ChainReport>,
    /// Decision rows read to verify (rows up to a stream's latest signed
    /// checkpoint are not read again).
    pub rows_read: u64,
    /// Streams skipped because their tenant or stream name is one the store
    /// refuses (written before the database checked names, or by hand):
    /// they cannot be stored as checkpoints, and one of them must never
    /// stop the others from being signed.
    pub invalid: Vec<InvalidStream>,
}

/// A stream a signing pass skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidStream {
    /// Tenant as stored.
    pub tenant: String,
    /// Stream as stored.
    pub stream: String,
    /// What the store's rule says about it.
    pub problem: String,
}

/// Verifies every stream of `tenant` (every tenant when `None`) and signs
/// and stores each intact head not signed yet, stamped `at`.
///
/// With [`Verification::SinceCheckpoint`] a stream is read from its latest
/// checkpoint that `key` signed (the signature is checked, so a row planted
/// in the checkpoints table moves nothing) rather than from its first row:
/// the row there must still hold the signed hash, and the rows since must
/// chain on from it, so a pass reads what was appended since the last one.
pub async fn sign_heads(
    store: &Store,
    key: &SigningKey,
    tenant: Option<&str>,
    at: Timestamp,
    verification: Verification,
) -> Result<SigningReport, toolgate_store::StoreError> {
    let mut report = SigningReport::default();
    let trusted = match verification {
        Verification::Full => BTreeMap::new(),
        Verification::SinceCheckpoint => trusted_positions(store, key, tenant).await?,
    };
    for chain in store.decisions().verify_from(tenant, &trusted).await? {
        report.rows_read += chain.rows;
        let named = toolgate_store::check_field("tenant", &chain.tenant)
            .and_then(|()| toolgate_store::check_stream(&chain.stream));
        if let Err(e) = named {
            report.invalid.push(InvalidStream {
                tenant: chain.tenant,
                stream: chain.stream,
                problem: e.to_string(),
            });
            continue;
        }
        if !chain.ok {
            report.refused.push(chain);
            continue;
        }
        let payload = CheckpointPayload {
            tenant: chain.tenant,
            stream: chain.stream,
            seq: chain.last_seq,
            hash: chain.last_hash,
            at,
        };
        let envelope = payload.sign(key);
        let stored = Checkpoint {
            tenant: payload.tenant.clone(),
            stream: payload.stream.clone(),
            seq: payload.seq,
            hash: payload.hash.clone(),
            at,
            keyid: key.key_id(),
            envelope: String::from_utf8_lossy(&envelope).trim_end().to_owned(),
        };
        if store.checkpoints().record(&stored).await? {
            report.signed.push(payload);
        } else {
            report.unchanged += 1;
        }
    }
    Ok(report)
}

/// The latest position per stream that `key` has signed. Each stream's
/// newest checkpoint stored under the key's id is read (one row per
/// stream, however many checkpoints it has collected) and must verify with
/// the key; the plain columns only find the row, the position is the
/// signed payload. Only for a stream whose newest row does not verify (a
/// forged or damaged row) are its older checkpoints tried, newest first.
async fn trusted_positions(
    store: &Store,
    key: &SigningKey,
    tenant: Option<&str>,
) -> Result<BTreeMap<(String, String), Position>, toolgate_store::StoreError> {
    let trust = match TrustSet::from_keys([key.public_key()]) {
        Ok(t) => t,
        Err(_) => return Ok(BTreeMap::new()),
    };
    let mut trusted = BTreeMap::new();
    for newest in store
        .checkpoints()
        .latest(tenant, Some(&key.key_id()))
        .await?
    {
        let position = match signed_position(&newest, &trust) {
            Some(p) => Some(p),
            None => store
                .checkpoints()
                .list(Some(&newest.tenant), Some(&newest.stream))
                .await?
                .iter()
                .rev()
                .find_map(|older| signed_position(older, &trust)),
        };
        if let Some(position) = position {
            trusted.insert((newest.tenant, newest.stream), position);
        }
    }
    Ok(trusted)
}

/// The position a stored checkpoint's envelope proves for its own stream,
/// if it verifies with `trust` and is signed for the stream it is stored
/// under.
fn signed_position(stored: &Checkpoint, trust: &TrustSet) -> Option<Position> {
    let Ok((payload, _)) = CheckpointPayload::verify(stored.envelope.as_bytes(), trust) else {
        tracing::warn!(
            tenant = %stored.tenant,
            stream = %stored.stream,
            seq = stored.seq,
            "stored checkpoint does not verify with the signing key; not used"
        );
        return None;
    };
    if (payload.tenant.as_str(), payload.stream.as_str())
        != (stored.tenant.as_str(), stored.stream.as_str())
    {
        tracing::warn!(
            tenant = %stored.tenant,
            stream = %stored.stream,
            seq = stored.seq,
            "stored checkpoint is signed for another stream; not used"
        );
        return None;
    }
    Some(Position {
        seq: payload.seq,
        hash: payload.hash,
    })
}

/// One entry of the published list: the position in the clear (to read at
/// a glance) and the envelope that proves it.
#[derive(Debug, Serialize)]
struct Published<'a> {
    stream: &'a str,
    seq: i64,
    hash: &'a str,
    at: Timestamp,
    keyid: &'a str,
    envelope: &'a str,
}

/// The latest checkpoint of each stream, most recently signed first, at
/// most [`MAX_PUBLISHED_STREAMS`].
pub fn latest_per_stream(checkpoints: &[Checkpoint]) -> Vec<&Checkpoint> {
    let mut latest: BTreeMap<&str, &Checkpoint> = BTreeMap::new();
    for c in checkpoints {
        let slot = latest.entry(c.stream.as_str()).or_insert(c);
        if c.seq > slot.seq {
            *slot = c;
        }
    }
    let mut list: Vec<&Checkpoint> = latest.into_values().collect();
    list.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| a.stream.cmp(&b.stream)));
    list.truncate(MAX_PUBLISHED_STREAMS);
    list
}

/// The ConfigMap publishing `tenant`'s latest checkpoints in its namespace.
pub fn tenant_config_map(tenant: &str, checkpoints: &[Checkpoint]) -> ConfigMap {
    let published: Vec<Published<'_>> = latest_per_stream(checkpoints)
        .into_iter()
        .map(|c| Published {
            stream: &c.stream,
            seq: c.seq,
            hash: &c.hash,
            at: c.at,
            keyid: &c.keyid,
            envelope: &c.envelope,
        })
        .collect();
    let json = serde_json::to_string_pretty(&published).unwrap_or_else(|_| "[]".into());
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(CHECKPOINT_CONFIGMAP.into()),
            namespace: Some(tenant.into()),
            labels: Some(crate::keys::labels()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(CHECKPOINT_FIELD.to_owned(), json)])),
        ..Default::default()
    }
}

/// Most tenants one pass publishes a Warning Event about invalid streams
/// for (the metric counts every stream).
pub const MAX_INVALID_STREAM_EVENTS: usize = 20;

/// One pass of the controller: signs changed heads, then republishes the
/// ConfigMap of every tenant that got a new checkpoint. A tenant without a
/// namespace of its name (one provisioned by hand) is skipped. A tenant with
/// streams skipped for their names gets one Warning Event
/// (`InvalidDecisionStream`) on its checkpoint ConfigMap naming them.
pub async fn checkpoint_once(
    ctx: &Context,
    verification: Verification,
) -> Result<SigningReport, ControllerError> {
    let span = crate::trace::pass("toolgate.checkpoint.pass");
    crate::trace::traced(span, checkpoint_pass(ctx, verification)).await
}

async fn checkpoint_pass(
    ctx: &Context,
    verification: Verification,
) -> Result<SigningReport, ControllerError> {
    // The decision table's months ahead (PostgreSQL), so a controller
    // that runs for months keeps them coming; failing that, rows go to the
    // default partition and are pruned row by row, nothing is lost.
    if let Err(e) = ctx.store.decisions().ensure_partitions().await {
        tracing::warn!(error = %e, "cannot create the decision table's months ahead");
    }
    let report = sign_heads(&ctx.store, &ctx.key, None, (ctx.clock)(), verification).await?;
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    ctx.metrics
        .checkpoint_broken_chains
        .set(gauge(report.refused.len()));
    ctx.metrics
        .checkpoint_invalid_streams
        .set(gauge(report.invalid.len()));
    let mut by_tenant: BTreeMap<&str, Vec<&InvalidStream>> = BTreeMap::new();
    for bad in &report.invalid {
        tracing::error!(tenant = ?bad.tenant, stream = ?bad.stream, problem = %bad.problem, "decision stream with an invalid name; not signed");
        by_tenant.entry(bad.tenant.as_str()).or_default().push(bad);
    }
    for (tenant, streams) in by_tenant.into_iter().take(MAX_INVALID_STREAM_EVENTS) {
        report_invalid(ctx, tenant, &streams).await;
    }
    let tenants: std::collections::BTreeSet<&str> =
        report.signed.iter().map(|p| p.tenant.as_str()).collect();
    for tenant in tenants {
        let stored = ctx.store.checkpoints().latest(Some(tenant), None).await?;
        let cm = tenant_config_map(tenant, &stored);
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), tenant);
        let params = PatchParams::apply(crate::MANAGER).force();
        match api
            .patch(CHECKPOINT_CONFIGMAP, &params, &Patch::Apply(&cm))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                tracing::debug!(
                    tenant,
                    "no namespace for tenant; checkpoints stay in the database"
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(report)
}

/// Tells `tenant`'s namespace (when the tenant is a namespace name) which of
/// its streams a pass skipped, in one Warning Event.
async fn report_invalid(ctx: &Context, tenant: &str, streams: &[&InvalidStream]) {
    if toolgate_store::tenancy::validate_tenant(tenant).is_err() {
        return;
    }
    let shown: Vec<String> = streams
        .iter()
        .take(5)
        .map(|s| {
            let name: String = s.stream.chars().take(64).collect();
            format!("{name:?} ({})", s.problem)
        })
        .collect();
    let mut note = format!(
        "{} decision stream(s) not checkpointed, their names are ones the store refuses: {}; \
         every other stream is",
        streams.len(),
        shown.join(", ")
    );
    // An Event's note holds at most 1 KiB.
    if note.len() > 1000 {
        let cut = (0..=1000)
            .rev()
            .find(|&i| note.is_char_boundary(i))
            .unwrap_or(0);
        note.truncate(cut);
        note.push('…');
    }
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(CHECKPOINT_CONFIGMAP.into()),
        namespace: Some(tenant.to_owned()),
        ..Default::default()
    };
    ctx.event(
        &regarding,
        kube::runtime::events::EventType::Warning,
        "InvalidDecisionStream",
        "Checkpoint",
        note,
    )
    .await;
}

/// Runs [`checkpoint_once`] every `interval` until `stop` turns true.
pub async fn run_checkpoints(
    ctx: std::sync::Arc<Context>,
    interval: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut passes = 0u64;
    crate::run::every(interval, stop, || {
        let n = passes;
        passes += 1;
        let verification = if n.is_multiple_of(FULL_VERIFICATION_EVERY) {
            Verification::Full
        } else {
            Verification::SinceCheckpoint
        };
        record_pass(&ctx, verification)
    })
    .await;
}

/// One pass, with its outcome logged and exported as metrics.
async fn record_pass(ctx: &Context, verification: Verification) {
    match checkpoint_once(ctx, verification).await {
        Ok(r) => {
            for chain in &r.refused {
                tracing::error!(tenant = %chain.tenant, stream = %chain.stream, seq = ?chain.first_broken_seq, problem = ?chain.problem, "decision chain broken; not signed");
            }
            if !r.signed.is_empty() {
                tracing::info!(
                    signed = r.signed.len(),
                    unchanged = r.unchanged,
                    rows_read = r.rows_read,
                    ?verification,
                    "decision log checkpointed"
                );
            }
            ctx.metrics
                .checkpoint_last_success
                .set((ctx.clock)().as_millisecond() as f64 / 1000.0);
        }
        Err(e) => tracing::warn!(code = e.code(), error = %e, "checkpointing failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(stream: &str, seq: i64, at: i64) -> Checkpoint {
        Checkpoint {
            tenant: "team-a".into(),
            stream: stream.into(),
            seq,
            hash: format!("h{seq}"),
            at: Timestamp::from_second(at).unwrap(),
            keyid: "k".into(),
            envelope: format!("{{\"seq\":{seq}}}"),
        }
    }

    #[test]
    fn publishes_the_highest_seq_of_each_stream_newest_first() {
        let all = [
            cp("p/1", 3, 100),
            cp("p/1", 9, 200),
            cp("p/2", 4, 300),
            cp("p/1", 5, 150),
        ];
        let latest: Vec<(&str, i64)> = latest_per_stream(&all)
            .into_iter()
            .map(|c| (c.stream.as_str(), c.seq))
            .collect();
        assert_eq!(latest, [("p/2", 4), ("p/1", 9)]);

        let cm = tenant_config_map("team-a", &all);
        assert_eq!(cm.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(cm.metadata.name.as_deref(), Some(CHECKPOINT_CONFIGMAP));
        let data: serde_json::Value =
            serde_json::from_str(&cm.data.unwrap()[CHECKPOINT_FIELD]).unwrap();
        assert_eq!(data[0]["stream"], "p/2");
        assert_eq!(data[1]["seq"], 9);
        assert_eq!(data[1]["envelope"], "{\"seq\":9}");
    }

    #[test]
    fn the_published_list_is_bounded() {
        let all: Vec<Checkpoint> = (0..(MAX_PUBLISHED_STREAMS as i64 + 20))
            .map(|i| cp(&format!("p/{i}"), 1, 1_000 + i))
            .collect();
        let latest = latest_per_stream(&all);
        assert_eq!(latest.len(), MAX_PUBLISHED_STREAMS);
        // The newest streams are the ones kept.
        assert_eq!(
            latest[0].stream,
            format!("p/{}", MAX_PUBLISHED_STREAMS + 19)
        );
    }
}
