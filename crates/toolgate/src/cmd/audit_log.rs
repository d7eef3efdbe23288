//! `toolgate audit log`: read the decision log, one page at a time, as a
//! table for people or JSON lines for tools, and optionally verify the
//! chain of what it prints.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use jiff::Timestamp;
use toolgate_contract::{InstantError, parse_instant};
use toolgate_policy::{Decision, Reason};
use toolgate_store::{
    ChainReport, DecisionFilter, DecisionPage, LogCursor, LoggedDecision, MAX_QUERY_LIMIT,
};

use crate::cli_error::CliError;

/// Arguments of `toolgate audit log`.
#[derive(Debug, Args)]
pub struct LogArgs {
    #[command(flatten)]
    database: toolgate_sidecar::database::DatabaseArgs,
    /// Only this tenant's decisions (a tenant's own role sees only its
    /// own whatever this says).
    #[arg(long)]
    tenant: Option<String>,
    /// Only this run's.
    #[arg(long)]
    run: Option<String>,
    /// Only calls of this tool (exact name).
    #[arg(long)]
    tool: Option<String>,
    /// Only this verdict: allow, deny or escalate.
    #[arg(long)]
    verdict: Option<String>,
    /// Only this reason code (e.g. deny_rule, flow_rule, approved).
    #[arg(long)]
    reason: Option<String>,
    /// Decided at or after this: an RFC 3339 instant or a duration before
    /// now (`1h`, `7d`).
    #[arg(long)]
    since: Option<String>,
    /// Decided before this (exclusive): an RFC 3339 instant or a duration
    /// before now.
    #[arg(long)]
    until: Option<String>,
    /// Only decisions of this policy version (exact).
    #[arg(long)]
    policy_version: Option<String>,
    /// Rows per page (1 to 10,000).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    limit: u32,
    /// Continue after this cursor (printed at the end of a page, and in
    /// every JSON row).
    #[arg(long)]
    after: Option<String>,
    /// `table` for people, `json` for one JSON object per line.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Verify the chain of every printed row (each stream from the row
    /// before the first printed one to its head); exit 1 when broken.
    #[arg(long)]
    verify: bool,
    /// Only decisions the bundle's shadowed candidate decided differently
    /// from the active policy.
    #[arg(long)]
    shadow_changed: bool,
}

/// Rows per page unless `--limit` says otherwise.
const DEFAULT_LIMIT: u32 = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// Runs `toolgate audit log`: exit 0, or 1 when `--verify` finds a broken
/// chain (2 with an error envelope for bad flags or a failing database).
pub fn run(args: LogArgs) -> Result<ExitCode, CliError> {
    let now = Timestamp::now();
    let filter = filter_of(&args, now)?;
    if !(1..=MAX_QUERY_LIMIT).contains(&args.limit) {
        return Err(CliError::Usage(format!(
            "--limit must be 1 to {MAX_QUERY_LIMIT}, not {}",
            args.limit
        )));
    }
    let after = args
        .after
        .as_deref()
        .map(|c| {
            c.parse::<LogCursor>().map_err(|_| {
                CliError::Usage(format!("--after: `{c}` is not a cursor of `audit log`"))
            })
        })
        .transpose()?;
    crate::runtime()?.block_on(async move {
        let store = args.database.connect().await?;
        let result = async {
            let page = store
                .decisions()
                .query(&filter, after.as_ref(), args.limit)
                .await?;
            let reports = if args.verify {
                let rows: Vec<_> = page.rows.iter().map(|r| r.decision.clone()).collect();
                Some(store.decisions().verify_rows(&rows).await?)
            } else {
                None
            };
            Ok::<_, CliError>((page, reports))
        }
        .await;
        store.close().await;
        let (page, reports) = result?;
        match args.format {
            Format::Table => print_table(&page, reports.as_deref()),
            Format::Json => print_json(&page, reports.as_deref()),
        }
        Ok(match reports {
            Some(r) if r.iter().any(|r| !r.ok) => ExitCode::FAILURE,
            _ => ExitCode::SUCCESS,
        })
    })
}

/// The store's filter from the flags; a value the log cannot hold is a
/// usage error naming the flag and what it takes.
fn filter_of(args: &LogArgs, now: Timestamp) -> Result<DecisionFilter, CliError> {
    let verdict = args
        .verdict
        .as_deref()
        .map(|v| {
            Decision::from_wire(v).ok_or_else(|| {
                CliError::Usage(format!(
                    "--verdict: unknown verdict `{v}` (one of {})",
                    names(Decision::ALL.iter().map(|d| d.as_str()))
                ))
            })
        })
        .transpose()?;
    let reason = args
        .reason
        .as_deref()
        .map(|r| {
            Reason::from_wire(r).ok_or_else(|| {
                CliError::Usage(format!(
                    "--reason: unknown reason `{r}` (one of {})",
                    names(Reason::ALL.iter().map(|r| r.as_str()))
                ))
            })
        })
        .transpose()?;
    Ok(DecisionFilter {
        tenant: args.tenant.clone(),
        run_id: args.run.clone(),
        tool: args.tool.clone(),
        verdict,
        reason,
        policy_version: args.policy_version.clone(),
        since: parse_instant("--since", args.since.as_deref(), now).map_err(usage)?,
        until: parse_instant("--until", args.until.as_deref(), now).map_err(usage)?,
        shadow_changed: args.shadow_changed,
    })
}

