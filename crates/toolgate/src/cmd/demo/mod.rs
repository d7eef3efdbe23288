//! `toolgate demo`: the whole flow on the embedded default, no cluster and no
//! database server: the example profiles' policy table, then a real sidecar
//! on a temporary SQLite database, driven over HTTP by a scripted agent.

mod agent;
mod script;

use std::process::ExitCode;

use clap::Args;
use serde_json::Value;
use toolgate_bundle::{BundleInput, ProfileRef, SigningKey};
use toolgate_sidecar::{Sidecar, SidecarConfig};

use self::agent::{Agent, Demo, demo_mcp_server};
use self::script::{Check, Memory, RUN, SCRIPT, TENANT, check};

use crate::cli_error::CliError;
use crate::cmd::test::{case_passes, evaluate_case, parse_cases};

/// Arguments of `toolgate demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Only print the policy table; do not start a sidecar.
    #[arg(long)]
    pub table_only: bool,
}

/// The example profiles and their cases, compiled into the binary so the
/// demo runs from any directory.
pub const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "safe-coding",
        include_str!("../../../../../examples/profiles/safe-coding.yaml"),
        include_str!("../../../../../examples/cases/safe-coding.yaml"),
    ),
    (
        "read-only",
        include_str!("../../../../../examples/profiles/read-only.yaml"),
        include_str!("../../../../../examples/cases/read-only.yaml"),
    ),
];

