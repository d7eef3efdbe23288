//! `toolgate controller` and `toolgate crdgen`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli_error::CliError;

/// Arguments of `toolgate crdgen`.
#[derive(Debug, Args)]
pub struct CrdgenArgs {
    /// Directory to write `<plural>.toolgate.dev.yaml` files into; stdout when omitted.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Prints or writes the CRDs generated from the Rust types.
pub fn run(args: CrdgenArgs) -> Result<ExitCode, CliError> {
    match args.out {
        None => out!("{}", toolgate_k8s::crdgen()),
        Some(dir) => toolgate_k8s::write_crds(&dir)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the controller until it fails or loses leadership for good.
pub fn controller(
    args: toolgate_controller::ControllerArgs,
    log_json: bool,
) -> Result<ExitCode, CliError> {
    let _telemetry = crate::telemetry::init(log_json, "toolgate-controller")?;
    crate::runtime()?.block_on(async move {
        let config = toolgate_controller::ControllerConfig::from(args);
        toolgate_controller::run_controller(config, crate::wait_for_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}
