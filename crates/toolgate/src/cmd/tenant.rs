//! `toolgate tenant`: per-tenant PostgreSQL login roles.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::cli_error::CliError;

/// Arguments of `toolgate tenant`.
#[derive(Debug, Args)]
pub struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
}

#[derive(Debug, Subcommand)]
enum TenantCommand {
    /// Create the tenant's PostgreSQL login role (or give it a fresh
    /// password), confined by row-level security to the tenant's rows, and
    /// print `{"tenant", "role", "database_url"}` for its sidecars.
    Provision {
        /// The admin database (PostgreSQL; a role with CREATEROLE that owns
        /// the toolgate tables). Migrations are applied first.
        #[command(flatten)]
        database: toolgate_sidecar::database::DatabaseArgs,
        /// The tenant: the Kubernetes namespace of the agent pods.
        #[arg(long)]
        tenant: String,
    },
}

/// Runs `toolgate tenant …`.
pub fn run(args: TenantArgs) -> Result<ExitCode, CliError> {
    crate::runtime()?.block_on(async move {
        match args.command {
            TenantCommand::Provision { database, tenant } => {
                let store = database.connect().await?;
                let result = store.provision_tenant(&tenant).await;
                store.close().await;
                let creds = result?;
                outln!("{}", serde_json::to_string(&creds).unwrap_or_default());
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
