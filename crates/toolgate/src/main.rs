//! `toolgate`: one binary for every part of the system.

mod cli_error;
mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Governs the tool calls of AI agents.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Evaluate one tool call against a profile and print the verdict JSON.
    Check(cmd::check::CheckArgs),
    /// Run policy test cases against a profile (like `opa test`).
    Test(cmd::test::TestArgs),
    /// Evaluate the bundled example calls and print what each one gets.
    Demo(cmd::demo::DemoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => cmd::check::run(args),
        Command::Test(args) => cmd::test::run(args),
        Command::Demo(args) => cmd::demo::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            println!("{}", err.to_json());
            ExitCode::from(2)
        }
    }
}
