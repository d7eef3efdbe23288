//! `toolgate audit archive` and `toolgate audit verify --archive`: moving a
//! decision log's oldest rows out of the database into signed, hashed files
//! and checking such an archive offline.
//!
//! An archive directory holds, per stream, gzip-compressed JSON lines
//! segments `<tenant>/<stream>/<first>-<last>.jsonl.gz` (names escaped: every
//! byte but ASCII letters, digits, `-` and `_` as `%XX`), one row per line
//! with every column the hash covers, and one manifest per run
//! `manifest-<unix ms>.json` naming each segment it wrote: its seq range,
//! the hash it chains on from and its last row's hash, its SHA-256, and a
//! signed checkpoint (DSSE, as `toolgate audit checkpoint` signs) of its
//! last row. Use the same directory for every run: offline verification
//! requires each stream's segments to start at seq 1 and follow on.
//!
//! The order makes deletion safe: every segment is written and fsynced,
//! the checkpoints stored, the manifest written and fsynced, and only then
//! are the rows deleted, per stream in one transaction and only through the
//! checkpointed seq ([`toolgate_store::Decisions::prune_through`]).
//! Offline verification is [`offline`].

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use flate2::Compression;
use flate2::write::GzEncoder;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolgate_bundle::{CheckpointPayload, SigningKey};
use toolgate_store::{ArchiveRange, Checkpoint, StreamLink};

use crate::cli_error::CliError;

mod offline;
use offline::read_manifests;
pub use offline::verify_archive;

/// `format` of a manifest.
pub(crate) const MANIFEST_FORMAT: &str = "toolgate.decision-archive/v1";
/// Rows read per round trip.
const PAGE: u32 = 10_000;

/// One run's manifest.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) format: String,
    pub(crate) created_at: Timestamp,
    /// Rows created before this were archived.
    pub(crate) before: Timestamp,
    /// Key id of the checkpoints' signer.
    pub(crate) keyid: String,
    pub(crate) segments: Vec<Segment>,
}

/// One segment file of one stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Segment {
    pub(crate) tenant: String,
    pub(crate) stream: String,
    /// Path relative to the archive directory, `/`-separated.
    pub(crate) file: String,
    pub(crate) first_seq: i64,
    pub(crate) last_seq: i64,
    pub(crate) rows: u64,
    /// The hash `first_seq` chains on from (the stream's genesis at seq 1).
    pub(crate) prev_hash: String,
    pub(crate) last_hash: String,
    /// At seq 1: the previous stream's head the genesis hash covers.
    #[serde(default)]
    pub(crate) previous: Option<StreamLink>,
    /// Hex SHA-256 of the segment file.
    sha256: String,
    /// DSSE envelope of the checkpoint of `last_seq`.
    pub(crate) checkpoint: String,
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
pub(crate) fn escape(name: &str) -> String {
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

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |source| CliError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// fsyncs a directory, so a rename or a new file in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), CliError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Writes `bytes` to `path` durably: a temporary file, fsynced, renamed.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let tmp = path.with_extension("partial");
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// What archiving one stream did, for the report.
#[derive(Debug, Serialize)]
struct Archived {
    tenant: String,
    stream: String,
    first_seq: i64,
    last_seq: i64,
    rows: u64,
    file: String,
    sha256: String,
    pruned: Option<u64>,
    /// Written by an earlier run that did not prune it; pruned now.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    resumed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

/// `toolgate audit archive`.
pub async fn archive(
    database: toolgate_sidecar::database::DatabaseArgs,
    before: Timestamp,
    out: PathBuf,
    key: SigningKey,
    tenant: Option<String>,
) -> Result<ExitCode, CliError> {
    let started = std::time::Instant::now();
    let store = database.connect().await?;
    let result = archive_with(&store, before, &out, &key, tenant.as_deref()).await;
    store.close().await;
    let (ok, manifest, archived, problem) = result?;
    let records: u64 = archived.iter().map(|a| a.rows).sum();
    let pruned: u64 = archived.iter().filter_map(|a| a.pruned).sum();
    outln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "ok": ok,
            "out": out.display().to_string(),
            "before": before,
            "keyid": key.key_id(),
            "manifest": manifest,
            "records": records,
            "pruned": pruned,
            "segments": archived,
            "problem": problem,
            "elapsed_ms": started.elapsed().as_millis() as u64,
        }))
        .unwrap_or_default()
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

type ArchiveOutcome = (bool, Option<String>, Vec<Archived>, Option<String>);

