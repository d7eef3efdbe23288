//! Verifying chains: recompute every row's hash, check that the chain
//! reaches the position its stream recorded, and check the link to the
//! previous stream.

use super::chain::{genesis_hash, row_hash};
use std::collections::BTreeMap;

use super::{ChainReport, DecisionRow, Decisions, Position, VERIFY_PAGE};
use crate::{Result, StoreError, on_pool, require};

impl Decisions<'_> {
    /// Recomputes every stream's chain of `tenant`, or of every tenant with
    /// rows or a head when `None`, and reports the first broken seq of each.
    pub async fn verify(&self, tenant: Option<&str>) -> Result<Vec<ChainReport>> {
        self.verify_from(tenant, &BTreeMap::new()).await
    }

    /// Like [`Decisions::verify`], but a stream with a position in `trusted`
    /// (keyed by tenant and stream) is read only beyond it: the row at that
    /// position must still carry its hash, and the rows after it must chain
    /// on from there. A trusted position is one the caller verified before
    /// and can prove, such as a checkpoint whose signature it checked; rows
    /// before it are not read again, so a periodic pass costs the rows
    /// appended since, not the whole log. The report's `rows` counts the
    /// rows read.
    pub async fn verify_from(
        &self,
        tenant: Option<&str>,
        trusted: &BTreeMap<(String, String), Position>,
    ) -> Result<Vec<ChainReport>> {
        let chains: Vec<(String, String)> = match tenant {
            Some(t) => {
                require("tenant", t)?;
                on_pool!(self.store, pool => {
                    sqlx::query_as(
                        "SELECT tenant, stream FROM decisions WHERE tenant = $1 \
                         UNION SELECT tenant, stream FROM decision_streams WHERE tenant = $1 \
                         ORDER BY tenant, stream",
                    )
                    .bind(t)
                    .fetch_all(pool)
                    .await?
                })
            }
            None => on_pool!(self.store, pool => {
                sqlx::query_as(
                    "SELECT tenant, stream FROM decisions \
                     UNION SELECT tenant, stream FROM decision_streams ORDER BY tenant, stream",
                )
                .fetch_all(pool)
                .await?
            }),
        };
        let mut reports = Vec::with_capacity(chains.len());
        for (t, s) in chains {
            let start = trusted.get(&(t.clone(), s.clone())).cloned();
            reports.push(self.verify_one(t, s, start).await?);
        }
        Ok(reports)
    }

    /// Verifies one stream's chain.
    pub async fn verify_stream(&self, tenant: &str, stream: &str) -> Result<ChainReport> {
        require("tenant", tenant)?;
        require("stream", stream)?;
        self.verify_one(tenant.to_owned(), stream.to_owned(), None)
            .await
    }

    pub(super) async fn verify_one(
        &self,
        tenant: String,
        stream: String,
        start: Option<Position>,
    ) -> Result<ChainReport> {
        let registered = match self.registered(&tenant, &stream).await {
            Ok(r) => r,
            Err(StoreError::Corrupt(problem)) => {
                return Ok(broken(tenant, stream, 0, problem));
            }
            Err(e) => return Err(e),
        };
        // An archived stream's live rows start after its archive (rows
        // deleted without one are still a gap): see archive.rs.
        let floor = match self.archived_through(&tenant, &stream).await {
            Ok(f) => f,
            Err(StoreError::Corrupt(problem)) => {
                return Ok(broken(tenant, stream, 0, problem));
            }
            Err(e) => return Err(e),
        };
        let start = match (start, floor) {
            (Some(s), Some(f)) if s.seq > f.seq || (s.seq == f.seq && s.hash != f.hash) => Some(s),
            (s, f) => f.or(s),
        };
        // The last row first: rows appended while we read are beyond it and
        // ignored, so verifying a live stream does not race its writer.
        let last = self.last_row(&tenant, &stream).await?;
        let genesis = genesis_hash(
            &tenant,
            &stream,
            registered.as_ref().and_then(|h| h.previous.as_ref()),
        )?;
        let mut report = ChainReport {
            tenant,
            stream,
            rows: 0,
            last_seq: 0,
            last_hash: genesis.clone(),
            ok: true,
            first_broken_seq: None,
            problem: None,
        };
        let max_seq = last.as_ref().map_or(0, |(seq, _)| *seq);
        let mut expected_seq = 1i64;
        let mut prev = genesis;
        let mut last_seen = 0i64;
        if let Some(start) = start.filter(|p| p.seq > 0) {
            if let Some(problem) = self
                .live_position_problem(&report.tenant, &report.stream, start.seq, &start.hash)
                .await?
            {
                report.ok = false;
                report.first_broken_seq = Some(start.seq);
                report.problem = Some(format!("trusted position broken: {problem}"));
                return Ok(report);
            }
            expected_seq = start.seq + 1;
            last_seen = start.seq;
            prev = start.hash;
        }
        'pages: loop {
            let rows = self
                .page(
                    &report.tenant,
                    &report.stream,
                    last_seen,
                    max_seq,
                    VERIFY_PAGE,
                )
                .await?;
            let done = (rows.len() as i64) < VERIFY_PAGE;
            for row in rows {
                report.rows += 1;
                last_seen = row.seq;
                if let Some(problem) =
                    check_row(&report.tenant, &report.stream, expected_seq, &prev, &row)
                {
                    report.ok = false;
                    report.first_broken_seq = Some(expected_seq.min(row.seq));
                    report.problem = Some(problem);
                    break 'pages;
                }
                expected_seq += 1;
                prev = row.hash;
            }
            if done {
                break;
            }
        }
        if !report.ok {
            return Ok(report);
        }
        let last_seq = expected_seq - 1;
        report.last_seq = last_seq;
        report.last_hash.clone_from(&prev);
        // The chain must reach the position recorded when the stream was
        // registered (beyond seq 0 only for streams older than migration
        // 0008), and hold it.
        let problem = match &registered {
            None if last_seq > 0 => Some((
                1,
                "the stream is not registered (its decision_streams row is missing)".to_owned(),
            )),
            None => None,
            Some(r) if r.seq > last_seq => Some((
                last_seq + 1,
                format!(
                    "rows end at seq {last_seq} but the stream's recorded head is at seq {}",
                    r.seq
                ),
            )),
            Some(r) if r.seq > 0 => self
                .live_position_problem(&report.tenant, &report.stream, r.seq, &r.hash)
                .await?
                .map(|p| {
                    (
                        r.seq,
                        format!("the stream's recorded head does not match its row: {p}"),
                    )
                }),
            Some(_) => None,
        };
        if let Some((seq, p)) = problem {
            report.ok = false;
            report.first_broken_seq = Some(seq);
            report.problem = Some(p);
            return Ok(report);
        }
        // The previous stream must still hold the head this stream started
        // from: truncating or rewriting it below that point is detected.
        if let Some(link) = registered.as_ref().and_then(|h| h.previous.as_ref()) {
            let p = self
                .live_position_problem(&report.tenant, &link.stream, link.seq, &link.hash)
                .await?;
            if let Some(p) = p {
                report.ok = false;
                report.first_broken_seq = Some(0);
                report.problem = Some(format!("previous-stream link broken: {p}"));
            }
        }
        Ok(report)
    }
}

