//! `toolgate keygen`: a fresh Ed25519 key pair for signing bundles.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use toolgate_bundle::SigningKey;

use crate::cli_error::CliError;

/// Arguments of `toolgate keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Directory for `signing.key` (PKCS#8 PEM, mode 0600) and `signing.pub`
    /// (SPKI PEM, for trust files). Created if missing; existing key files
    /// are never overwritten.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `toolgate keygen`.
pub fn run(args: KeygenArgs) -> Result<ExitCode, CliError> {
    std::fs::create_dir_all(&args.out).map_err(|source| CliError::Io {
        path: args.out.display().to_string(),
        source,
    })?;
    let private = args.out.join("signing.key");
    let public = args.out.join("signing.pub");
    if public.exists() {
        return Err(CliError::Usage(format!(
            "{} already exists; refusing to overwrite a key",
            public.display()
        )));
    }
    let key = SigningKey::generate();
    key.write_file(&private)?;
    key.public_key().write_file(&public)?;
    let report = serde_json::json!({
        "keyid": key.key_id(),
        "private_key": private.display().to_string(),
        "public_key": public.display().to_string(),
    });
    outln!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
