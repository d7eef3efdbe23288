//! `toolgate runs`: stop a run of an agent (or every run of a pod, a
//! profile or the namespace), or look at a run's budgets.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use toolgate_policy::{RunId, Scope};
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
    /// intents are kept for resume; nothing is replayed. With `--pod`,
    /// `--profile` or `--all` instead of a run id, every run of that pod,
    /// profile or of the whole tenant is stopped, whatever run ids the
    /// agent picks next (a kill switch).
    #[command(group(clap::ArgGroup::new("what").required(true).args(["run_id", "pod", "profile", "all"])))]
    Cancel {
        /// The run id (ASCII letters are case-folded; other spellings are refused).
        run_id: Option<String>,
        /// Stop every run of this pod (by pod name).
        #[arg(long)]
        pod: Option<String>,
        /// Stop every run of every pod under this profile.
        #[arg(long)]
        profile: Option<String>,
        /// Stop every run of the tenant.
        #[arg(long)]
        all: bool,
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
                pod,
                profile,
                all,
                database,
                tenant,
                reason,
                by,
            } => {
                let scope = match (&pod, &profile) {
                    (Some(pod), _) => Some(Scope::parse("pod", Some(pod))?),
                    (_, Some(profile)) => Some(Scope::parse("profile", Some(profile))?),
                    _ if all => Some(Scope::Namespace),
                    _ => None,
                };
                if let Some(scope) = scope {
                    let store = Store::connect(&database).await?;
                    let done = store
                        .runs()
                        .cancel_scope(
                            &tenant,
                            &scope,
                            reason.as_deref(),
                            &by,
                            jiff::Timestamp::now(),
                        )
                        .await?;
                    print_json(&serde_json::json!({
                        "tenant": tenant,
                        "scope": scope.to_string(),
                        "cancel_requested_at": done.requested_at,
                        "newly_cancelled": done.newly_cancelled,
                        "approvals_cancelled": done.approvals_cancelled,
                    }));
                    return Ok(ExitCode::SUCCESS);
                }
                let run_id = RunId::parse(run_id.as_deref().unwrap_or_default())?;
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
