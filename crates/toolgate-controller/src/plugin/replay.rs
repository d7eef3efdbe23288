//! `kubectl toolgate replay PROFILE-FILE`: `toolgate replay` against the
//! cluster's decision log for the profile's namespace.
//!
//! The namespace is the file's `metadata.namespace`, else `-n`, else the
//! kubeconfig context's. The database URL is the namespace's tenant Secret
//! (`toolgate-database`, key `url`): the tenant's own role, so PostgreSQL's
//! row-level security shows it that tenant's decisions and nothing else,
//! and the replay reads tenant = namespace. A profile candidate is compiled
//! as the controller would publish it: with the profile's active standing
//! grants in that namespace. Output and exit status are `toolgate
//! replay`'s: 0 unchanged, 3 changed, 1 error.

use std::io::Write;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use toolgate_bundle::{Candidate, CandidateError, CandidateSource};
use toolgate_contract::{InstantError, parse_instant};
use toolgate_store::replay::replay;
use toolgate_store::{DecisionFilter, Store, StoreError, StoreOptions};

use crate::crd::Approval;
use crate::error::ControllerError;
use crate::tenancy::{DATABASE_SECRET, DATABASE_URL_KEY};

/// Arguments of `replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The candidate: a PolicyProfile manifest (YAML or JSON, as applied
    /// with kubectl), or a bundle envelope.
    #[arg(value_name = "PROFILE-FILE")]
    pub file: std::path::PathBuf,
    /// Namespace (tenant) whose log is replayed, when the file names none
    /// (default: the kubeconfig context's namespace).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Database URL instead of the namespace's `toolgate-database` Secret
    /// (whose host is often reachable only inside the cluster: port-forward
    /// and pass the forwarded URL here).
    #[arg(long)]
    pub database: Option<String>,
    /// Only decisions made at or after this: an RFC 3339 instant or a
    /// duration before now (`7d`).
    #[arg(long)]
    pub since: Option<String>,
    /// Only decisions made before this.
    #[arg(long)]
    pub until: Option<String>,
    /// `table` for people, `json` for the whole report as one JSON object.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Changed decisions the table lists (the JSON lists up to 10,000).
    #[arg(long, default_value_t = 50)]
    pub show: usize,
    /// Fail (exit 1) when fewer decisions than this could be replayed.
    #[arg(long, default_value_t = 0)]
    pub min_replayed: u64,
}

/// How `replay` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The report for people.
    Table,
    /// The report as one JSON object.
    Json,
}

/// Longest wait for a database connection: an unreachable in-cluster host
/// should fail with the hint below, not hang.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `replay`; returns the exit status (0 or 3).
pub async fn run(
    client: &kube::Client,
    args: ReplayArgs,
    out: &mut dyn Write,
) -> Result<u8, ControllerError> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| ControllerError::Io(format!("{}: {e}", args.file.display())))?;
    let mut candidate = Candidate::parse(&bytes).map_err(|e| invalid(&args.file, &e))?;
    let namespace = pick_namespace(
        client,
        candidate.namespace.as_deref(),
        args.namespace.as_deref(),
    )?;
    let now = Timestamp::now();
    if candidate.source == CandidateSource::Profile {
        candidate.grants = active_grants(client, &namespace, &candidate, now).await?;
    }
    let policy = candidate
        .compile()
        .map_err(|e| invalid(&args.file, &CandidateError::Policy(e)))?;
    let filter = DecisionFilter {
        tenant: Some(namespace.clone()),
        since: parse_instant("--since", args.since.as_deref(), now).map_err(bad_flag)?,
        until: parse_instant("--until", args.until.as_deref(), now).map_err(bad_flag)?,
        ..DecisionFilter::default()
    };
    let (url, from_secret) = match args.database {
        Some(url) => (url, false),
        None => (secret_url(client, &namespace).await?, true),
    };
    let store = connect(&url, &namespace, from_secret).await?;
    let report = replay(&store, &policy, &filter).await;
    store.close().await;
    let report = report?;
    let io = |e: std::io::Error| ControllerError::Io(e.to_string());
    match args.format {
        Format::Json => writeln!(out, "{}", report.to_json()).map_err(io)?,
        Format::Table => write!(out, "{}", report.render_table(args.show)).map_err(io)?,
    }
    out.flush().map_err(io)?;
    if let Some(short) = report.shortfall(args.min_replayed) {
        return Err(ControllerError::InvalidObject(short));
    }
    Ok(report.exit_code())
}

fn bad_flag(e: InstantError) -> ControllerError {
    ControllerError::InvalidObject(e.to_string())
}

