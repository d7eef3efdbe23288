//! `toolgate webhook`: the admission webhooks on their own.

use std::process::ExitCode;

use crate::cli_error::CliError;

/// Serves until SIGTERM or Ctrl-C.
pub fn run(args: toolgate_webhook::WebhookArgs) -> Result<ExitCode, CliError> {
    crate::logging::init(false);
    crate::runtime()?.block_on(async move {
        let config = toolgate_webhook::WebhookConfig::try_from(args)
            .map_err(|e| CliError::Usage(format!("webhook: {e}")))?;
        toolgate_webhook::serve(config, crate::wait_for_signal())
            .await
            .map_err(|e| CliError::Usage(format!("webhook: {e}")))?;
        Ok(ExitCode::SUCCESS)
    })
}
