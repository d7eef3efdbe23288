//! `toolgate runs`: stop a run of an agent, or look at its budgets.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use toolgate_policy::RunId;
use toolgate_store::Store;

use crate::cli_error::CliError;

/// Arguments of `toolgate runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: RunsCommand,
}

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// Cancel a run: every sidecar refuses its further calls
    /// (`run_cancelled`) and its pending approvals are cancelled. Open
    /// intents are kept for resume; nothing is replayed.
    Cancel {
        /// The run id (ASCII letters are case-folded; other spellings are refused).
        run_id: String,
        /// Database URL.
        #[arg(long, env = "TOOLGATE_DATABASE_URL")]
        database: String,
        /// Tenant (namespace) of the run.
        #[arg(long)]
        tenant: String,
        /// Why (recorded, shown to the agent).
        #[arg(long)]
        reason: Option<String>,
        /// Who cancels (recorded).
        #[arg(long, default_value = "cli")]
        by: String,
    },
    /// Print a run's cancellation, counted calls and open intents as JSON.
    Status {
        /// The run id (ASCII letters are case-folded).
        run_id: String,
        /// Database URL.
        #[arg(long, env = "TOOLGATE_DATABASE_URL")]
        database: String,
        /// Tenant (namespace) of the run.
        #[arg(long)]
        tenant: String,
    },
}

/// Runs `toolgate runs …`.
pub fn run(args: RunsArgs) -> Result<ExitCode, CliError> {
    crate::runtime()?.block_on(async move {
        match args.command {
            RunsCommand::Cancel {
                run_id,
                database,
                tenant,
                reason,
                by,
            } => {
                let run_id = RunId::parse(&run_id)?;
                let store = Store::connect(&database).await?;
                let done = store
                    .runs()
                    .cancel(
                        &tenant,
                        &run_id,
                        reason.as_deref(),
                        &by,
                        jiff::Timestamp::now(),
                    )
                    .await?;
                print_json(&serde_json::json!({
                    "tenant": tenant,
                    "run_id": run_id,
                    "cancel_requested_at": done.requested_at,
                    "newly_cancelled": done.newly_cancelled,
                    "approvals_cancelled": done.approvals_cancelled,
                }));
                Ok(ExitCode::SUCCESS)
            }
            RunsCommand::Status {
                run_id,
                database,
                tenant,
            } => {
                let run_id = RunId::parse(&run_id)?;
                let store = Store::connect(&database).await?;
                print_json(&store.runs().state(&tenant, &run_id).await?);
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}
