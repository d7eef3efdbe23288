//! `toolgate audit verify --archive`: checking an archive directory with no
//! database: segment hashes, chains, contiguity and checkpoint signatures.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Component, Path};
use std::process::ExitCode;

use flate2::read::GzDecoder;
use serde::Serialize;
use toolgate_bundle::{CheckpointPayload, TrustSet};
use toolgate_controller::archive::{Segment, file_sha256, read_manifests};
use toolgate_store::{ChainedDecision, genesis_hash};

use super::cli_error;
use crate::cli_error::CliError;

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

/// `toolgate audit verify --archive DIR --trust keys.pub`: offline.
pub fn verify_archive(dir: &Path, trust: &TrustSet) -> Result<ExitCode, CliError> {
    let files = read_manifests(dir).map_err(cli_error)?;
    let names = files.len();
    let mut problems = Vec::new();
    let mut manifests = Vec::with_capacity(names);
    for file in files {
        match file.manifest {
            Ok(m) => manifests.push(m),
            Err(problem) => problems.push(Problem {
                tenant: None,
                stream: None,
                file: Some(file.path.display().to_string()),
                code: "archive_manifest_invalid",
                problem,
            }),
        }
    }
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
    match file_sha256(&path) {
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