/// Runs `toolgate demo`.
pub fn run(args: DemoArgs) -> Result<ExitCode, CliError> {
    let unexpected = policy_table()?;
    if args.table_only {
        return Ok(exit(unexpected == 0));
    }
    let session_ok = crate::runtime()?.block_on(session())?;
    Ok(exit(unexpected == 0 && session_ok))
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn policy_table() -> Result<usize, CliError> {
    let now = jiff::Timestamp::now();
    let mut rows = vec![
        [
            "PROFILE",
            "TOOL",
            "ARGUMENTS",
            "VERDICT",
            "REASON",
            "MATCHED RULE",
        ]
        .map(str::to_owned),
    ];
    let mut unexpected = 0;
    outln!("== Policy: the example calls against the example profiles\n");
    for (name, profile, cases) in EXAMPLES {
        let policy = toolgate_policy::compile_manifest(profile)?;
        outln!("{name}: {}", policy.version().version);
        for case in parse_cases(cases)? {
            let verdict = evaluate_case(&policy, &case, now);
            if !case_passes(&case, &verdict) {
                unexpected += 1;
            }
            rows.push([
                (*name).to_owned(),
                case.tool.clone(),
                truncate(&Value::Object(case.args.clone()).to_string(), 48),
                verdict.verdict.as_str().to_owned(),
                verdict.reason.as_str().to_owned(),
                verdict.matched_rule.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    outln!();
    print_table(&rows);
    outln!(
        "\n{} calls evaluated, {unexpected} differed from the example cases",
        rows.len() - 1
    );
    Ok(unexpected)
}

/// Prints one `ok` / `FAIL` line and folds it into the session's outcome.
fn report(ok: &mut bool, check: &Check) {
    let mark = if check.passed { "ok  " } else { "FAIL" };
    outln!("   {mark} {}", check.line);
    *ok &= check.passed;
}

/// A scripted agent session against a live sidecar. Returns whether every
/// step behaved as the script expects.
async fn session() -> Result<bool, CliError> {
    let dir = tempfile::tempdir().map_err(|source| CliError::Io {
        path: "temporary directory".into(),
        source,
    })?;
    let (upstream, upstream_calls) = demo_mcp_server().await?;
    let sidecar = start_sidecar(dir.path(), upstream).await?;
    let store = sidecar.store().clone();
    let demo = Demo {
        agent: Agent {
            http: reqwest::Client::new(),
            base: format!("http://{}", sidecar.addr),
        },
        store: store.clone(),
        workspace: dir.path().join("workspaces").join(TENANT).join(RUN),
        upstream_calls,
    };
    outln!(
        "\n== Session: a scripted agent talks to a sidecar on {} (SQLite: {})\n",
        sidecar.addr,
        dir.path().join("toolgate.db").display()
    );
    let mut ok = true;
    let mut memory = Memory::default();
    for step in SCRIPT {
        if let Some(scene) = step.scene {
            outln!("{scene}");
        }
        let answer = demo.perform((step.act)(&memory), &mut memory).await?;
        memory.learn(&answer);
        if let Some(judge) = step.check {
            report(&mut ok, &judge(&answer, &memory));
        }
    }

    sidecar.shutdown().await;
    outln!("\n== Audit: the decision log");
    let reports = store.decisions().verify(Some(TENANT)).await?;
    for r in &reports {
        outln!(
            "   tenant {} stream {}: {} decisions, chain {}",
            r.tenant,
            r.stream,
            r.rows,
            if r.ok { "verified" } else { "BROKEN" }
        );
    }
    let intact = reports.len() == 1 && reports[0].ok && reports[0].rows == 13;
    report(
        &mut ok,
        &check(
            intact,
            "all 13 decisions (workspace and MCP calls too), denials included, are in an intact hash chain",
        ),
    );
    let outcome = if ok {
        "behaved as scripted"
    } else {
        "had failures"
    };
    outln!("\nsession {outcome}");
    Ok(ok)
}

/// Signs the first example profile (plus the demo MCP server) into a
/// bundle and starts a sidecar on it, on SQLite and a free port in `dir`.
async fn start_sidecar(
    dir: &std::path::Path,
    upstream: std::net::SocketAddr,
) -> Result<Sidecar, CliError> {
    let key = SigningKey::generate();
    let mut manifest = toolgate_policy::load::parse_manifest(EXAMPLES[0].1)?;
    with_demo_mcp_server(&mut manifest.spec)?;
    let now = jiff::Timestamp::now();
    let (_, envelope) = toolgate_bundle::build(
        BundleInput {
            profile: ProfileRef {
                name: manifest.metadata.name.clone(),
                namespace: manifest.metadata.namespace.clone(),
            },
            spec: manifest.spec,
            grants: vec![],
            sequence: 1,
            issued_at: now,
            expires_at: now + jiff::SignedDuration::from_hours(1),
        },
        &key,
    )?;
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .map(|()| path)
            .map_err(|source| CliError::Io {
                path: name.into(),
                source,
            })
    };
    let bundle = write("bundle.json", &envelope)?;
    let trust = write("trust.pem", key.public_key().to_spki_pem()?.as_bytes())?;
    let database = format!("sqlite://{}?mode=rwc", dir.join("toolgate.db").display());
    let mut config = SidecarConfig::new(bundle, trust, database);
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.workspace_base = dir.join("workspaces");
    config.tenant = TENANT.into();
    config.mcp_upstreams = vec![(
        "tickets".into(),
        format!("http://localhost:{}/mcp", upstream.port()),
    )];
    Ok(Sidecar::start(config).await?)
}

/// The demo's MCP server `tickets`: declared in the profile (search
/// allowed, closing a `PROD-*` ticket denied), reached through the sidecar.
fn with_demo_mcp_server(spec: &mut toolgate_policy::PolicySpec) -> Result<(), CliError> {
    let extra: toolgate_policy::PolicySpec = toolgate_policy::load::from_str(
        "{mode: rules, rules: {tickets.search: {allow: ['*']}, \
          tickets.close: {deny: ['PROD-*'], allow: ['*']}}, \
          egress: {allowHosts: [localhost]}, \
          effects: {tickets.search: {sideEffect: NONE, risk: low, readOnly: true}, \
                    tickets.close: {sideEffect: EXTERNAL_WRITE, risk: write}}}",
    )?;
    spec.rules.extend(extra.rules);
    spec.effects.extend(extra.effects);
    // The gateway checks the address it connects to against the hardline
    // ranges: a profile whose MCP server listens on loopback (as the demo's
    // does) cannot hardline loopback as well.
    if let Some(hardline) = spec.hardline.as_mut() {
        hardline.cidrs.retain(|c| c != "127.0.0.0/8");
    }
    let egress = spec.egress.get_or_insert_with(Default::default);
    egress
        .allow_hosts
        .extend(extra.egress.map(|e| e.allow_hosts).unwrap_or_default());
    Ok(())
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
        outln!("{}", line.join("  ").trim_end());
    }
}
