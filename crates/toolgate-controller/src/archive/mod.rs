//! Moving a decision log's oldest rows out of the database into signed,
//! hashed files: what `toolgate audit archive` runs once and the leading
//! controller runs every `--archive-interval` ([`schedule`]).
//!
//! An archive directory holds, per stream, gzip-compressed JSON lines
//! segments `<tenant>/<stream>/<first>-<last>.jsonl.gz` (names escaped: every
//! byte but ASCII letters, digits, `-` and `_` as `%XX`), one row per line
//! with every column the hash covers, and one manifest per run
//! `manifest-<unix ms>.json` naming each segment it wrote: its seq range,
//! the hash it chains on from and its last row's hash, its SHA-256, and a
//! signed checkpoint (DSSE, as `toolgate audit checkpoint` signs) of its
//! last row. Every run writes into the same directory: offline verification
//! (`toolgate audit verify --archive`) requires each stream's segments to
//! start at seq 1 and follow on, and a run first finishes what an earlier
//! run in that directory left unpruned. Runs never overwrite each other's
//! files: a segment is named by its seq range (a range is archived once) and
//! a manifest by its run's time.
//!
//! The order makes deletion safe: every segment is written and fsynced,
//! the checkpoints stored, the manifest written and fsynced, and only then
//! are the rows deleted, per stream in one transaction and only through the
//! checkpointed seq ([`toolgate_store::Decisions::prune_through`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolgate_bundle::{CheckpointPayload, SigningKey};
use toolgate_store::{ArchiveRange, Checkpoint, PartitionPrune, Store, StreamLink};

use crate::error::ControllerError;

mod resume;
pub mod schedule;

use resume::resume;

/// `format` of a manifest.
pub const MANIFEST_FORMAT: &str = "toolgate.decision-archive/v1";
/// Rows read per round trip.
const PAGE: u32 = 10_000;

/// One run's manifest.
#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: String,
    /// When the run signed its checkpoints.
    pub created_at: Timestamp,
    /// Rows created before this were archived.
    pub before: Timestamp,
    /// Key id of the checkpoints' signer.
    pub keyid: String,
    /// The segments the run wrote.
    pub segments: Vec<Segment>,
}

/// One segment file of one stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Segment {
    /// Tenant.
    pub tenant: String,
    /// Stream.
    pub stream: String,
    /// Path relative to the archive directory, `/`-separated.
    pub file: String,
    /// First row in the file.
    pub first_seq: i64,
    /// Last row in the file.
    pub last_seq: i64,
    /// Rows in the file.
    pub rows: u64,
    /// The hash `first_seq` chains on from (the stream's genesis at seq 1).
    pub prev_hash: String,
    /// The hash of `last_seq`.
    pub last_hash: String,
    /// At seq 1: the previous stream's head the genesis hash covers.
    #[serde(default)]
    pub previous: Option<StreamLink>,
    /// Hex SHA-256 of the segment file.
    pub sha256: String,
    /// DSSE envelope of the checkpoint of `last_seq`.
    pub checkpoint: String,
}

/// A manifest file of an archive directory, as read.
#[derive(Debug)]
pub struct ManifestFile {
    /// Its path.
    pub path: PathBuf,
    /// The manifest, or why it is not one (unparsable, another format).
    pub manifest: Result<Manifest, String>,
}

/// What archiving one stream did.
#[derive(Debug, Clone, Serialize)]
pub struct Archived {
    /// Tenant.
    pub tenant: String,
    /// Stream.
    pub stream: String,
    /// First row archived.
    pub first_seq: i64,
    /// Last row archived.
    pub last_seq: i64,
    /// Rows archived.
    pub rows: u64,
    /// The segment file, relative to the archive directory.
    pub file: String,
    /// Hex SHA-256 of the segment file.
    pub sha256: String,
    /// Rows deleted from the database; `None` when pruning failed.
    pub pruned: Option<u64>,
    /// Written by an earlier run that did not prune it; pruned now.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// Why it was not pruned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A stream an archive run skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedStream {
    /// Tenant.
    pub tenant: String,
    /// Stream.
    pub stream: String,
    /// What is wrong with its rows.
    pub problem: String,
}

