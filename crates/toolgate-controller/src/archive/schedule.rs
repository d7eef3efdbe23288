//! The leading controller's archive schedule (`--archive-after`): every
//! `--archive-interval`, every stream's rows created more than
//! `--archive-after` ago are archived into `--archive-dir` with the bundle
//! signing key ([`write_archive`](super::write_archive)), one directory for
//! every pass, and pruned. Off unless `--archive-after` is given.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;

use super::ArchiveRun;
use crate::context::Context;
use crate::error::ControllerError;

/// When and where the controller archives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSchedule {
    /// Rows created more than this long before a pass are archived.
    pub after: SignedDuration,
    /// The archive directory every pass writes into.
    pub dir: PathBuf,
    /// How often a pass runs.
    pub interval: Duration,
}

/// One pass: archives every tenant's rows created before now − `after`
/// into `dir`, signed with the controller's key.
pub async fn archive_once(
    ctx: &Context,
    schedule: &ArchiveSchedule,
) -> Result<ArchiveRun, ControllerError> {
    let span = crate::trace::pass("toolgate.archive.pass");
    // A cutoff before the earliest timestamp archives nothing.
    let before = ctx
        .now()
        .checked_sub(schedule.after)
        .unwrap_or(jiff::Timestamp::MIN);
    crate::trace::traced(
        span,
        super::write_archive(&ctx.store, before, &schedule.dir, &ctx.key, None),
    )
    .await
}

/// Runs [`archive_once`] at once and then every `schedule.interval` until
/// `stop` turns true. A failed pass is logged and the next one tries again
/// (it first finishes what the failed one left unpruned); it never stops the
/// controller.
pub async fn run_archives(
    ctx: Arc<Context>,
    schedule: ArchiveSchedule,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    tracing::info!(
        dir = %schedule.dir.display(),
        after = %schedule.after,
        interval = ?schedule.interval,
        "archiving the decision log on a schedule"
    );
    crate::run::every(schedule.interval, stop, || record_pass(&ctx, &schedule)).await;
}

/// One pass, with its outcome logged (one line) and exported as metrics.
async fn record_pass(ctx: &Context, schedule: &ArchiveSchedule) {
    let dir = schedule.dir.display();
    match archive_once(ctx, schedule).await {
        Ok(run) => {
            for bad in &run.skipped {
                let key = format!("{}/{}", bad.tenant, bad.stream);
                if ctx.first_unreadable("archive", &key) {
                    tracing::warn!(tenant = %bad.tenant, stream = %bad.stream, problem = %bad.problem, "a decision stream is broken or does not read back: not archived, every other stream is");
                }
            }
            let pruned = run.pruned();
            ctx.metrics.archive_rows.inc_by(pruned);
            let streams = run.segments.len();
            if run.ok {
                ctx.metrics
                    .archive_last_success
                    .set(ctx.now().as_millisecond() as f64 / 1000.0);
                tracing::info!(
                    streams,
                    rows = run.rows(),
                    pruned,
                    %dir,
                    manifest = run.manifest.as_deref().unwrap_or(""),
                    "decision log archived"
                );
            } else {
                let problems: Vec<String> = run
                    .problem
                    .iter()
                    .cloned()
                    .chain(run.segments.iter().filter_map(|a| {
                        a.problem
                            .as_ref()
                            .map(|p| format!("{}/{}: {p}", a.tenant, a.stream))
                    }))
                    .take(5)
                    .collect();
                tracing::error!(
                    streams,
                    rows = run.rows(),
                    pruned,
                    %dir,
                    problems = ?problems,
                    "decision log archive incomplete; the next pass tries again"
                );
            }
        }
        Err(e) => tracing::warn!(
            code = e.code(),
            error = %e,
            %dir,
            "archiving failed; the next pass tries again"
        ),
    }
}
