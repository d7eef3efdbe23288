//! Finishing what an earlier archive run into the same directory left:
//! segments written, checkpointed and listed, but not yet pruned.

use std::collections::HashMap;
use std::path::Path;

use jiff::Timestamp;
use toolgate_store::{Checkpoint, Store};

use super::{Archived, Segment, file_error, file_sha256, read_manifests};
use crate::error::ControllerError;

/// Prunes the rows of segments an earlier run in `out` wrote, signed,
/// stored and listed in its manifest but did not prune (it was stopped, or
/// the database refused): only a segment that starts right after the
/// stream's live archive position and whose file still has its SHA-256.
pub(super) async fn resume(
    store: &Store,
    out: &Path,
    tenant: Option<&str>,
) -> Result<Vec<Archived>, ControllerError> {
    if !out.is_dir() {
        return Ok(Vec::new());
    }
    let mut pending: Vec<Segment> = read_manifests(out)?
        .into_iter()
        .filter_map(|m| m.manifest.ok())
        .flat_map(|m| m.segments)
        .filter(|s| tenant.is_none_or(|t| t == s.tenant))
        .collect();
    pending.sort_by(|a, b| {
        (&a.tenant, &a.stream, a.first_seq).cmp(&(&b.tenant, &b.stream, b.first_seq))
    });
    // Each stream's archive position, read once per run.
    let mut floors: HashMap<(String, String), i64> = HashMap::new();
    let mut done = Vec::new();
    for segment in pending {
        let at = (segment.tenant.clone(), segment.stream.clone());
        let floor = match floors.get(&at) {
            Some(&floor) => floor,
            None => {
                let floor = store
                    .decisions()
                    .archived_through(&segment.tenant, &segment.stream)
                    .await?
                    .map_or(0, |p| p.seq);
                floors.insert(at.clone(), floor);
                floor
            }
        };
        if segment.last_seq <= floor {
            continue;
        }
        let refuse = |why: String| {
            ControllerError::Archive(format!(
                "segment {} of an earlier run is not pruned and cannot be: {why}; \
                 nothing was pruned",
                segment.file
            ))
        };
        if segment.first_seq != floor + 1 {
            return Err(refuse(format!(
                "the stream's live rows start after seq {floor}"
            )));
        }
        let path = out.join(&segment.file);
        let digest = file_sha256(&path).map_err(file_error(&path))?;
        if digest != segment.sha256 {
            return Err(refuse("its file does not match its SHA-256".into()));
        }
        let checkpoint = Checkpoint {
            tenant: segment.tenant.clone(),
            stream: segment.stream.clone(),
            seq: segment.last_seq,
            hash: segment.last_hash.clone(),
            at: Timestamp::now(),
            keyid: String::new(),
            envelope: segment.checkpoint.clone(),
        };
        let pruned = store.decisions().prune_through(&checkpoint).await?;
        floors.insert(at, segment.last_seq);
        done.push(Archived {
            tenant: segment.tenant,
            stream: segment.stream,
            first_seq: segment.first_seq,
            last_seq: segment.last_seq,
            rows: segment.rows,
            file: segment.file,
            sha256: segment.sha256,
            pruned: Some(pruned),
            resumed: true,
            problem: None,
        });
    }
    Ok(done)
}
