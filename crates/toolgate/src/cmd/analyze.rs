//! `toolgate analyze`: dead and loosening rules of one profile, or how a
//! new profile decides differently from an old one (issue #48 part 5).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, ValueEnum};
use toolgate_policy::analyze::{Analysis, Comparison, Severity, analyze, compare};

use crate::cli_error::CliError;
use crate::cmd::check::load_profile;

/// Exit code when the profile has an error-level finding.
const EXIT_FINDINGS: u8 = 3;

/// Arguments of `toolgate analyze`: one profile, or two to compare.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("input").required(true).args(["profile", "compare"])))]
pub struct AnalyzeArgs {
    /// PolicyProfile manifest to analyze (YAML or JSON).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Compare two manifests: OLD then NEW.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"])]
    pub compare: Option<Vec<PathBuf>>,
    /// `table` for people, `json` for one JSON document.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// One JSON document.
    Json,
}

/// Runs `toolgate analyze`: exit 0, or 3 when `--profile` has an
/// error-level finding; bad input fails as other commands do.
pub fn run(args: AnalyzeArgs) -> Result<ExitCode, CliError> {
    if let Some(paths) = &args.compare {
        let [old, new] = paths.as_slice() else {
            return Err(CliError::Usage("--compare takes OLD and NEW".into()));
        };
        let comparison = compare(&load_profile(old)?, &load_profile(new)?);
        match args.format {
            Format::Json => outln!(
                "{}",
                serde_json::to_string_pretty(&comparison).unwrap_or_default()
            ),
            Format::Table => print_comparison(&comparison),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(path) = &args.profile else {
        return Err(CliError::Usage(
            "pass --profile FILE or --compare OLD NEW".into(),
        ));
    };
    let analysis = analyze(&load_profile(path)?);
    match args.format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&analysis).unwrap_or_default()
        ),
        Format::Table => print_analysis(&analysis),
    }
    Ok(if analysis.has_errors() {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    })
}

/// The wire name of a unit enum value (`error`, `more_permissive`).
fn wire_name(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn print_analysis(analysis: &Analysis) {
    if analysis.findings.is_empty() {
        outln!("{}: no findings", analysis.profile);
        return;
    }
    let rows: Vec<[String; 5]> = analysis
        .findings
        .iter()
        .map(|f| {
            [
                wire_name(f.severity),
                f.code.to_owned(),
                f.tool.clone().unwrap_or_else(|| "-".into()),
                f.field.clone(),
                f.message.clone(),
            ]
        })
        .collect();
    print_rows(["SEVERITY", "CODE", "TOOL", "FIELD", "MESSAGE"], &rows);
    let errors = analysis
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    outln!(
        "{}: {errors} error(s), {} other finding(s)",
        analysis.profile,
        analysis.findings.len() - errors
    );
}

fn print_comparison(comparison: &Comparison) {
    let mut rows = Vec::new();
    for tool in &comparison.tools {
        let relation = wire_name(tool.relation);
        if tool.witnesses.is_empty() {
            rows.push([tool.tool.clone(), relation.clone(), "-".into()]);
        }
        for (i, w) in tool.witnesses.iter().enumerate() {
            let shown = format!(
                "{:?} was {} ({}), is {} ({}){}",
                w.argument,
                w.old.as_str(),
                w.old_reason.as_str(),
                w.new.as_str(),
                w.new_reason.as_str(),
                if w.reproduced {
                    ""
                } else {
                    " [not reproduced]"
                }
            );
            let (name, relation) = if i == 0 {
                (tool.tool.clone(), relation.clone())
            } else {
                (String::new(), String::new())
            };
            rows.push([name, relation, shown]);
        }
    }
    outln!("{} -> {}", comparison.old, comparison.new);
    print_rows(["TOOL", "RELATION", "WITNESS"], &rows);
}

/// Prints `rows` under `header`, every column but the last padded.
fn print_rows<const N: usize>(header: [&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        outln!("{}", out.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
