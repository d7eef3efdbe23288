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
        None => print!("{}", toolgate_k8s::crdgen()),
        Some(dir) => {
            toolgate_k8s::write_crds(&dir).map_err(|e| CliError::Usage(format!("crdgen: {e}")))?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the controller until it fails or loses leadership for good.
pub fn controller(args: toolgate_controller::ControllerArgs) -> Result<ExitCode, CliError> {
    crate::logging::init(false);
    crate::runtime()?.block_on(async move {
        toolgate_controller::run_controller(args)
            .await
            .map_err(|e| CliError::Usage(format!("controller: {} ({})", e, e.code())))?;
        Ok(ExitCode::SUCCESS)
    })
}
