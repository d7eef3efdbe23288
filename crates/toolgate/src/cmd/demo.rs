//! `toolgate demo`: the example calls against the example profiles.

use std::process::ExitCode;

use clap::Args;

use crate::cli_error::CliError;
use crate::cmd::test::{case_passes, evaluate_case, parse_cases};

/// Arguments of `toolgate demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {}

/// The example profiles and their cases, compiled into the binary so the
/// demo runs from any directory.
pub const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "safe-coding",
        include_str!("../../../../examples/profiles/safe-coding.yaml"),
        include_str!("../../../../examples/cases/safe-coding.yaml"),
    ),
    (
        "read-only",
        include_str!("../../../../examples/profiles/read-only.yaml"),
        include_str!("../../../../examples/cases/read-only.yaml"),
    ),
];

/// Runs `toolgate demo`.
pub fn run(_args: DemoArgs) -> Result<ExitCode, CliError> {
    let now = jiff::Timestamp::now();
    let mut rows = vec![[
        "PROFILE".to_owned(),
        "TOOL".to_owned(),
        "ARGUMENTS".to_owned(),
        "VERDICT".to_owned(),
        "REASON".to_owned(),
        "MATCHED RULE".to_owned(),
    ]];
    let mut unexpected = 0;
    for (name, profile, cases) in EXAMPLES {
        let policy = toolgate_policy::compile_manifest(profile)?;
        println!("{name}: {}", policy.version().version);
        for case in parse_cases(cases)? {
            let verdict = evaluate_case(&policy, &case, now);
            if !case_passes(&case, &verdict) {
                unexpected += 1;
            }
            rows.push([
                (*name).to_owned(),
                case.tool.clone(),
                truncate(&serde_json::Value::Object(case.args.clone()).to_string(), 48),
                verdict.verdict.as_str().to_owned(),
                verdict.reason.as_str().to_owned(),
                verdict.matched_rule.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    println!();
    print_table(&rows);
    println!();
    println!(
        "{} calls evaluated, {unexpected} differed from the example cases",
        rows.len() - 1
    );
    Ok(if unexpected == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

fn print_table<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
