//! `toolgate approvals`: answer escalations from the command line.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use toolgate_store::{ApprovalDecision, ApprovalStatus, StoreError};

use crate::cli_error::CliError;

/// Arguments of `toolgate approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
    /// List approvals (pending first).
    List {
        #[command(flatten)]
        database: toolgate_sidecar::database::DatabaseArgs,
        /// Only this tenant's approvals.
        #[arg(long)]
        tenant: Option<String>,
        /// Only approvals in this state: pending, approved, denied, expired.
        #[arg(long)]
        status: Option<String>,
    },
    /// Approve one escalated call.
    Approve(Resolve),
    /// Deny one escalated call.
    Deny(Resolve),
}

#[derive(Debug, Args)]
struct Resolve {
    /// Approval id.
    id: String,
    #[command(flatten)]
    database: toolgate_sidecar::database::DatabaseArgs,
    /// Who decides (recorded).
    #[arg(long)]
    by: String,
    /// Why (recorded).
    #[arg(long)]
    reason: Option<String>,
    /// Tenant owning the approval; found from the id when omitted.
    #[arg(long)]
    tenant: Option<String>,
}

/// Runs `toolgate approvals …`.
pub fn run(args: ApprovalsArgs) -> Result<ExitCode, CliError> {
    crate::runtime()?.block_on(async move {
        match args.command {
            ApprovalsCommand::List {
                database,
                tenant,
                status,
            } => {
                let store = database.connect().await?;
                let status = status
                    .map(|s| s.parse::<ApprovalStatus>())
                    .transpose()
                    .map_err(|e| StoreError::InvalidInput(format!("--status: {e}")))?;
                let list = match tenant {
                    Some(t) => store.approvals().list(&t, status, Timestamp::now()).await?,
                    // Every tenant's rows: one a tenant wrote that does not
                    // read back is named on stderr, not allowed to hide the
                    // rest. The listing itself worked, so this succeeds.
                    None => {
                        let listing = store
                            .approvals()
                            .list_all_readable(status, Timestamp::now())
                            .await?;
                        // Tenant-written text, escaped: a stored control
                        // sequence must not reach the operator's terminal.
                        for bad in &listing.unreadable {
                            let id = bad.id.as_deref().unwrap_or("?").escape_debug();
                            let tenant = bad.tenant.as_deref().unwrap_or("?").escape_debug();
                            let why = bad.error.to_string();
                            let _ = writeln!(
                                std::io::stderr(),
                                "warning: approval {id} of tenant {tenant} not listed: \
                                 its row does not read back ({})",
                                why.escape_debug()
                            );
                        }
                        listing.approvals
                    }
                };
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&list).unwrap_or_default()
                );
                Ok(ExitCode::SUCCESS)
            }
            ApprovalsCommand::Approve(r) => resolve(r, ApprovalDecision::Approved).await,
            ApprovalsCommand::Deny(r) => resolve(r, ApprovalDecision::Denied).await,
        }
    })
}

async fn resolve(r: Resolve, decision: ApprovalDecision) -> Result<ExitCode, CliError> {
    let store = r.database.connect().await?;
    let tenant = match r.tenant {
        Some(t) => t,
        // Looked up by id alone: no other row is read, so none that does
        // not read back can block answering this one.
        None => match store.approvals().tenant_of(&r.id).await {
            Ok(tenant) => tenant,
            Err(StoreError::NotFound { .. }) => {
                return Err(CliError::Usage(format!("no approval with id {}", r.id)));
            }
            Err(e) => return Err(e.into()),
        },
    };
    let approval = store
        .approvals()
        .resolve(
            &tenant,
            &r.id,
            decision,
            &r.by,
            r.reason.as_deref(),
            Timestamp::now(),
        )
        .await?;
    outln!(
        "{}",
        serde_json::to_string_pretty(&approval).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
