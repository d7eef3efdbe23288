//! `toolgate replay`: decide the recorded calls of the decision log again
//! under a candidate profile or bundle, and report what would change.
//!
//! Exit codes are for CI gating a policy change: 0 when no replayed
//! verdict changes, 3 when one does, 1 (with an error envelope) when the
//! replay cannot be made.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use jiff::Timestamp;
use toolgate_policy::CompiledPolicy;
use toolgate_store::DecisionFilter;
use toolgate_store::replay::{ReplayReport, replay};

use crate::cli_error::CliError;
use crate::cmd::audit_log::instant;

/// Exit code when the candidate changes a replayed verdict.
pub const EXIT_CHANGED: u8 = 3;

/// Arguments of `toolgate replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    database: toolgate_sidecar::database::DatabaseArgs,
    /// The candidate: a PolicyProfile manifest (YAML or JSON), or a bundle
    /// envelope (JSON) whose spec and grants are replayed as signed (its
    /// signature is not checked: it is an input here, not enforced).
    #[arg(long)]
    candidate: PathBuf,
    /// Only this tenant's decisions (a tenant's own role sees only its
    /// own whatever this says).
    #[arg(long)]
    tenant: Option<String>,
    /// Only decisions made at or after this: an RFC 3339 instant or a
    /// duration before now (`7d`).
    #[arg(long)]
    since: Option<String>,
    /// Only decisions made before this.
    #[arg(long)]
    until: Option<String>,
    /// `table` for people, `json` for the whole report as one JSON object.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Changed decisions the table lists (the JSON lists up to 10,000).
    #[arg(long, default_value_t = 50)]
    show: usize,
    /// Fail (exit 1) when fewer decisions than this could be replayed, so
    /// that a CI gate on an unrecorded log does not pass by checking
    /// nothing.
    #[arg(long, default_value_t = 0)]
    min_replayed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// Runs `toolgate replay`.
pub fn run(args: ReplayArgs) -> Result<ExitCode, CliError> {
    let candidate = load_candidate(&args.candidate)?;
    let now = Timestamp::now();
    let filter = DecisionFilter {
        tenant: args.tenant.clone(),
        since: instant("--since", args.since.as_deref(), now)?,
        until: instant("--until", args.until.as_deref(), now)?,
        ..DecisionFilter::default()
    };
    let report = crate::runtime()?.block_on(async {
        let store = args.database.connect().await?;
        let report = replay(&store, &candidate, &filter).await;
        store.close().await;
        Ok::<_, CliError>(report?)
    })?;
    match args.format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
        Format::Table => print_table(&report, args.show),
    }
    if report.replayed < args.min_replayed {
        return Err(CliError::Usage(format!(
            "only {} of {} decisions could be replayed, fewer than --min-replayed {} \
             (record inputs with spec.audit.recordInputs)",
            report.replayed, report.decisions, args.min_replayed
        )));
    }
    Ok(if report.differs() {
        ExitCode::from(EXIT_CHANGED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Compiles the candidate: a bundle envelope when the file is one, else a
/// profile manifest.
fn load_candidate(path: &Path) -> Result<CompiledPolicy, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Usage(format!("--candidate {}: {e}", path.display())))?;
    if let Ok(unverified) = toolgate_bundle::inspect(&bytes) {
        let document: toolgate_bundle::BundleDocument = serde_json::from_value(unverified.document)
            .map_err(|e| {
                CliError::Usage(format!(
                    "--candidate {}: not a toolgate bundle document: {e}",
                    path.display()
                ))
            })?;
        return Ok(CompiledPolicy::compile(
            &document.profile.name,
            &document.spec,
            &document.grants,
        )?);
    }
    crate::cmd::check::load_profile(path)
}

fn print_table(report: &ReplayReport, show: usize) {
    outln!("candidate {}", report.candidate_version);
    outln!(
        "decisions read {}, replayed {}, unchanged {}, changed {} ({} loosened), not replayed {}",
        report.decisions,
        report.replayed,
        report.unchanged,
        report.changed,
        report.loosened,
        report.decisions - report.replayed
    );
    if report.replayed == 0 {
        outln!("nothing was replayed: no decision had a replayable input");
    }
    if let Some(from) = report.history_from {
        outln!("history from {from}: flow labels set before it are not seen");
    }
    if report.runs_with_gaps > 0 {
        outln!(
            "{} run(s) had a call that ran without a replayable input: their flow labels may be incomplete",
            report.runs_with_gaps
        );
    }
    outln!("\ntransitions (recorded→candidate):");
    for (transition, count) in &report.transitions {
        outln!("  {transition:<20} {count}");
    }
    if !report.not_replayed.is_empty() {
        outln!("\nnot replayed:");
        for (why, count) in &report.not_replayed {
            outln!("  {why:<22} {count}");
        }
    }
    if report.changes.is_empty() {
        return;
    }
    outln!("\nchanged decisions (loosenings first):");
    outln!(
        "{:<14} {:<36} {:<24} {:<20} {:<40} {}",
        "CHANGE",
        "DECISION",
        "TOOL",
        "RUN",
        "WAS",
        "IS"
    );
    for c in report.changes.iter().take(show) {
        let was = outcome_text(&c.old);
        let is = outcome_text(&c.new);
        outln!(
            "{:<14} {:<36} {:<24} {:<20} {:<40} {}",
            c.transition().label(),
            c.decision_id,
            escape(&c.tool),
            escape(&c.run_id),
            was,
            is
        );
    }
    let more = report.changes.len().saturating_sub(show) as u64 + report.changes_not_listed;
    if more > 0 {
        outln!("… and {more} more (--show N, or --format json)");
    }
}

fn outcome_text(o: &toolgate_store::replay::Outcome) -> String {
    match &o.rule {
        Some(rule) => format!("{} {} ({})", o.verdict.as_str(), o.reason, escape(rule)),
        None => format!("{} {}", o.verdict.as_str(), o.reason),
    }
}

/// Agent-chosen text (tool, run id, rule) as a terminal shows it safely.
fn escape(text: &str) -> String {
    text.escape_debug().to_string()
}
