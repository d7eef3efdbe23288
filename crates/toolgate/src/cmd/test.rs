//! `toolgate test`: policy test cases, the `opa test` of toolgate.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Deserialize;
use toolgate_policy::{
    Call, CompiledPolicy, Context, Decision, PastCall, Provenance, Reason, Verdict,
};

use crate::cli_error::{CliError, read_text};
use crate::cmd::check::{load_profile, parse_now};

/// Arguments of `toolgate test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// PolicyProfile manifest the cases run against.
    #[arg(long)]
    pub profile: PathBuf,
    /// YAML or JSON list of cases: `[{name, tool, action?, args, expect,
    /// reason?, would_verdict?, would_reason?, history?, provenance?}]`.
    pub cases: PathBuf,
    /// Evaluate as of this RFC 3339 instant instead of now.
    #[arg(long)]
    pub now: Option<String>,
}

/// One expected outcome.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Shown in failures.
    pub name: String,
    /// Tool as the agent calls it.
    pub tool: String,
    /// Optional action.
    #[serde(default)]
    pub action: Option<String>,
    /// Call arguments.
    #[serde(default)]
    pub args: serde_json::Map<String, serde_json::Value>,
    /// Expected verdict.
    pub expect: Decision,
    /// Expected reason, when the case pins it.
    #[serde(default)]
    pub reason: Option<Reason>,
    /// Subject the call is made for.
    #[serde(default)]
    pub subject: Option<String>,
    /// Under `warn` or `dryRun`: what enforcement would have answered.
    /// Pinning it on an enforced verdict fails the case.
    #[serde(default)]
    pub would_verdict: Option<Decision>,
    /// Under `warn` or `dryRun`: why enforcement would have answered so.
    #[serde(default)]
    pub would_reason: Option<Reason>,
    /// Earlier calls of the same run (`[{tool, action?, args, provenance?}]`),
    /// decided in order: the allowed ones set the flow labels this call sees.
    #[serde(default)]
    pub history: Vec<PastCall>,
    /// For a workspace read: the provenance of the file read.
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

/// Parses a case file strictly. A field no case defines is the case
/// file's fault, not the profile's: `case_unknown_field`.
pub fn parse_cases(text: &str) -> Result<Vec<Case>, CliError> {
    toolgate_policy::load::from_str(text).map_err(|e| match e {
        toolgate_policy::PolicyError::UnknownField { field, name } => {
            CliError::CaseUnknownField { field, name }
        }
        other => other.into(),
    })
}

/// Evaluates one case.
pub fn evaluate_case(policy: &CompiledPolicy, case: &Case, now: jiff::Timestamp) -> Verdict {
    let ctx = Context {
        subject: case.subject.as_deref(),
        ..Context::at(now)
    };
    let labels = policy.labels_after(&case.history, &ctx);
    policy.evaluate(
        &Call {
            tool: &case.tool,
            action: case.action.as_deref(),
            arguments: &case.args,
        },
        &Context {
            labels,
            provenance: case.provenance,
            ..ctx
        },
    )
}

/// True when the verdict is what the case expects.
pub fn case_passes(case: &Case, verdict: &Verdict) -> bool {
    verdict.verdict == case.expect
        && case.reason.is_none_or(|r| r == verdict.reason)
        && case
            .would_verdict
            .is_none_or(|w| Some(w) == verdict.would_verdict)
        && case
            .would_reason
            .is_none_or(|w| Some(w) == verdict.would_reason)
}

/// Runs `toolgate test`.
pub fn run(args: TestArgs) -> Result<ExitCode, CliError> {
    let policy = load_profile(&args.profile)?;
    let cases = parse_cases(&read_text(&args.cases)?)?;
    let now = parse_now(args.now.as_deref())?;
    let (mut passed, mut failed) = (0usize, 0usize);
    for case in &cases {
        let verdict = evaluate_case(&policy, case, now);
        if case_passes(case, &verdict) {
            passed += 1;
        } else {
            failed += 1;
            let mut expected = match case.reason {
                Some(r) => format!("{} ({})", case.expect.as_str(), r.as_str()),
                None => case.expect.as_str().to_owned(),
            };
            if case.would_verdict.is_some() || case.would_reason.is_some() {
                expected.push_str(&format!(
                    ", would {} ({})",
                    case.would_verdict.map_or("any", Decision::as_str),
                    case.would_reason.map_or("any", Reason::as_str),
                ));
            }
            let would = match (verdict.would_verdict, verdict.would_reason) {
                (Some(v), Some(r)) => format!(", would {} ({})", v.as_str(), r.as_str()),
                _ => String::new(),
            };
            outln!(
                "FAIL {}: expected {expected}, got {} ({}){would}, matched rule {}",
                case.name,
                verdict.verdict.as_str(),
                verdict.reason.as_str(),
                verdict
                    .matched_rule
                    .as_deref()
                    .or(verdict.would_rule.as_deref())
                    .unwrap_or("none"),
            );
        }
    }
    outln!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
