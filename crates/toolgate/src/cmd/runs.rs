//! `toolgate runs`: stop a run of an agent (or every run of a pod, a
//! profile or the namespace), or look at a run's budgets.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use toolgate_policy::{RunId, Stop};

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
        #[command(flatten)]
        database: toolgate_sidecar::database::DatabaseArgs,
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
    /// Print a run's cancellation, budgets and open intents as JSON, in
    /// the shape `GET /v1/runs/{run_id}` answers.
    Status {
        /// The run id (ASCII letters are case-folded).
        run_id: String,
        #[command(flatten)]
        database: toolgate_sidecar::database::DatabaseArgs,
        /// Tenant (namespace) of the run.
        #[arg(long)]
        tenant: String,
        /// The PolicyProfile whose budgets apply, for their limits (without
        /// it every `limit` is null), its profile-wide stops and, when it
        /// declares flows, the run's flow labels (the pod's with `scope:
        /// pod`, given --pod).
        #[arg(long)]
        profile: Option<std::path::PathBuf>,
        /// The pod whose per-pod budgets and pod-wide stops to show.
        #[arg(long)]
        pod: Option<String>,
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
                let stop = Stop::named(run_id.as_deref(), pod.as_deref(), profile.as_deref(), all)?;
                let store = database.connect().await?;
                let (runs, reason, now) = (store.runs(), reason.as_deref(), jiff::Timestamp::now());
                let (stopped, done) = match &stop {
                    Stop::Scope(scope) => (
                        ("scope", scope.to_string()),
                        runs.cancel_scope(&tenant, scope, reason, &by, now).await?,
                    ),
                    Stop::Run(run) => (
                        ("run_id", run.to_string()),
                        runs.cancel(&tenant, run, reason, &by, now).await?,
                    ),
                };
                print_json(&serde_json::json!({
                    "tenant": tenant,
                    stopped.0: stopped.1,
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
                profile,
                pod,
            } => {
                let run_id = RunId::parse(&run_id)?;
                let policy = profile
                    .as_deref()
                    .map(crate::cmd::check::load_profile)
                    .transpose()?;
                let store = database.connect().await?;
                // With a pod, as its sidecar sees the run (the stops that
                // hold the pod, its budgets, pod-scoped labels); without
                // one, the namespace's and the profile's stops.
                let reading = toolgate_gate::runs::read_run(
                    &store,
                    &tenant,
                    &run_id,
                    pod.as_deref(),
                    policy.as_ref(),
                )
                .await?;
                print_json(&reading.status);
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

fn print_json(value: &impl serde::Serialize) {
    outln!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}