fn names<'a>(all: impl Iterator<Item = &'a str>) -> String {
    all.collect::<Vec<_>>().join(", ")
}

/// A bad `--since`/`--until` is a usage error.
pub(crate) fn usage(e: InstantError) -> CliError {
    CliError::Usage(e.to_string())
}

/// One row as a flat JSON object: the record's fields, its chain
/// position and hashes, the labels it set and the cursor after it.
fn json_row(row: &LoggedDecision) -> serde_json::Value {
    let d = &row.decision;
    let mut value = serde_json::to_value(&d.record).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("tenant".into(), d.tenant.clone().into());
        obj.insert("stream".into(), d.stream.clone().into());
        obj.insert("seq".into(), d.seq.into());
        obj.insert("prev_hash".into(), d.prev_hash.clone().into());
        obj.insert("hash".into(), d.hash.clone().into());
        obj.insert("flow_labels_set".into(), row.flow_labels_set.clone().into());
        if let Some(shadow) = &row.shadow {
            obj.insert(
                "shadow".into(),
                serde_json::to_value(shadow).unwrap_or_default(),
            );
        }
        obj.insert("cursor".into(), row.cursor().to_string().into());
    }
    value
}

fn print_json(page: &DecisionPage, reports: Option<&[ChainReport]>) {
    for row in &page.rows {
        outln!("{}", json_row(row));
    }
    if let Some(reports) = reports {
        let ok = reports.iter().all(|r| r.ok);
        outln!(
            "{}",
            serde_json::json!({"verify": {"ok": ok, "chains": reports}})
        );
    }
}

const HEADERS: [&str; 15] = [
    "TIME", "TENANT", "RUN", "STEP", "TOOL", "VERDICT", "REASON", "RULE", "POLICY", "RISK",
    "LABELS", "SHADOW", "DECISION", "STREAM", "SEQ",
];

fn cells(row: &LoggedDecision) -> [String; 15] {
    let (d, r) = (&row.decision, &row.decision.record);
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    [
        format!("{:.3}", r.created_at),
        d.tenant.clone(),
        r.run_id.clone(),
        r.step_id.clone(),
        r.tool.clone(),
        r.verdict.clone(),
        r.reason.clone(),
        or_dash(r.matched_rule.as_deref().unwrap_or_default()),
        r.policy_version.clone(),
        r.risk.clone(),
        or_dash(&row.flow_labels_set.join(",")),
        row.shadow.as_ref().map_or_else(
            || "-".to_owned(),
            |c| format!("{} ({})", c.verdict.as_str(), c.reason.as_str()),
        ),
        r.decision_id.clone(),
        d.stream.clone(),
        d.seq.to_string(),
    ]
}

fn print_table(page: &DecisionPage, reports: Option<&[ChainReport]>) {
    if page.rows.is_empty() {
        outln!("no decisions match");
    } else {
        let rows: Vec<[String; 15]> = page.rows.iter().map(cells).collect();
        let mut widths = HEADERS.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let padded: Vec<String> = cells.zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
            outln!("{}", padded.join("  ").trim_end());
        };
        line(&mut HEADERS.iter().copied());
        for row in &rows {
            line(&mut row.iter().map(String::as_str));
        }
    }
    if let Some(next) = &page.next {
        outln!("more: --after {next}");
    }
    if let Some(reports) = reports {
        let rows: u64 = reports.iter().map(|r| r.rows).sum();
        match reports.iter().filter(|r| !r.ok).collect::<Vec<_>>() {
            broken if broken.is_empty() => outln!(
                "chain: ok ({} streams, {rows} rows through their heads)",
                reports.len()
            ),
            broken => {
                for r in broken {
                    outln!(
                        "chain: BROKEN {}/{} at seq {}: {}",
                        r.tenant,
                        r.stream,
                        r.first_broken_seq.unwrap_or_default(),
                        r.problem.as_deref().unwrap_or("broken")
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_instant_is_a_usage_error_naming_the_flag() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            log: LogArgs,
        }
        let args = |since: &str| {
            let argv = ["log", "--database", "sqlite::memory:", "--since", since];
            <Cli as clap::Parser>::parse_from(argv).log
        };
        let now: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let filter = filter_of(&args("1h"), now).unwrap();
        assert_eq!(filter.since.unwrap().to_string(), "2026-12-06T11:00:00Z");
        assert_eq!(filter.until, None);
        let err = filter_of(&args("yesterday"), now).unwrap_err();
        assert_eq!(err.code(), "usage");
        assert!(
            err.to_string().starts_with("--since: `yesterday` "),
            "{err}"
        );
    }
}