fn broken(tenant: String, stream: String, seq: i64, problem: String) -> ChainReport {
    ChainReport {
        tenant,
        stream,
        rows: 0,
        last_seq: 0,
        last_hash: String::new(),
        ok: false,
        first_broken_seq: Some(seq),
        problem: Some(problem),
    }
}

/// Returns what is wrong with `row` when it should be `expected_seq` following
/// a row hashed `prev`, or `None` if it checks out.
fn check_row(
    tenant: &str,
    stream: &str,
    expected_seq: i64,
    prev: &str,
    row: &DecisionRow,
) -> Option<String> {
    if row.seq != expected_seq {
        return Some(format!(
            "seq {expected_seq} is missing (next row present is seq {})",
            row.seq
        ));
    }
    if row.prev_hash != prev {
        return Some(if row.seq == 1 {
            "seq 1 prev_hash does not match the stream's genesis hash".to_owned()
        } else {
            format!(
                "seq {} prev_hash does not match the hash of seq {}",
                row.seq,
                row.seq - 1
            )
        });
    }
    let record = match row.record() {
        Ok(r) => r,
        Err(e) => return Some(format!("seq {} is unreadable: {e}", row.seq)),
    };
    let hash = row_hash(
        tenant,
        stream,
        row.seq,
        &row.prev_hash,
        &record,
        row.created_at,
    );
    (hash != row.hash).then(|| {
        format!(
            "seq {} content does not match its hash (edited or moved)",
            row.seq
        )
    })
}
