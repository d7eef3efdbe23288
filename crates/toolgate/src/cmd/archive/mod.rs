//! `toolgate audit archive` and `toolgate audit verify --archive`: moving a
//! decision log's oldest rows out of the database into signed, hashed files
//! and checking such an archive offline.
//!
//! The writing is [`toolgate_controller::archive`], the code the controller
//! runs on its `--archive-after` schedule; its documentation describes the
//! directory's layout and why deletion is safe. Offline verification is
//! [`offline`].

use std::path::PathBuf;
use std::process::ExitCode;

use jiff::Timestamp;
use toolgate_bundle::SigningKey;
use toolgate_controller::ControllerError;
use toolgate_controller::archive::write_archive;

use crate::cli_error::CliError;

mod offline;
pub use offline::verify_archive;

/// The archive's errors with the codes this command has always reported:
/// a file's `io_error`, an earlier run's segment that no longer fits the
/// database `checkpoint_invalid`.
fn cli_error(e: ControllerError) -> CliError {
    match e {
        ControllerError::File { path, source } => CliError::Io { path, source },
        ControllerError::Archive(message) => CliError::Checkpoint(message),
        ControllerError::Store(e) => CliError::Store(e),
        other => other.into(),
    }
}

/// `toolgate audit archive`.
pub async fn archive(
    database: toolgate_sidecar::database::DatabaseArgs,
    before: Timestamp,
    out: PathBuf,
    key: SigningKey,
    tenant: Option<String>,
) -> Result<ExitCode, CliError> {
    let started = std::time::Instant::now();
    let store = database.connect().await?;
    let result = write_archive(&store, before, &out, &key, tenant.as_deref()).await;
    store.close().await;
    let run = result.map_err(cli_error)?;
    outln!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "ok": run.ok,
            "out": out.display().to_string(),
            "before": before,
            "keyid": key.key_id(),
            "manifest": run.manifest,
            "records": run.rows(),
            "pruned": run.pruned(),
            "segments": run.segments,
            "partitions": run.partitions,
            "problem": run.problem,
            "elapsed_ms": started.elapsed().as_millis() as u64,
        }))
        .unwrap_or_default()
    );
    Ok(if run.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
