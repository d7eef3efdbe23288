//! `toolgate bundle build | verify | inspect`: signed policy bundles.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use toolgate_bundle::{
    BundleDocument, BundleInput, ProfileRef, SigningKey, TrustSet, VerifiedBundle, VerifyOptions,
};
use toolgate_policy::Grant;

use crate::cli_error::{CliError, read_bytes, read_text, write_bytes};
use crate::cmd::check::parse_now;

/// Subcommands of `toolgate bundle`.
#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Sign a profile (and standing grants) into a DSSE bundle file.
    Build(BuildArgs),
    /// Verify a bundle against a trust file and print what it enforces.
    Verify(VerifyArgs),
    /// Decode a bundle WITHOUT verifying it, for debugging.
    Inspect(InspectArgs),
}

/// Arguments of `toolgate bundle build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// PolicyProfile manifest (YAML or JSON).
    #[arg(long)]
    pub profile: PathBuf,
    /// YAML or JSON list of standing grants `[{tool, glob, subjects, expiresAt}]`.
    #[arg(long)]
    pub grants: Option<PathBuf>,
    /// PKCS#8 PEM Ed25519 private key (from `toolgate keygen` or `openssl genpkey -algorithm ed25519`).
    #[arg(long)]
    pub key: PathBuf,
    /// Publication sequence; must grow with every bundle of this profile.
    #[arg(long)]
    pub sequence: u64,
    /// Issue instant (RFC 3339); defaults to now, truncated to the second.
    /// Pass it explicitly for reproducible bytes.
    #[arg(long)]
    pub issued_at: Option<String>,
    /// How long the bundle stays valid: e.g. `24h`, `30m`, `7d`, `1h30m`.
    #[arg(long, default_value = "24h")]
    pub valid_for: String,
    /// Where to write the envelope JSON.
    #[arg(long)]
    pub out: PathBuf,
    /// A candidate PolicyProfile to shadow: sidecars evaluate it beside
    /// `--profile` on every call, record its verdict and never enforce it.
    #[arg(long)]
    pub candidate: Option<PathBuf>,
}

/// Arguments of `toolgate bundle verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Bundle file (DSSE envelope JSON).
    #[arg(long)]
    pub bundle: PathBuf,
    /// Trust file: one or more concatenated SPKI PEM public keys.
    #[arg(long)]
    pub trust: PathBuf,
    /// Sequence of the bundle already enforced; an older one is refused.
    #[arg(long)]
    pub held_sequence: Option<u64>,
    /// Digest of the bundle already enforced; with `--held-sequence`, a
    /// different bundle at the same sequence is refused.
    #[arg(long, requires = "held_sequence")]
    pub held_digest: Option<String>,
    /// Verify as of this RFC 3339 instant instead of now.
    #[arg(long)]
    pub now: Option<String>,
}

/// Arguments of `toolgate bundle inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Bundle file (DSSE envelope JSON).
    #[arg(long)]
    pub bundle: PathBuf,
}

/// Runs `toolgate bundle …`.
pub fn run(command: BundleCommand) -> Result<ExitCode, CliError> {
    let report = match command {
        BundleCommand::Build(args) => build(args)?,
        BundleCommand::Verify(args) => {
            let now = parse_now(args.now.as_deref())?;
            let options = VerifyOptions {
                now,
                held_sequence: args.held_sequence,
                held_digest: args.held_digest,
            };
            summary(&verify_file(&args.bundle, &args.trust, &options)?)
        }
        BundleCommand::Inspect(args) => {
            let inspected = toolgate_bundle::inspect(&read_bytes(&args.bundle)?)?;
            let mut value = serde_json::to_value(&inspected).unwrap_or_default();
            if let serde_json::Value::Object(map) = &mut value {
                map.insert(
                    "warning".into(),
                    "UNVERIFIED: decoded without checking signatures, trust, expiry or sequence; do not rely on it".into(),
                );
            }
            value
        }
    };
    outln!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

/// Reads and verifies a bundle file against a trust file.
pub fn verify_file(
    bundle: &Path,
    trust: &Path,
    options: &VerifyOptions,
) -> Result<VerifiedBundle, CliError> {
    let trust = TrustSet::from_file(trust)?;
    Ok(toolgate_bundle::verify(
        &read_bytes(bundle)?,
        &trust,
        options,
    )?)
}

fn summary(v: &VerifiedBundle) -> serde_json::Value {
    serde_json::json!({
        "policy_version": v.policy_version(),
        "digest": v.digest(),
        "keyid": v.keyid(),
        "profile": v.document().profile.name,
        "namespace": v.document().profile.namespace,
        "sequence": v.sequence(),
        "expires_at": v.expires_at().to_string(),
    })
}

fn build(args: BuildArgs) -> Result<serde_json::Value, CliError> {
    let manifest = toolgate_policy::load::parse_manifest(&read_text(&args.profile)?)?;
    let grants: Vec<Grant> = match &args.grants {
        Some(path) => toolgate_policy::load::from_str(&read_text(path)?)?,
        None => Vec::new(),
    };
    let key = SigningKey::from_file(&args.key)?;
    let issued_at = match &args.issued_at {
        Some(text) => text.parse::<Timestamp>().map_err(|e| {
            CliError::Usage(format!(
                "--issued-at `{text}` is not an RFC 3339 timestamp: {e}"
            ))
        })?,
        None => Timestamp::from_second(Timestamp::now().as_second())
            .map_err(|e| CliError::Usage(format!("clock out of range: {e}")))?,
    };
    let valid_for = toolgate_bundle::parse_duration(&args.valid_for)
        .map_err(|e| CliError::Usage(format!("--valid-for: {e}")))?;
    let expires_at = issued_at.checked_add(valid_for).map_err(|e| {
        CliError::Usage(format!("--valid-for `{}` is too long: {e}", args.valid_for))
    })?;
    let mut document = BundleDocument::new(BundleInput {
        profile: ProfileRef {
            name: manifest.metadata.name,
            namespace: manifest.metadata.namespace,
        },
        spec: manifest.spec,
        grants,
        sequence: args.sequence,
        issued_at,
        expires_at,
    })?;
    if let Some(path) = &args.candidate {
        let candidate = toolgate_policy::load::parse_manifest(&read_text(path)?)?;
        document = document.with_candidate(&candidate.metadata.name, candidate.spec)?;
    }
    let (document, bytes) = toolgate_bundle::sign(document, &key)?;
    write_bytes(&args.out, &bytes)?;
    Ok(serde_json::json!({
        "policy_version": document.policy_version.version,
        "digest": document.digest(),
        "keyid": key.key_id(),
        "profile": document.profile.name,
        "sequence": document.sequence,
        "issued_at": document.issued_at.to_string(),
        "expires_at": document.expires_at.to_string(),
        "candidate_version": document.candidate.as_ref().map(|c| c.policy_version.version.clone()),
        "out": args.out.display().to_string(),
    }))
}