/// What one archive run did.
#[derive(Debug, Default)]
pub struct ArchiveRun {
    /// Every stream archived and pruned (false: a stream's chain is broken
    /// or does not read back, so it was skipped with nothing of it signed
    /// or deleted, or a stream's rows could not be pruned).
    pub ok: bool,
    /// The manifest written (file name in the archive directory), if any.
    pub manifest: Option<String>,
    /// The streams archived, and those of an earlier run pruned now.
    pub segments: Vec<Archived>,
    /// The streams skipped, or what went wrong removing the archived rows
    /// of past months.
    pub problem: Option<String>,
    /// The streams skipped because their chain is broken or one of their
    /// rows does not read back (tenants write their own rows): each holds
    /// back only itself, every other stream is archived.
    pub skipped: Vec<SkippedStream>,
    /// Past months of the PostgreSQL decision table dropped whole (and
    /// archived rows deleted from the others) once the streams were pruned.
    pub partitions: PartitionPrune,
}

impl ArchiveRun {
    /// Rows written to segments by this run or an earlier one it finished.
    pub fn rows(&self) -> u64 {
        self.segments.iter().map(|a| a.rows).sum()
    }

    /// Rows deleted from the database, row by row or with their month's
    /// partition.
    pub fn pruned(&self) -> u64 {
        self.segments.iter().filter_map(|a| a.pruned).sum::<u64>()
            + self.partitions.rows_dropped
            + self.partitions.rows_deleted
    }
}

/// A writer that hashes what passes through it.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A tenant or stream name as one path component: ASCII letters, digits,
/// `-` and `_` as they are, every other byte `%XX` (so no `.`, `..` or `/`).
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The error of an I/O failure on `path`.
pub fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> ControllerError + '_ {
    move |source| ControllerError::File {
        path: path.display().to_string(),
        source,
    }
}

/// fsyncs a directory, so a rename or a new file in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), ControllerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(file_error(dir))
}