fn invalid(file: &std::path::Path, e: &CandidateError) -> ControllerError {
    ControllerError::InvalidObject(format!("{}: {e} ({})", file.display(), e.code()))
}

/// The file's namespace, else `-n`, else the context's; a file and a flag
/// that disagree are refused, as kubectl refuses them.
fn pick_namespace(
    client: &kube::Client,
    of_file: Option<&str>,
    flag: Option<&str>,
) -> Result<String, ControllerError> {
    match (of_file, flag) {
        (Some(file), Some(flag)) if file != flag => Err(ControllerError::InvalidObject(format!(
            "the file's namespace `{file}` does not match -n `{flag}`"
        ))),
        (Some(ns), _) | (None, Some(ns)) => Ok(ns.to_owned()),
        (None, None) => Ok(client.default_namespace().to_owned()),
    }
}

/// The profile's active standing grants in `namespace`, as the controller
/// compiles them into the profile's bundle.
async fn active_grants(
    client: &kube::Client,
    namespace: &str,
    candidate: &Candidate,
    now: Timestamp,
) -> Result<Vec<toolgate_policy::Grant>, ControllerError> {
    let api: Api<Approval> = Api::namespaced(client.clone(), namespace);
    let approvals = api.list(&ListParams::default()).await?.items;
    let approvers = candidate
        .spec
        .approvals
        .as_ref()
        .map(|a| a.approvers.as_slice())
        .unwrap_or_default();
    let (grants, _) = crate::profile::active_grants(&approvals, &candidate.name, approvers, now);
    // A grant the candidate's spec cannot compile with is left out, as the
    // controller leaves it out of the bundle.
    Ok(crate::profile::usable_grants(&candidate.name, &candidate.spec, grants).0)
}

/// The URL in the namespace's tenant Secret.
async fn secret_url(client: &kube::Client, namespace: &str) -> Result<String, ControllerError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let missing = |why: &str| {
        ControllerError::InvalidObject(format!(
            "{why}: the controller writes it when the namespace holds a PolicyProfile on \
             PostgreSQL; pass --database URL to replay another database"
        ))
    };
    let secret = match api.get_opt(DATABASE_SECRET).await? {
        Some(secret) => secret,
        None => {
            return Err(missing(&format!(
                "no Secret {DATABASE_SECRET} in namespace {namespace}"
            )));
        }
    };
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(DATABASE_URL_KEY))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .filter(|url| !url.is_empty())
        .ok_or_else(|| {
            missing(&format!(
                "Secret {namespace}/{DATABASE_SECRET} has no key `{DATABASE_URL_KEY}`"
            ))
        })
}

/// Connects to the database; an unreachable one says where the URL came
/// from and how to reach it from outside the cluster.
async fn connect(url: &str, namespace: &str, from_secret: bool) -> Result<Store, ControllerError> {
    let options = StoreOptions {
        max_connections: 2,
        acquire_timeout: CONNECT_TIMEOUT,
        ..StoreOptions::default()
    };
    match Store::connect_with(&existing_only(url), options).await {
        Ok(store) => Ok(store),
        Err(e @ StoreError::Unavailable(_)) if from_secret => Err(ControllerError::Io(format!(
            "cannot reach the database of Secret {namespace}/{DATABASE_SECRET} ({e}); its host \
             is often reachable only inside the cluster: port-forward to it and pass --database URL"
        ))),
        Err(e @ StoreError::Unavailable(_)) => Err(ControllerError::Io(format!(
            "cannot reach the database of --database ({e})"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// A SQLite URL that names no `mode` opened as `mode=rw`: a mistyped path
/// must fail, not replay an empty new database and pass a gate.
fn existing_only(url: &str) -> String {
    let sqlite = url.starts_with("sqlite:") && !url.contains(":memory:");
    let has_mode = url
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("mode=")));
    match (sqlite && !has_mode, url.contains('?')) {
        (false, _) => url.to_owned(),
        (true, true) => format!("{url}&mode=rw"),
        (true, false) => format!("{url}?mode=rw"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_database_must_exist() {
        assert_eq!(
            existing_only("sqlite:///d/t.db"),
            "sqlite:///d/t.db?mode=rw"
        );
        assert_eq!(
            existing_only("sqlite://t.db?cache=shared"),
            "sqlite://t.db?cache=shared&mode=rw"
        );
        for kept in [
            "sqlite://t.db?mode=ro",
            "sqlite::memory:",
            "postgres://h/db?sslmode=require",
        ] {
            assert_eq!(existing_only(kept), kept);
        }
    }
}
