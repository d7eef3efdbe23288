//! `toolgate`: one binary for every part of the system.

/// `println!` for command output: a reader that went away ends the process
/// quietly (see [`toolgate_controller::stdout`]).
macro_rules! outln {
    () => {
        toolgate_controller::stdout::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        toolgate_controller::stdout::line(format_args!($($arg)*))
    };
}

/// `print!` for command output (see [`outln!`]).
macro_rules! out {
    ($($arg:tt)*) => {
        toolgate_controller::stdout::text(format_args!($($arg)*))
    };
}

mod cli_error;
mod cmd;
mod telemetry;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Governs the tool calls of AI agents.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about)]
struct Cli {
    /// Log JSON lines to stderr (the long-running commands: sidecar,
    /// controller, webhook, mcp wrap). The variable takes the usual
    /// boolish values (`1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`).
    #[arg(long, global = true, env = toolgate_contract::env::LOG_JSON,
          value_parser = clap::builder::BoolishValueParser::new())]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Evaluate one tool call against a profile and print the verdict JSON.
    Check(cmd::check::CheckArgs),
    /// Build, verify or inspect signed policy bundles.
    #[command(subcommand)]
    Bundle(cmd::bundle::BundleCommand),
    /// Generate an Ed25519 signing key pair for bundles.
    Keygen(cmd::keygen::KeygenArgs),
    /// Run policy test cases against a profile (like `opa test`).
    Test(cmd::test::TestArgs),
    /// Find dead and loosening rules in a profile, or compare two profiles.
    Analyze(cmd::analyze::AnalyzeArgs),
    /// Decide the decision log's recorded calls again under a candidate
    /// profile and report what would change (exit 3 when something does).
    Replay(cmd::replay::ReplayArgs),
    /// The whole flow on the embedded default: policy table, then a live
    /// sidecar on a temporary SQLite database driven by a scripted agent.
    Demo(cmd::demo::DemoArgs),
    /// Run the per-pod sidecar (authorize, intents, approvals, workspace).
    Sidecar(toolgate_sidecar::SidecarArgs),
    /// Run the Kubernetes controller (in-cluster or from a kubeconfig).
    Controller(toolgate_controller::ControllerArgs),
    /// Print the CustomResourceDefinitions, or write them into a directory.
    Crdgen(cmd::crdgen::CrdgenArgs),
    /// Serve the admission webhooks (pod injection, policy validation) over TLS.
    Webhook(toolgate_webhook::WebhookArgs),
    /// List, approve or deny escalated calls in the database.
    Approvals(cmd::approvals::ApprovalsArgs),
    /// Cancel a run, or show its budgets and open intents.
    Runs(cmd::runs::RunsArgs),
    /// Verify the hash-chained decision log.
    Audit(cmd::audit::AuditArgs),
    /// Apply database migrations.
    Migrate(cmd::audit::MigrateArgs),
    /// Provision per-tenant PostgreSQL login roles.
    Tenant(cmd::tenant::TenantArgs),
    /// Agent-framework hooks that ask the sidecar (Claude-Code-style PreToolUse).
    Hook(cmd::hook::HookArgs),
    /// The MCP gateway: a stdio MCP server behind the sidecar.
    Mcp(cmd::mcp::McpArgs),
    /// The approvers' web console (acts as the signed-in user).
    Console(cmd::console::ConsoleArgs),
    /// Relay stop wake-ups to sidecars behind a transaction pooler.
    Wakeups(cmd::wakeups::WakeupsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => cmd::check::run(args),
        Command::Test(args) => cmd::test::run(args),
        Command::Analyze(args) => cmd::analyze::run(args),
        // Exit 3 means "changed", so errors are 1 here, not 2: a CI gate
        // must tell a failed replay from a policy change.
        Command::Replay(args) => Ok(cmd::replay::run(args).unwrap_or_else(|err| {
            outln!("{}", err.to_json());
            ExitCode::FAILURE
        })),
        Command::Bundle(command) => cmd::bundle::run(command),
        Command::Keygen(args) => cmd::keygen::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Sidecar(args) => cmd::sidecar::run(args, cli.log_json),
        Command::Webhook(args) => cmd::webhook::run(args, cli.log_json),
        Command::Controller(args) => cmd::crdgen::controller(args, cli.log_json),
        Command::Crdgen(args) => cmd::crdgen::run(args),
        Command::Approvals(args) => cmd::approvals::run(args),
        Command::Runs(args) => cmd::runs::run(args),
        Command::Audit(args) => cmd::audit::run(args),
        Command::Migrate(args) => cmd::audit::migrate(args),
        Command::Tenant(args) => cmd::tenant::run(args),
        Command::Hook(args) => cmd::hook::run(args),
        Command::Mcp(args) => cmd::mcp::run(args, cli.log_json),
        Command::Console(args) => cmd::console::run(args, cli.log_json),
        Command::Wakeups(args) => cmd::wakeups::run(args, cli.log_json),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            outln!("{}", err.to_json());
            ExitCode::from(2)
        }
    }
}

/// A multi-threaded runtime for the commands that do I/O.
fn runtime() -> Result<tokio::runtime::Runtime, cli_error::CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| cli_error::CliError::Io {
            path: "tokio runtime".into(),
            source,
        })
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
