//! `toolgate console`: the approvers' web console (see `toolgate_console`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cli_error::{CliError, read_bytes, read_text};

/// Arguments of `toolgate console`.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Where to serve the console (put TLS in front: an ingress or the
    /// authenticating proxy).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Sign in through an authenticating proxy: a file holding the secret
    /// it sends in `X-Toolgate-Proxy-Secret` with `X-Forwarded-User` and
    /// `X-Forwarded-Groups`. Without it, people sign in with a Kubernetes
    /// token (checked by a TokenReview).
    #[arg(long)]
    pub proxy_secret_file: Option<PathBuf>,
    /// A file of at least 32 bytes that signs session cookies, so replicas
    /// share sessions; by default a random key (sessions end with the process).
    #[arg(long)]
    pub session_key_file: Option<PathBuf>,
    /// Send the session cookie without `Secure`: only for plain HTTP on a
    /// developer's loopback.
    #[arg(long)]
    pub insecure_cookies: bool,
}

/// Serves until the process is stopped.
pub fn run(args: ConsoleArgs, log_json: bool) -> Result<ExitCode, CliError> {
    let _telemetry = crate::telemetry::init(log_json, "toolgate-console")?;
    let proxy_secret = args
        .proxy_secret_file
        .as_deref()
        .map(read_text)
        .transpose()?;
    let session = match &args.session_key_file {
        Some(path) => read_bytes(path)?,
        None => toolgate_console::Keys::random_session_key()?,
    };
    let keys = toolgate_console::Keys::new(session, proxy_secret)?;
    crate::runtime()?.block_on(async move {
        let config = kube::Config::infer()
            .await
            .map_err(|e| toolgate_console::ConsoleError::Config(format!("kubeconfig: {e}")))?;
        let cluster = toolgate_console::Cluster::new(config)?;
        let console = toolgate_console::Console {
            cluster,
            keys,
            secure_cookies: !args.insecure_cookies,
        };
        tokio::select! {
            served = toolgate_console::serve(args.listen, console) => served?,
            () = crate::wait_for_signal() => {}
        }
        Ok(ExitCode::SUCCESS)
    })
}
