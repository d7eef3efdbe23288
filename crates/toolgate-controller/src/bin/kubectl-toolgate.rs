//! `kubectl-toolgate`: the kubectl plugin (`kubectl toolgate approve|deny|list|cancel|status|replay`).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use toolgate_controller::plugin::{PluginCli, run_plugin};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = PluginCli::parse();
    let mut stdout = toolgate_controller::stdout::Stdout;
    match run_plugin(cli, &mut stdout).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e} ({})", e.code());
            ExitCode::FAILURE
        }
    }
}
