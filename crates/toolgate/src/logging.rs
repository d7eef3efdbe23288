//! Structured logs for the long-running commands.

use tracing_subscriber::EnvFilter;

/// Installs a `tracing` subscriber: `RUST_LOG` filters (default `info`),
/// JSON lines when `json` is set.
pub fn init(json: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