async fn archive_with(
    store: &toolgate_store::Store,
    before: Timestamp,
    out: &Path,
    key: &SigningKey,
    tenant: Option<&str>,
) -> Result<ArchiveOutcome, CliError> {
    // 0. What an interrupted run left: segments written, checkpointed and
    // listed in a manifest, but not yet pruned.
    let mut archived = resume(store, out, tenant).await?;
    let ranges = store.decisions().archive_ranges(tenant, before).await?;
    if ranges.is_empty() {
        return Ok((true, None, archived, None));
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    // 1. Every segment written, its chain checked as it is read, fsynced.
    let mut segments = Vec::with_capacity(ranges.len());
    for range in &ranges {
        match write_segment(store, out, range).await? {
            Ok(segment) => segments.push(segment),
            Err(problem) => {
                // Nothing is signed or deleted when any chain is broken.
                let problem = format!(
                    "tenant {:?} stream {:?}: {problem}; nothing was pruned",
                    range.tenant, range.stream
                );
                return Ok((false, None, Vec::new(), Some(problem)));
            }
        }
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
    // 3. The manifest, fsynced.
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_owned(),
        created_at: at,
        before,
        keyid: key.key_id(),
        segments: segments.clone(),
    };
    let name = format!("manifest-{}.json", at.as_millisecond());
    let bytes = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| CliError::Checkpoint(format!("manifest: {e}")))?;
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
    Ok((ok, Some(name), archived, None))
}

/// Prunes the rows of segments an earlier run in `out` wrote, signed,
/// stored and listed in its manifest but did not prune (it was stopped, or
/// the database refused): only a segment that starts right after the
/// stream's live archive position and whose file still has its SHA-256.
async fn resume(
    store: &toolgate_store::Store,
    out: &Path,
    tenant: Option<&str>,
) -> Result<Vec<Archived>, CliError> {
    if !out.is_dir() {
        return Ok(Vec::new());
    }
    let (_, manifests, _) = read_manifests(out)?;
    let mut pending: Vec<Segment> = manifests
        .into_iter()
        .flat_map(|m| m.segments)
        .filter(|s| tenant.is_none_or(|t| t == s.tenant))
        .collect();
    pending.sort_by(|a, b| {
        (&a.tenant, &a.stream, a.first_seq).cmp(&(&b.tenant, &b.stream, b.first_seq))
    });
    let mut done = Vec::new();
    for segment in pending {
        let floor = store
            .decisions()
            .archived_through(&segment.tenant, &segment.stream)
            .await?
            .map_or(0, |p| p.seq);
        if segment.last_seq <= floor {
            continue;
        }
        let refuse = |why: String| {
            CliError::Checkpoint(format!(
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
        let digest = File::open(&path)
            .and_then(|mut f| {
                let mut hash = Sha256::new();
                std::io::copy(&mut f, &mut hash)?;
                Ok(hex::encode(hash.finalize()))
            })
            .map_err(io_err(&path))?;
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

/// Writes one range's rows as a gzip JSON lines segment, checking the
/// chain as it goes; `Ok(Err(problem))` when the chain is broken (the
/// partial file is removed).
async fn write_segment(
    store: &toolgate_store::Store,
    out: &Path,
    range: &ArchiveRange,
) -> Result<Result<Segment, String>, CliError> {
    let rel = format!(
        "{}/{}/{}-{}.jsonl.gz",
        escape(&range.tenant),
        escape(&range.stream),
        range.first_seq,
        range.last_seq
    );
    let path = out.join(&rel);
    let dir = path.parent().unwrap_or(out).to_path_buf();
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let tmp = path.with_extension("partial");
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
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
        let page = store
            .decisions()
            .list(&range.tenant, &range.stream, expected - 1, PAGE)
            .await?;
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
            let mut line =
                serde_json::to_vec(&row).map_err(|e| CliError::Checkpoint(format!("row: {e}")))?;
            line.push(b'\n');
            gz.write_all(&line).map_err(io_err(&tmp))?;
            expected += 1;
            prev = row.hash;
        }
    }
    if let Some(problem) = problem {
        drop(gz);
        let _ = std::fs::remove_file(&tmp);
        return Ok(Err(problem));
    }
    let hashing = gz.finish().map_err(io_err(&tmp))?;
    let sha256 = hex::encode(hashing.hash.finalize());
    let file = hashing
        .inner
        .into_inner()
        .map_err(|e| io_err(&tmp)(e.into_error()))?;
    file.sync_all().map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
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
