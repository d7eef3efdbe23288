//! `toolgate mcp wrap`: put the sidecar in front of a stdio MCP server.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use toolgate_mcp::sidecar::Sidecar;
use toolgate_mcp::stdio::{WrapConfig, wrap};

use crate::cli_error::CliError;

/// Arguments of `toolgate mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Run a stdio MCP server as a child and speak MCP on this process's
    /// stdin/stdout: tools/list filtered by the profile, every tools/call
    /// decided by the sidecar first (policy tool `SERVER.TOOL`).
    Wrap(WrapArgs),
}

#[derive(Debug, Args)]
struct WrapArgs {
    /// The sidecar's agent API.
    #[arg(long, env = toolgate_contract::env::URL)]
    sidecar: String,
    /// Server name: MCP tool `T` is the policy tool `NAME.T`.
    #[arg(long)]
    server: String,
    /// Run id of every decision (default: one generated for this process).
    #[arg(long, env = toolgate_contract::env::RUN_ID)]
    run_id: Option<String>,
    /// Seconds a call that needs an approval waits for it before it is
    /// refused with `approval_required` (0: refuse at once).
    #[arg(long, default_value_t = 0)]
    approval_wait: u64,
    /// Seconds one request to the sidecar may take.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// The server command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

/// Runs `toolgate mcp …`.
pub fn run(args: McpArgs, log_json: bool) -> Result<ExitCode, CliError> {
    let _telemetry = crate::telemetry::init(log_json, "toolgate-mcp")?;
    let McpCommand::Wrap(args) = args.command;
    if args.server.is_empty() || args.server.contains(char::is_whitespace) {
        return Err(CliError::Usage(
            "--server must be a non-empty name without spaces".into(),
        ));
    }
    let sidecar = Sidecar::new(&args.sidecar, Duration::from_secs(args.timeout.max(1)))?;
    let config = WrapConfig {
        server: args.server,
        run_id: match args.run_id {
            Some(text) => toolgate_policy::RunId::parse(&text)?,
            None => toolgate_mcp::stdio::generated_run_id(),
        },
        approval_wait: Duration::from_secs(args.approval_wait),
        sidecar,
    };
    let mut command = args.command.into_iter();
    let program = command.next().expect("clap requires the command");
    let status = crate::runtime()?.block_on(wrap(config, program, command.collect()))?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}
