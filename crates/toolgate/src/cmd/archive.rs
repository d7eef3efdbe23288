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

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolgate_bundle::{CheckpointPayload, SigningKey, TrustSet};
use toolgate_store::{ArchiveRange, ChainedDecision, Checkpoint, StreamLink, genesis_hash};

use crate::cli_error::CliError;

/// `format` of a manifest.
const MANIFEST_FORMAT: &str = "toolgate.decision-archive/v1";
/// Rows read per round trip.
const PAGE: u32 = 10_000;

/// One run's manifest.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: String,
    created_at: Timestamp,
    /// Rows created before this were archived.
    before: Timestamp,
    /// Key id of the checkpoints' signer.
    keyid: String,
    segments: Vec<Segment>,
}

/// One segment file of one stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Segment {
    tenant: String,
    stream: String,
    /// Path relative to the archive directory, `/`-separated.
    file: String,
    first_seq: i64,
    last_seq: i64,
    rows: u64,
    /// The hash `first_seq` chains on from (the stream's genesis at seq 1).
    prev_hash: String,
    last_hash: String,
    /// At seq 1: the previous stream's head the genesis hash covers.
    #[serde(default)]
    previous: Option<StreamLink>,
    /// Hex SHA-256 of the segment file.
    sha256: String,
    /// DSSE envelope of the checkpoint of `last_seq`.
    checkpoint: String,
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
fn escape(name: &str) -> String {
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |source| CliError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// fsyncs a directory, so a rename or a new file in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), CliError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Writes `bytes` to `path` durably: a temporary file, fsynced, renamed.
fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
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

/// One problem offline verification found.
#[derive(Debug, Serialize)]
struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    code: &'static str,
    problem: String,
}

impl Problem {
    fn of(segment: &Segment, code: &'static str, problem: String) -> Problem {
        Problem {
            tenant: Some(segment.tenant.clone()),
            stream: Some(segment.stream.clone()),
            file: Some(segment.file.clone()),
            code,
            problem,
        }
    }
}

/// What one stream's archive holds, for the report.
#[derive(Debug, Serialize)]
struct ArchivedStream {
    tenant: String,
    stream: String,
    segments: usize,
    records: u64,
    last_seq: i64,
    last_hash: String,
}

/// The manifests in `dir`, in name (so time) order: how many files there
/// are, those that parse, and a problem for each that does not.
fn read_manifests(dir: &Path) -> Result<(usize, Vec<Manifest>, Vec<Problem>), CliError> {
    let mut problems = Vec::new();
    let mut manifests = Vec::new();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("manifest-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    for path in &names {
        let text = crate::cli_error::read_bytes(path)?;
        match serde_json::from_slice::<Manifest>(&text) {
            Ok(m) if m.format == MANIFEST_FORMAT => manifests.push(m),
            Ok(m) => problems.push(Problem {
                tenant: None,
                stream: None,
                file: Some(path.display().to_string()),
                code: "archive_manifest_invalid",
                problem: format!("unknown manifest format {:?}", m.format),
            }),
            Err(e) => problems.push(Problem {
                tenant: None,
                stream: None,
                file: Some(path.display().to_string()),
                code: "archive_manifest_invalid",
                problem: format!("not a manifest: {e}"),
            }),
        }
    }
    Ok((names.len(), manifests, problems))
}

