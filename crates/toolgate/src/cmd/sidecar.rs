//! `toolgate sidecar`: the per-pod enforcement server.

use std::process::ExitCode;

use toolgate_sidecar::{Sidecar, SidecarArgs, SidecarConfig, StartError};

use crate::cli_error::CliError;

/// Runs the sidecar until SIGTERM or Ctrl-C, then shuts down gracefully.
pub fn run(args: SidecarArgs, log_json: bool) -> Result<ExitCode, CliError> {
    let _telemetry = crate::telemetry::init(log_json, "toolgate-sidecar")?;
    // A bad flag value is reported like every other one: `usage`, bare message.
    let config = SidecarConfig::try_from(args).map_err(|e| match e {
        StartError::Usage(message) => CliError::Usage(message),
        other => CliError::Sidecar(other),
    })?;
    crate::runtime()?.block_on(async move {
        let sidecar = Sidecar::start(config).await?;
        crate::wait_for_signal().await;
        tracing::info!("shutting down: draining requests and the decision log");
        sidecar.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}
