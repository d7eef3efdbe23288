//! `toolgate audit verify` and `toolgate migrate`: operate the database.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use toolgate_store::Store;

use crate::cli_error::CliError;

/// Arguments of `toolgate audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Recompute the decision hash chains and report the first broken seq.
    Verify {
        /// Database URL.
        #[arg(long, env = "TOOLGATE_DATABASE_URL")]
        database: String,
        /// Only this tenant's chain.
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// Runs `toolgate audit …`; exits 1 when any chain is broken.
pub fn run(args: AuditArgs) -> Result<ExitCode, CliError> {
    let AuditCommand::Verify { database, tenant } = args.command;
    crate::runtime()?.block_on(async move {
        let store = Store::connect(&database).await?;
        let reports = store.decisions().verify(tenant.as_deref()).await?;
        let ok = reports.iter().all(|r| r.ok);
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"ok": ok, "chains": reports}))
                .unwrap_or_default()
        );
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

/// Arguments of `toolgate migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Database URL.
    #[arg(long, env = "TOOLGATE_DATABASE_URL")]
    pub database: String,
}

/// Applies pending migrations (connecting applies them) and reports.
pub fn migrate(args: MigrateArgs) -> Result<ExitCode, CliError> {
    crate::runtime()?.block_on(async move {
        let store = Store::connect(&args.database).await?;
        store.migrate().await?;
        println!("{}", serde_json::json!({"migrated": true}));
        Ok(ExitCode::SUCCESS)
    })
}
