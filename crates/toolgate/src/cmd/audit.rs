//! `toolgate audit verify`, `toolgate audit checkpoint`, `toolgate audit
//! archive` and `toolgate migrate`: operate the database (`toolgate audit
//! log`, reading it, is `audit_log.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;
use toolgate_bundle::{CheckpointPayload, SigningKey, TrustSet};
use toolgate_store::{Checkpoint, Store};

use crate::cli_error::CliError;

use super::archive;

/// Arguments of `toolgate audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Read the decision log: filtered, a page at a time (keyset paging
    /// with --after), as a table or JSON lines; --verify checks the chain
    /// of what it prints.
    Log(super::audit_log::LogArgs),
    /// Recompute the decision hash chains (every stream) and report the
    /// first broken seq of each; with --checkpoints, also require every
    /// signed checkpoint to still be in its chain. With --archive, verify
    /// an archive directory offline instead (no database).
    #[command(mut_arg("database", |a| a.required(false).required_unless_present("archive")))]
    Verify {
        #[command(flatten)]
        database: Option<toolgate_sidecar::database::DatabaseArgs>,
        /// Verify this archive directory (written by `toolgate audit
        /// archive`) offline: segment hashes, chains, contiguity and the
        /// signed checkpoints (needs --trust).
        #[arg(long, requires = "trust", conflicts_with_all = ["checkpoints", "tenant"])]
        archive: Option<PathBuf>,
        /// Only this tenant's streams.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this stream (needs --tenant).
        #[arg(long, requires = "tenant")]
        stream: Option<String>,
        /// Check the stored signed checkpoints too: a signed head missing
        /// from its chain (truncated or rewritten) fails verification.
        #[arg(long, requires = "trust")]
        checkpoints: bool,
        /// Trusted public keys (PEM) for the checkpoint signatures.
        #[arg(long)]
        trust: Option<PathBuf>,
    },
    /// Move each stream's rows created before --before out of the database:
    /// write them to --out as gzip JSON lines segments with a manifest and
    /// a signed checkpoint of each stream's last archived row (also stored),
    /// then delete them through that checkpoint. A stream's last row stays.
    Archive {
        #[command(flatten)]
        database: toolgate_sidecar::database::DatabaseArgs,
        /// Archive rows created before this time (RFC 3339).
        #[arg(long)]
        before: jiff::Timestamp,
        /// Archive directory (use the same one for every run).
        #[arg(long)]
        out: PathBuf,
        /// Signing key (PKCS#8 PEM, as `toolgate keygen` writes it).
        #[arg(long)]
        key: PathBuf,
        /// Only this tenant's streams.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Sign each verified stream head `{tenant, stream, seq, hash, at}` as a
    /// DSSE envelope and store it in the checkpoints table; streams whose
    /// name the store refuses are listed under `invalid` (exit 1) and skipped.
    Checkpoint {
        #[command(flatten)]
        database: toolgate_sidecar::database::DatabaseArgs,
        /// Signing key (PKCS#8 PEM, as `toolgate keygen` writes it).
        #[arg(long)]
        key: PathBuf,
        /// Only this tenant's streams.
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// Runs `toolgate audit …`; exits 1 when any chain or checkpoint is broken.
pub fn run(args: AuditArgs) -> Result<ExitCode, CliError> {
    match args.command {
        AuditCommand::Log(args) => super::audit_log::run(args),
        AuditCommand::Verify {
            archive: Some(dir),
            trust,
            ..
        } => {
            let trust = match trust {
                Some(path) => TrustSet::from_file(&path)?,
                None => return Err(CliError::Usage("--archive needs --trust".into())),
            };
            archive::verify_archive(&dir, &trust)
        }
        AuditCommand::Verify {
            database,
            tenant,
            stream,
            checkpoints,
            trust,
            archive: None,
        } => {
            let Some(database) = database else {
                return Err(CliError::Usage(format!(
                    "--database (or {}) is required",
                    toolgate_contract::env::DATABASE_URL
                )));
            };
            let trust = match (checkpoints, trust) {
                (true, Some(path)) => Some(TrustSet::from_file(&path)?),
                (true, None) => {
                    return Err(CliError::Usage("--checkpoints needs --trust".into()));
                }
                (false, _) => None,
            };
            crate::runtime()?.block_on(verify(database, tenant, stream, trust))
        }
        AuditCommand::Checkpoint {
            database,
            key,
            tenant,
        } => {
            let key = SigningKey::from_file(&key)?;
            crate::runtime()?.block_on(checkpoint(database, key, tenant))
        }
        AuditCommand::Archive {
            database,
            before,
            out,
            key,
            tenant,
        } => {
            let key = SigningKey::from_file(&key)?;
            crate::runtime()?.block_on(archive::archive(database, before, out, key, tenant))
        }
    }
}

async fn verify(
    database: toolgate_sidecar::database::DatabaseArgs,
    tenant: Option<String>,
    stream: Option<String>,
    trust: Option<TrustSet>,
) -> Result<ExitCode, CliError> {
    let store = database.connect().await?;
    let reports = match (&tenant, &stream) {
        (Some(t), Some(s)) => vec![store.decisions().verify_stream(t, s).await?],
        _ => store.decisions().verify(tenant.as_deref()).await?,
    };
    let mut ok = reports.iter().all(|r| r.ok);
    let records: u64 = reports.iter().map(|r| r.rows).sum();
    let mut body = serde_json::json!({
        "ok": ok,
        "streams": reports.len(),
        "records": records,
        "chains": reports,
    });
    // Recorded inputs are vouched for by their decisions: each must name
    // the decision's tool and hash to its args_digest.
    let tenants: std::collections::BTreeSet<&str> =
        reports.iter().map(|r| r.tenant.as_str()).collect();
    let mut inputs = Vec::new();
    for t in tenants {
        let check = store.decision_inputs().verify(t).await?;
        if check.rows > 0 {
            ok &= check.ok();
            inputs.push(check);
        }
    }
    body["ok"] = ok.into();
    body["inputs"] = serde_json::to_value(&inputs).unwrap_or_default();
    if let Some(trust) = trust {
        let (checked, failures) =
            check_checkpoints(&store, tenant.as_deref(), stream.as_deref(), &trust).await?;
        ok &= failures.is_empty();
        body["ok"] = ok.into();
        body["checkpoints"] = serde_json::json!({"checked": checked, "failures": failures});
    }
    outln!(
        "{}",
        serde_json::to_string_pretty(&body).unwrap_or_default()
    );
    store.close().await;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One checkpoint that failed, for the report.
#[derive(Debug, Serialize)]
struct CheckpointFailure {
    tenant: String,
    stream: String,
    seq: i64,
    code: String,
    problem: String,
}

/// Checks every stored checkpoint in scope: its signature against `trust`,
/// the signed payload against the row it was stored as, and the signed
/// position against the chain. Returns how many were checked and the
/// failures.
async fn check_checkpoints(
    store: &Store,
    tenant: Option<&str>,
    stream: Option<&str>,
    trust: &TrustSet,
) -> Result<(usize, Vec<CheckpointFailure>), CliError> {
    let stored = store.checkpoints().list(tenant, stream).await?;
    let mut failures = Vec::new();
    for c in &stored {
        let fail = |code: &str, problem: String| CheckpointFailure {
            tenant: c.tenant.clone(),
            stream: c.stream.clone(),
            seq: c.seq,
            code: code.to_owned(),
            problem,
        };
        let payload = match open_checkpoint(c, trust) {
            Ok(p) => p,
            Err(e) => {
                failures.push(fail(e.code(), e.to_string()));
                continue;
            }
        };
        // A checkpoint at or below a stream's archive is checked against
        // the archive's position (rows below it: `verify --archive`).
        if let Some(problem) = store
            .decisions()
            .check_live_position(&payload.tenant, &payload.stream, payload.seq, &payload.hash)
            .await?
        {
            failures.push(fail("checkpoint_not_in_chain", problem));
        }
    }
    Ok((stored.len(), failures))
}

/// Verifies a stored checkpoint's envelope and returns its signed payload;
/// a payload that disagrees with the columns it is filed under (a
/// checkpoint moved to another stream or seq) is refused.
fn open_checkpoint(c: &Checkpoint, trust: &TrustSet) -> Result<CheckpointPayload, CliError> {
    let (payload, _keyid) = CheckpointPayload::verify(c.envelope.as_bytes(), trust)?;
    if (&payload.tenant, &payload.stream, payload.seq, &payload.hash)
        != (&c.tenant, &c.stream, c.seq, &c.hash)
    {
        return Err(CliError::Checkpoint(
            "payload does not match the position it is stored under".into(),
        ));
    }
    Ok(payload)
}

async fn checkpoint(
    database: toolgate_sidecar::database::DatabaseArgs,
    key: SigningKey,
    tenant: Option<String>,
) -> Result<ExitCode, CliError> {
    let store = database.connect().await?;
    let report = toolgate_controller::checkpoint::sign_heads(
        &store,
        &key,
        tenant.as_deref(),
        jiff::Timestamp::now(),
        // On demand, every row: an operator asking wants the whole answer.
        toolgate_controller::checkpoint::Verification::Full,
    )
    .await;
    store.close().await;
    let report = report?;
    // A stream whose name the store refuses is reported, never signed, and
    // stops nothing: every other stream was signed all the same.
    let ok = report.refused.is_empty() && report.invalid.is_empty();
    outln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "ok": ok,
            "keyid": key.key_id(),
            "signed": report.signed,
            "unchanged": report.unchanged,
            "refused": report.refused,
            "invalid": report.invalid,
        }))
        .unwrap_or_default()
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Arguments of `toolgate migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub database: toolgate_sidecar::database::DatabaseArgs,
}

/// Applies pending migrations (connecting applies them) and reports.
pub fn migrate(args: MigrateArgs) -> Result<ExitCode, CliError> {
    crate::runtime()?.block_on(async move {
        let store = args.database.connect().await?;
        store.migrate().await?;
        outln!("{}", serde_json::json!({"migrated": true}));
        Ok(ExitCode::SUCCESS)
    })
}
