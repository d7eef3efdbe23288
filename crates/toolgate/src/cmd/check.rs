//! `toolgate check`: one call, one verdict.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args};
use toolgate_policy::{Call, CompiledPolicy, Context, PolicyError};

use crate::cli_error::{CliError, read_text};

/// Arguments of `toolgate check`. The policy comes from exactly one of a
/// profile file or a signed bundle (verified against `--trust` first).
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["profile", "bundle"])))]
pub struct CheckArgs {
    /// PolicyProfile manifest (YAML or JSON).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Signed bundle (DSSE envelope); evaluated only after it verifies.
    #[arg(long, requires = "trust")]
    pub bundle: Option<PathBuf>,
    /// Trust file (concatenated SPKI PEM public keys) for `--bundle`.
    #[arg(long, requires = "bundle")]
    pub trust: Option<PathBuf>,
    /// Tool name as the agent calls it.
    #[arg(long)]
    pub tool: String,
    /// Optional action of the tool.
    #[arg(long)]
    pub action: Option<String>,
    /// Call arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// Subject (tenant) the call is made for; scopes standing grants.
    #[arg(long)]
    pub subject: Option<String>,
    /// Evaluate as of this RFC 3339 instant instead of now.
    #[arg(long)]
    pub now: Option<String>,
    /// YAML or JSON list of the run's earlier calls
    /// (`[{tool, action?, args, provenance?}]`), decided in order: the
    /// allowed ones set the flow labels this call is decided with.
    #[arg(long)]
    pub history: Option<PathBuf>,
}

/// Loads and compiles a profile file.
pub fn load_profile(path: &std::path::Path) -> Result<CompiledPolicy, CliError> {
    Ok(toolgate_policy::compile_manifest(&read_text(path)?)?)
}

/// Parses `--args` as a JSON object.
pub fn parse_arguments(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, CliError> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(other) => Err(PolicyError::InvalidArguments(format!(
            "expected a JSON object, got {}",
            json_kind(&other)
        ))
        .into()),
        Err(e) => Err(PolicyError::InvalidArguments(format!("not valid JSON: {e}")).into()),
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Parses `--now`, defaulting to the current time.
pub fn parse_now(now: Option<&str>) -> Result<jiff::Timestamp, CliError> {
    match now {
        None => Ok(jiff::Timestamp::now()),
        Some(text) => text.parse().map_err(|e| {
            CliError::Usage(format!("--now `{text}` is not an RFC 3339 timestamp: {e}"))
        }),
    }
}

/// Runs `toolgate check`.
pub fn run(args: CheckArgs) -> Result<ExitCode, CliError> {
    let now = parse_now(args.now.as_deref())?;
    let policy = match (&args.profile, &args.bundle, &args.trust) {
        (Some(profile), None, None) => load_profile(profile)?,
        (None, Some(bundle), Some(trust)) => {
            // The bundle's own clock check uses the same instant the call is
            // evaluated at, so `--now` moves both together.
            crate::cmd::bundle::verify_file(
                bundle,
                trust,
                &toolgate_bundle::VerifyOptions::at(now),
            )?
            .into_policy()
        }
        _ => {
            return Err(CliError::Usage(
                "pass either --profile FILE or --bundle FILE --trust FILE".into(),
            ));
        }
    };
    let arguments = parse_arguments(&args.args)?;
    let history: Vec<toolgate_policy::PastCall> = match &args.history {
        Some(path) => toolgate_policy::load::from_str(&read_text(path)?)?,
        None => Vec::new(),
    };
    let ctx = Context {
        subject: args.subject.as_deref(),
        ..Context::at(now)
    };
    let labels = policy.labels_after(&history, &ctx);
    let verdict = policy.evaluate(
        &Call {
            tool: &args.tool,
            action: args.action.as_deref(),
            arguments: &arguments,
        },
        &Context { labels, ..ctx },
    );
    outln!(
        "{}",
        serde_json::to_string_pretty(&verdict).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