/// Writes `bytes` to `path` durably: a temporary file, fsynced, renamed.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), ControllerError> {
    let tmp = path.with_extension("partial");
    let mut f = File::create(&tmp).map_err(file_error(&tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(file_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(file_error(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Hex SHA-256 of a file.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let mut hash = Sha256::new();
    std::io::copy(&mut f, &mut hash)?;
    Ok(hex::encode(hash.finalize()))
}

/// The manifests in `dir`, in name (so time) order.
pub fn read_manifests(dir: &Path) -> Result<Vec<ManifestFile>, ControllerError> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(file_error(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("manifest-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    let mut manifests = Vec::with_capacity(names.len());
    for path in names {
        let text = std::fs::read(&path).map_err(file_error(&path))?;
        let manifest = match serde_json::from_slice::<Manifest>(&text) {
            Ok(m) if m.format == MANIFEST_FORMAT => Ok(m),
            Ok(m) => Err(format!("unknown manifest format {:?}", m.format)),
            Err(e) => Err(format!("not a manifest: {e}")),
        };
        manifests.push(ManifestFile { path, manifest });
    }
    Ok(manifests)
}

/// Archives the rows of every stream of `tenant` (every tenant when `None`)
/// created before `before` into `out`, checkpoints signed with `key`: first
/// prunes what an earlier run into `out` left unpruned, then writes, signs,
/// lists and prunes what is new (see the module's documentation).
pub async fn write_archive(
    store: &Store,
    before: Timestamp,
    out: &Path,
    key: &SigningKey,
    tenant: Option<&str>,
) -> Result<ArchiveRun, ControllerError> {
    // 0. What an interrupted run left: segments written, checkpointed and
    // listed in a manifest, but not yet pruned.
    let mut archived = resume(store, out, tenant).await?;
    let ranges = store.decisions().archive_ranges(tenant, before).await?;
    if ranges.is_empty() {
        return Ok(with_partitions(
            store,
            ArchiveRun {
                ok: true,
                segments: archived,
                ..Default::default()
            },
        )
        .await);
    }
    std::fs::create_dir_all(out).map_err(file_error(out))?;
    // 1. Every segment written, its chain checked as it is read, fsynced.
    // A stream whose chain is broken is skipped, nothing of it signed or
    // deleted; the others are independent chains, and each tenant writes
    // its own, so one tenant's must not hold back every tenant's archive.
    let mut segments = Vec::with_capacity(ranges.len());
    let mut skipped = Vec::new();
    for range in &ranges {
        match write_segment(store, out, range).await? {
            Ok(segment) => segments.push(segment),
            Err(problem) => skipped.push(SkippedStream {
                tenant: range.tenant.clone(),
                stream: range.stream.clone(),
                problem,
            }),
        }
    }
    let skip_problem = skipped_problem(&skipped);
    if segments.is_empty() {
        return Ok(with_partitions(
            store,
            ArchiveRun {
                ok: false,
                segments: archived,
                problem: skip_problem,
                skipped,
                ..Default::default()
            },
        )
        .await);
    }
    // 2. A signed checkpoint of each segment's last row, stored.
    let at = Timestamp::now();
    let mut checkpoints = Vec::with_capacity(segments.len());
    for segment in &mut segments {
        let payload = CheckpointPayload {
            tenant: segment.tenant.clone(),
            stream: segment.stream.clone(),
            seq: segment.last_seq,
            hash: segment.last_hash.clone(),
            at,
        };
        let envelope = String::from_utf8_lossy(&payload.sign(key))
            .trim_end()
            .to_owned();
        let checkpoint = Checkpoint {
            tenant: payload.tenant,
            stream: payload.stream,
            seq: payload.seq,
            hash: payload.hash,
            at,
            keyid: key.key_id(),
            envelope: envelope.clone(),
        };
        store.checkpoints().record(&checkpoint).await?;
        segment.checkpoint = envelope;
        checkpoints.push(checkpoint);
    }
    // 3. The manifest, fsynced, under a name no other run's has.
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_owned(),
        created_at: at,
        before,
        keyid: key.key_id(),
        segments: segments.clone(),
    };
    let mut ms = at.as_millisecond();
    while out.join(format!("manifest-{ms}.json")).exists() {
        ms += 1;
    }
    let name = format!("manifest-{ms}.json");
    let bytes = serde_json::to_vec_pretty(&manifest)?;
    write_durably(&out.join(&name), &bytes)?;
    // 4. Only now the rows, through each checkpoint.
    let mut ok = true;
    for (segment, checkpoint) in segments.into_iter().zip(&checkpoints) {
        let (pruned, problem) = match store.decisions().prune_through(checkpoint).await {
            Ok(n) => (Some(n), None),
            Err(e) => {
                ok = false;
                (None, Some(format!("not pruned: {e}")))
            }
        };
        archived.push(Archived {
            tenant: segment.tenant,
            stream: segment.stream,
            first_seq: segment.first_seq,
            last_seq: segment.last_seq,
            rows: segment.rows,
            file: segment.file,
            sha256: segment.sha256,
            pruned,
            resumed: false,
            problem,
        });
    }
    Ok(with_partitions(
        store,
        ArchiveRun {
            ok: ok && skipped.is_empty(),
            manifest: Some(name),
            segments: archived,
            problem: skip_problem,
            skipped,
            ..Default::default()
        },
    )
    .await)
}

/// One line naming the skipped streams (the first few), if any.
fn skipped_problem(skipped: &[SkippedStream]) -> Option<String> {
    let first = skipped.first()?;
    let more = match skipped.len() - 1 {
        0 => String::new(),
        n => format!(" (and {n} more stream(s))"),
    };
    Some(format!(
        "tenant {:?} stream {:?}: {}; that stream was not archived{more}",
        first.tenant, first.stream, first.problem
    ))
}

/// `run` after the archived rows of past months are removed
/// ([`toolgate_store::Decisions::drop_archived_partitions`]; nothing on
/// SQLite). A failure there (a lock not granted in time) leaves rows that
/// are archived already and that verification skips; the next run
/// removes them.
async fn with_partitions(store: &Store, mut run: ArchiveRun) -> ArchiveRun {
    match store.decisions().drop_archived_partitions().await {
        Ok(partitions) => run.partitions = partitions,
        Err(e) => {
            run.ok = false;
            let removal = format!("archived rows of past months not removed yet: {e}");
            run.problem = Some(match run.problem.take() {
                Some(skipped) => format!("{skipped}; {removal}"),
                None => removal,
            });
        }
    }
    run
}

/// Writes one range's rows as a gzip JSON lines segment, checking the
/// chain as it goes; `Ok(Err(problem))` when the chain is broken (the
/// partial file is removed).
async fn write_segment(
    store: &Store,
    out: &Path,
    range: &ArchiveRange,
) -> Result<Result<Segment, String>, ControllerError> {
    let rel = format!(
        "{}/{}/{}-{}.jsonl.gz",
        escape(&range.tenant),
        escape(&range.stream),
        range.first_seq,
        range.last_seq
    );
    let path = out.join(&rel);
    let dir = path.parent().unwrap_or(out).to_path_buf();
    std::fs::create_dir_all(&dir).map_err(file_error(&dir))?;
    let tmp = path.with_extension("partial");
    let file = File::create(&tmp).map_err(file_error(&tmp))?;
    let mut gz = GzEncoder::new(
        Hashing {
            inner: BufWriter::new(file),
            hash: Sha256::new(),
        },
        Compression::default(),
    );
    let mut expected = range.first_seq;
    let mut prev = range.prev_hash.clone();
    let mut problem = None;
    'pages: while expected <= range.last_seq {
        let page = match store
            .decisions()
            .list(&range.tenant, &range.stream, expected - 1, PAGE)
            .await
        {
            Ok(page) => page,
            // A row its tenant wrote that does not read back (a time out of
            // range, on SQLite a value of the wrong type): this stream's
            // problem, not the run's.
            Err(e) if e.is_unreadable_row() => {
                problem = Some(format!(
                    "a row from seq {expected} on does not read back: {e}"
                ));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        if page.is_empty() {
            problem = Some(format!("seq {expected} is missing"));
            break;
        }
        for row in page {
            if row.seq > range.last_seq {
                break 'pages;
            }
            if let Some(p) = row.chain_problem(expected, &prev) {
                problem = Some(p);
                break 'pages;
            }
            let mut line = serde_json::to_vec(&row)?;
            line.push(b'\n');
            gz.write_all(&line).map_err(file_error(&tmp))?;
            expected += 1;
            prev = row.hash;
        }
    }
    if let Some(problem) = problem {
        drop(gz);
        let _ = std::fs::remove_file(&tmp);
        return Ok(Err(problem));
    }
    let hashing = gz.finish().map_err(file_error(&tmp))?;
    let sha256 = hex::encode(hashing.hash.finalize());
    let file = hashing
        .inner
        .into_inner()
        .map_err(|e| file_error(&tmp)(e.into_error()))?;
    file.sync_all().map_err(file_error(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(file_error(&path))?;
    sync_dir(&dir)?;
    sync_dir(dir.parent().unwrap_or(out))?;
    sync_dir(out)?;
    Ok(Ok(Segment {
        tenant: range.tenant.clone(),
        stream: range.stream.clone(),
        file: rel,
        first_seq: range.first_seq,
        last_seq: range.last_seq,
        rows: (range.last_seq - range.first_seq + 1) as u64,
        prev_hash: range.prev_hash.clone(),
        last_hash: prev,
        previous: range.previous.clone(),
        sha256,
        checkpoint: String::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_safe_path_component() {
        assert_eq!(escape("team-a_1"), "team-a_1");
        assert_eq!(escape("pod/1"), "pod%2F1");
        assert_eq!(escape(".."), "%2E%2E");
        assert_eq!(escape("é"), "%C3%A9");
    }
}
