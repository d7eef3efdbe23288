//! `toolgate webhook`: the admission webhooks on their own.

use std::process::ExitCode;

use crate::cli_error::CliError;

/// Serves until SIGTERM or Ctrl-C.
pub fn run(args: toolgate_webhook::WebhookArgs, log_json: bool) -> Result<ExitCode, CliError> {
    let _telemetry = crate::telemetry::init(log_json, "toolgate-webhook")?;
    crate::runtime()?.block_on(async move {
        let config = toolgate_webhook::WebhookConfig::try_from(args)?;
        toolgate_webhook::serve(config, crate::wait_for_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}
