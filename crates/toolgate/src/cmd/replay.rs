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
use toolgate_bundle::{Candidate, CandidateError};
use toolgate_contract::parse_instant;
use toolgate_policy::CompiledPolicy;
use toolgate_store::DecisionFilter;
use toolgate_store::replay::replay;

use crate::cli_error::CliError;
use crate::cmd::audit_log::usage;

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
        since: parse_instant("--since", args.since.as_deref(), now).map_err(usage)?,
        until: parse_instant("--until", args.until.as_deref(), now).map_err(usage)?,
        ..DecisionFilter::default()
    };
    let report = crate::runtime()?.block_on(async {
        let store = args.database.connect().await?;
        let report = replay(&store, &candidate, &filter).await;
        store.close().await;
        Ok::<_, CliError>(report?)
    })?;
    match args.format {
        Format::Json => outln!("{}", report.to_json()),
        Format::Table => out!("{}", report.render_table(args.show)),
    }
    if let Some(short) = report.shortfall(args.min_replayed) {
        return Err(CliError::Usage(short));
    }
    Ok(ExitCode::from(report.exit_code()))
}

/// Compiles the candidate file (a bundle envelope or a profile manifest).
fn load_candidate(path: &Path) -> Result<CompiledPolicy, CliError> {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Usage(format!("--candidate {}: {e}", path.display())))?;
    let candidate = Candidate::parse(&bytes).map_err(|e| match e {
        CandidateError::Policy(e) => CliError::Policy(e),
        other => CliError::Usage(format!("--candidate {}: {other}", path.display())),
    })?;
    Ok(candidate.compile()?)
}