/// `toolgate audit verify --archive DIR --trust keys.pub`: offline.
pub fn verify_archive(dir: &Path, trust: &TrustSet) -> Result<ExitCode, CliError> {
    let (names, manifests, mut problems) = read_manifests(dir)?;
    if names == 0 {
        problems.push(Problem {
            tenant: None,
            stream: None,
            file: None,
            code: "archive_manifest_missing",
            problem: format!("no manifest-*.json in {}", dir.display()),
        });
    }
    let mut streams: BTreeMap<(String, String), Vec<Segment>> = BTreeMap::new();
    let mut records = 0u64;
    let mut segment_count = 0usize;
    for segment in manifests.into_iter().flat_map(|m| m.segments) {
        segment_count += 1;
        records += check_segment(dir, &segment, trust, &mut problems);
        // Listed segments are judged for contiguity even when they failed.
        streams
            .entry((segment.tenant.clone(), segment.stream.clone()))
            .or_default()
            .push(segment);
    }
    let mut summary = Vec::new();
    for ((tenant, stream), mut segments) in streams {
        segments.sort_by_key(|s| s.first_seq);
        let mut expected = 1i64;
        let mut prev: Option<String> = None;
        for segment in &segments {
            if segment.first_seq != expected {
                let problem = if segment.first_seq > expected {
                    format!(
                        "seq {expected} to {} are in no segment (a segment is missing)",
                        segment.first_seq - 1
                    )
                } else {
                    format!(
                        "segment starts at seq {} but seq {} is archived already (overlap)",
                        segment.first_seq, segment.first_seq
                    )
                };
                problems.push(Problem::of(segment, "archive_segment_missing", problem));
            } else if let Some(prev) = &prev
                && &segment.prev_hash != prev
            {
                problems.push(Problem::of(
                    segment,
                    "archive_chain_broken",
                    format!(
                        "seq {} does not chain on from the previous segment's last hash",
                        segment.first_seq
                    ),
                ));
            }
            expected = segment.last_seq + 1;
            prev = Some(segment.last_hash.clone());
        }
        if let Some(last) = segments.last() {
            summary.push(ArchivedStream {
                tenant,
                stream,
                segments: segments.len(),
                records: segments.iter().map(|s| s.rows).sum(),
                last_seq: last.last_seq,
                last_hash: last.last_hash.clone(),
            });
        }
    }
    let ok = problems.is_empty();
    outln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "ok": ok,
            "archive": dir.display().to_string(),
            "manifests": names,
            "segments": segment_count,
            "records": records,
            "streams": summary,
            "problems": problems,
        }))
        .unwrap_or_default()
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Checks one segment (file hash, every row's chain, its ends and its
/// checkpoint's signature); returns the rows read.
fn check_segment(
    dir: &Path,
    segment: &Segment,
    trust: &TrustSet,
    problems: &mut Vec<Problem>,
) -> u64 {
    let mut fail = |code, problem| problems.push(Problem::of(segment, code, problem));
    // The checkpoint: signed by a trusted key, naming the last row.
    match CheckpointPayload::verify(segment.checkpoint.as_bytes(), trust) {
        Ok((p, _)) => {
            if (&p.tenant, &p.stream, p.seq, &p.hash)
                != (
                    &segment.tenant,
                    &segment.stream,
                    segment.last_seq,
                    &segment.last_hash,
                )
            {
                fail(
                    "archive_checkpoint_mismatch",
                    format!(
                        "the checkpoint signs seq {} of stream {:?}, not the segment's last row",
                        p.seq, p.stream
                    ),
                );
            }
        }
        Err(e) => fail(
            "archive_checkpoint_invalid",
            format!("checkpoint of seq {}: {e} ({})", segment.last_seq, e.code()),
        ),
    }
    let rel = Path::new(&segment.file);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        fail(
            "archive_segment_invalid",
            "segment path leaves the archive".into(),
        );
        return 0;
    }
    let path = dir.join(rel);
    let digest = File::open(&path).and_then(|mut f| {
        let mut hash = Sha256::new();
        std::io::copy(&mut f, &mut hash)?;
        Ok(hex::encode(hash.finalize()))
    });
    match digest {
        Err(e) => {
            fail(
                "archive_segment_missing",
                format!("segment file unreadable: {e}"),
            );
            return 0;
        }
        Ok(d) if d != segment.sha256 => fail(
            "archive_segment_hash",
            "the segment file's SHA-256 does not match the manifest".into(),
        ),
        Ok(_) => {}
    }
    if segment.first_seq == 1 {
        match genesis_hash(&segment.tenant, &segment.stream, segment.previous.as_ref()) {
            Ok(g) if g == segment.prev_hash => {}
            _ => fail(
                "archive_chain_broken",
                "seq 1 does not chain on from the stream's genesis hash".into(),
            ),
        }
    }
    let reader = match File::open(&path) {
        Ok(f) => BufReader::new(GzDecoder::new(BufReader::new(f))),
        Err(_) => return 0,
    };
    let mut expected = segment.first_seq;
    let mut prev = segment.prev_hash.clone();
    let mut rows = 0u64;
    for line in reader.split(b'\n') {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                fail("archive_segment_invalid", format!("unreadable: {e}"));
                return rows;
            }
        };
        if line.is_empty() {
            continue;
        }
        let row: ChainedDecision = match serde_json::from_slice(&line) {
            Ok(r) => r,
            Err(e) => {
                fail(
                    "archive_row_invalid",
                    format!("row after seq {}: {e}", expected - 1),
                );
                return rows;
            }
        };
        rows += 1;
        if (&row.tenant, &row.stream) != (&segment.tenant, &segment.stream) {
            fail(
                "archive_chain_broken",
                format!("seq {} belongs to another stream", row.seq),
            );
            return rows;
        }
        if let Some(p) = row.chain_problem(expected, &prev) {
            fail("archive_chain_broken", p);
            return rows;
        }
        expected += 1;
        prev = row.hash;
    }
    if expected - 1 != segment.last_seq || prev != segment.last_hash {
        fail(
            "archive_chain_broken",
            format!(
                "rows end at seq {} but the manifest says seq {}",
                expected - 1,
                segment.last_seq
            ),
        );
    }
    rows
}
