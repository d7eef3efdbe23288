//! The `kubectl toolgate` plugin: answer and list Approvals, cancel runs,
//! `status` ([`crate::status`]) and `replay` ([`replay`]).
//!
//! `kubectl-toolgate` on `PATH` makes `kubectl toolgate …` work. It talks to
//! the cluster of the current kubeconfig context and only ever merge-patches
//! `spec.decision`, `spec.reason` and `spec.decidedBy`; the controller then
//! resolves the database row.

pub mod replay;

use std::io::Write;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::crd::{Approval, Decision};
use crate::error::ControllerError;

/// `kubectl toolgate` commands.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kubectl-toolgate",
    version,
    about = "Answer and list toolgate Approvals, and check the installation"
)]
pub struct PluginCli {
    /// What to do.
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// One plugin command.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Approve an escalated call (or activate a standing grant).
    Approve(DecideArgs),
    /// Deny an escalated call; `--reason` is required.
    Deny(DecideArgs),
    /// List Approvals, with why each request was escalated.
    #[command(visible_alias = "approvals")]
    List(ListArgs),
    /// Cancel an agent run of a namespace: creates a RunCancellation the
    /// controller records; every sidecar then refuses the run's calls.
    Cancel(CancelArgs),
    /// Check the installation: CRDs, controller leader, webhook and its
    /// certificate, trust ConfigMaps, every profile's validity, expiry and
    /// fleet. Exits non-zero when a check fails.
    Status(crate::status::StatusArgs),
    /// Replay the namespace's recorded decisions against a candidate
    /// PolicyProfile file (the database from the namespace's
    /// `toolgate-database` Secret). Exits 0 when no verdict changes, 3 when
    /// one does, 1 on an error.
    Replay(replay::ReplayArgs),
}

/// Arguments of `cancel`: one run, or (a stop the agent cannot step
/// around with a new run id) every run of a pod, a profile or the namespace.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["run_id", "pod", "profile", "all"])))]
pub struct CancelArgs {
    /// The run id the agent sends as `run_id`.
    pub run_id: Option<String>,
    /// Stop every run of this pod.
    #[arg(long)]
    pub pod: Option<String>,
    /// Stop every run of every pod under this profile.
    #[arg(long)]
    pub profile: Option<String>,
    /// Stop every run of the namespace.
    #[arg(long)]
    pub all: bool,
    /// Namespace (tenant) of the run (default: the kubeconfig context's namespace).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Why (recorded, and shown to the agent).
    #[arg(long)]
    pub reason: Option<String>,
    /// Seconds to wait for the controller to record it (0: do not wait).
    #[arg(long, default_value_t = 30)]
    pub wait: u64,
}

/// Arguments of `approve` / `deny`.
#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// Approval object name (e.g. `apr-01j…`).
    pub name: String,
    /// Namespace (default: the kubeconfig context's namespace). Approvals
    /// appear in the namespace of the agent that asked, unless the platform
    /// set up a central queue.
    #[arg(short, long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Find the Approval by name in every namespace you may list (names are
    /// unique per approval id).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Why (recorded with the decision).
    #[arg(long)]
    pub reason: Option<String>,
    /// Who decides (default: the user the API server authenticates you as, from a
    /// SelfSubjectReview; else $KUBECTL_TOOLGATE_USER, else $USER). The validating
    /// webhook refuses a decision whose `decidedBy` is not the requesting user.
    /// When the profile lists `spec.approvals.approvers`, this must be one of them or the
    /// controller leaves the approval pending (`ApproverNotAllowed`). Self-asserted: see
    /// the `approval` module docs.
    #[arg(long)]
    pub by: Option<String>,
    /// Groups to record with `--by` (repeatable); they count for `group:` approvers.
    /// Without `--by`, the groups of the SelfSubjectReview are recorded. The webhook
    /// refuses a group the API server did not authenticate you in.
    #[arg(long = "group")]
    pub groups: Vec<String>,
}

/// Arguments of `list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Namespace (default: the kubeconfig context's namespace).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// `table`, or `json`: the Approval objects as a kubectl `List`, each
    /// request's `spec.request.escalation` (reason, rule, flow labels, run
    /// history) included.
    #[arg(short, long, value_enum, default_value_t = ListOutput::Table)]
    pub output: ListOutput,
}

/// How `list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListOutput {
    /// One line per Approval.
    Table,
    /// The objects as JSON.
    Json,
}

/// The `list -o json` output: the objects as a kubectl `List`.
pub fn render_json(items: &[Approval]) -> String {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let mut out = serde_json::to_string_pretty(&list).unwrap_or_default();
    out.push('\n');
    out
}

/// The merge patch `approve` / `deny` send.
pub fn decision_patch(
    decision: Decision,
    reason: Option<&str>,
    by: Option<&str>,
    groups: &[String],
) -> serde_json::Value {
    let mut spec = serde_json::Map::new();
    spec.insert("decision".into(), decision.as_str().into());
    if let Some(r) = reason {
        spec.insert("reason".into(), r.into());
    }
    if let Some(b) = by.filter(|b| !b.is_empty()) {
        spec.insert("decidedBy".into(), b.into());
        if !groups.is_empty() {
            spec.insert("decidedByGroups".into(), groups.into());
        }
    }
    serde_json::json!({ "spec": spec })
}

/// One line of at most `max` characters: control characters shown as
/// spaces, the cut marked with `…`.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Renders the `list` table.
pub fn render_table(items: &[Approval], now: Timestamp, with_namespace: bool) -> String {
    let mut rows = vec![{
        let mut h = vec![
            "NAME",
            "KIND",
            "TOOL",
            "PHASE",
            "DECISION",
            "PROFILE",
            "REQUESTED BY",
            "AGE",
            "WHY",
            "PREVIEW",
        ];
        if with_namespace {
            h.insert(0, "NAMESPACE");
        }
        h.into_iter().map(String::from).collect::<Vec<_>>()
    }];
    for a in items {
        let status = a.status.clone().unwrap_or_default();
        let (kind, tool, profile, preview) = match (&a.spec.request, &a.spec.grant) {
            (Some(r), _) => (
                "request",
                r.tool.clone(),
                r.profile.clone().unwrap_or_default(),
                match (&r.action, &r.preview) {
                    (Some(action), Some(p)) => format!("{action}: {p}"),
                    (None, Some(p)) => p.clone(),
                    (Some(action), None) => action.clone(),
                    (None, None) => "-".into(),
                },
            ),
            (_, Some(g)) => (
                "grant",
                g.tool.clone(),
                g.profile.clone(),
                format!("{} (subjects {})", g.glob, g.subjects.join(",")),
            ),
            _ => ("?", String::new(), String::new(), String::new()),
        };
        let age = a
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| age(now.duration_since(t.0)))
            .unwrap_or_else(|| "-".into());
        // Why a request was escalated: reason code and rule.
        let why = a
            .spec
            .request
            .as_ref()
            .and_then(|r| r.escalation.as_ref())
            .map_or_else(|| "-".to_owned(), |e| one_line(&e.summary(), 60));
        let mut row = vec![
            a.name_any(),
            kind.into(),
            tool,
            status
                .phase
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "-".into()),
            a.spec
                .decision
                .map(|d| d.as_str().to_owned())
                .unwrap_or_else(|| "-".into()),
            profile,
            status.requested_by.unwrap_or_else(|| "-".into()),
            age,
            why,
            one_line(&preview, 80),
        ];
        if with_namespace {
            row.insert(0, a.namespace().unwrap_or_default());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn age(d: jiff::SignedDuration) -> String {
    let s = d.as_secs().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Runs one plugin command against the current kubeconfig context; returns
/// the exit status (0, or 3 when `replay` finds a changed verdict).
pub async fn run_plugin(cli: PluginCli, out: &mut dyn Write) -> Result<u8, ControllerError> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| ControllerError::Config(e.to_string()))?;
    let io = |e: std::io::Error| ControllerError::Io(e.to_string());
    let done = match cli.command {
        PluginCommand::Replay(args) => return replay::run(&client, args, out).await,
        PluginCommand::Approve(args) => decide(&client, args, Decision::Approved, out).await,
        PluginCommand::Deny(args) => {
            if args.reason.as_deref().is_none_or(str::is_empty) {
                return Err(ControllerError::InvalidObject("deny needs --reason".into()));
            }
            decide(&client, args, Decision::Denied, out).await
        }
        PluginCommand::Cancel(args) => cancel(&client, args, out).await,
        PluginCommand::Status(args) => crate::status::run(&client, &args, out).await,
        PluginCommand::List(args) => {
            let api: Api<Approval> = match (&args.namespace, args.all_namespaces) {
                (_, true) => Api::all(client.clone()),
                (Some(ns), false) => Api::namespaced(client.clone(), ns),
                (None, false) => Api::default_namespaced(client.clone()),
            };
            let mut items = api.list(&ListParams::default()).await?.items;
            items.sort_by_key(|a| (a.namespace(), a.name_any()));
            let text = match args.output {
                ListOutput::Table => render_table(&items, Timestamp::now(), args.all_namespaces),
                ListOutput::Json => render_json(&items),
            };
            write!(out, "{text}").map_err(io)
        }
    };
    done.map(|()| 0)
}

async fn cancel(
    client: &kube::Client,
    args: CancelArgs,
    out: &mut dyn Write,
) -> Result<(), ControllerError> {
    use crate::cancellation::{PHASE_APPLIED, RunCancellation, RunCancellationSpec};
    use toolgate_policy::Stop;
    let api: Api<RunCancellation> = match &args.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::default_namespaced(client.clone()),
    };
    // The run in its canonical spelling: `RUN-1` and `run-1` are one run,
    // so one object; a look-alike is refused here, not left to fail.
    let stop = Stop::named(
        args.run_id.as_deref(),
        args.pod.as_deref(),
        args.profile.as_deref(),
        args.all,
    )
    .map_err(|e| ControllerError::InvalidObject(e.to_string()))?;
    let name = crate::cancellation::stop_object_name(&stop);
    let object = RunCancellation::new(&name, RunCancellationSpec::of(&stop, args.reason.clone()));
    match api.create(&kube::api::PostParams::default(), &object).await {
        Ok(_) => {}
        // Cancelled before: the first request stands.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let io = |e: std::io::Error| ControllerError::Io(e.to_string());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.wait);
    loop {
        let current = api.get(&name).await?;
        let status = current.status.unwrap_or_default();
        if status.phase.as_deref() == Some(PHASE_APPLIED) {
            return writeln!(
                out,
                "runcancellation.toolgate.dev/{name} applied: {stop} cancelled at {}, {} pending approval(s) cancelled",
                status.cancel_requested_at.as_deref().unwrap_or("?"),
                status.approvals_cancelled.unwrap_or(0)
            )
            .map_err(io);
        }
        if std::time::Instant::now() >= deadline {
            if args.wait > 0 {
                return Err(ControllerError::Io(format!(
                    "runcancellation.toolgate.dev/{name} not applied after {}s: {}",
                    args.wait,
                    status
                        .message
                        .as_deref()
                        .unwrap_or("is the controller running?")
                )));
            }
            return writeln!(out, "runcancellation.toolgate.dev/{name} created").map_err(io);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

async fn decide(
    client: &kube::Client,
    args: DecideArgs,
    decision: Decision,
    out: &mut dyn Write,
) -> Result<(), ControllerError> {
    let api: Api<Approval> = match (&args.namespace, args.all_namespaces) {
        (_, true) => {
            let ns = namespace_of(client, &args.name).await?;
            Api::namespaced(client.clone(), &ns)
        }
        (Some(ns), false) => Api::namespaced(client.clone(), ns),
        (None, false) => Api::default_namespaced(client.clone()),
    };
    let current = api.get(&args.name).await?;
    match current.spec.decision {
        Some(d) if d == decision => {
            writeln!(
                out,
                "approval.toolgate.dev/{} already {}",
                args.name,
                d.as_str()
            )
            .map_err(|e| ControllerError::Io(e.to_string()))?;
            return Ok(());
        }
        Some(d) => {
            return Err(ControllerError::InvalidObject(format!(
                "approval {} is already {}; a decision cannot be changed",
                args.name,
                d.as_str()
            )));
        }
        None => {}
    }
    let (by, groups) = match args.by.clone() {
        Some(by) => (Some(by), args.groups.clone()),
        None => match authenticated_user(client).await {
            Some((user, groups)) => (Some(user), groups),
            None => (
                std::env::var("KUBECTL_TOOLGATE_USER")
                    .ok()
                    .or_else(|| std::env::var("USER").ok()),
                args.groups.clone(),
            ),
        },
    };
    let patch = decision_patch(decision, args.reason.as_deref(), by.as_deref(), &groups);
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    writeln!(
        out,
        "approval.toolgate.dev/{} {}",
        args.name,
        decision.as_str()
    )
    .map_err(|e| ControllerError::Io(e.to_string()))
}

/// The one namespace holding an Approval called `name` (a cluster-wide
/// list by field selector, so it needs `list` on Approvals everywhere).
async fn namespace_of(client: &kube::Client, name: &str) -> Result<String, ControllerError> {
    let all: Api<Approval> = Api::all(client.clone());
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let found: Vec<String> = all
        .list_metadata(&params)
        .await?
        .items
        .into_iter()
        .filter_map(|a| a.metadata.namespace)
        .collect();
    match found.as_slice() {
        [ns] => Ok(ns.clone()),
        [] => Err(ControllerError::InvalidObject(format!(
            "no Approval named {name} in any namespace you may list"
        ))),
        many => Err(ControllerError::InvalidObject(format!(
            "Approvals named {name} are in namespaces {}: name one with -n",
            many.join(", ")
        ))),
    }
}

/// The username and groups the API server authenticates this client as
/// (SelfSubjectReview, Kubernetes 1.28+). The validating webhook requires a
/// new decision's `decidedBy` to be exactly this user and its
/// `decidedByGroups` to be among these groups, so they are the right default.
async fn authenticated_user(client: &kube::Client) -> Option<(String, Vec<String>)> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview {
        metadata: Default::default(),
        status: None,
    };
    let review = api
        .create(&kube::api::PostParams::default(), &review)
        .await
        .ok()?;
    let info = review.status?.user_info?;
    let user = info.username.filter(|u| !u.is_empty())?;
    // The CRD admits at most 256 groups; beyond that, the first 256.
    let groups = info
        .groups
        .unwrap_or_default()
        .into_iter()
        .take(256)
        .collect();
    Some((user, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_shape() {
        assert_eq!(
            decision_patch(Decision::Denied, Some("no"), Some("alice"), &[]),
            serde_json::json!({"spec": {"decision": "denied", "reason": "no", "decidedBy": "alice"}})
        );
        assert_eq!(
            decision_patch(Decision::Approved, None, Some("bob"), &["oncall".into()]),
            serde_json::json!({"spec": {"decision": "approved", "decidedBy": "bob", "decidedByGroups": ["oncall"]}})
        );
        assert_eq!(
            decision_patch(Decision::Approved, None, Some(""), &["oncall".into()]),
            serde_json::json!({"spec": {"decision": "approved"}})
        );
        assert_eq!(one_line("a\nb", 10), "a b");
    }

    /// The table's WHY column and the JSON output say why a request was
    /// escalated.
    #[test]
    fn list_shows_the_why() {
        use crate::crd::{ApprovalRequest, ApprovalSpec, Escalation};
        let a = Approval::new(
            "apr-1",
            ApprovalSpec {
                request: Some(ApprovalRequest {
                    approval_id: "1".into(),
                    tenant: "agents".into(),
                    invocation_id: "i".into(),
                    tool: "http.post".into(),
                    args_digest: "sha256:0".into(),
                    call_digest: None,
                    action: None,
                    preview: Some("POST https://example.com".into()),
                    run_id: "r".into(),
                    policy_version: "p@1".into(),
                    profile: Some("p".into()),
                    requested_by: None,
                    escalation: Some(Escalation {
                        decision_id: "d1".into(),
                        reason: "flow_escalate".into(),
                        matched_rule: Some("flow:no-exfil when private".into()),
                        flow_labels: Vec::new(),
                        history: Vec::new(),
                    }),
                }),
                grant: None,
                decision: None,
                reason: None,
                decided_by: None,
                decided_by_groups: None,
            },
        );
        let table = render_table(std::slice::from_ref(&a), Timestamp::now(), false);
        let mut lines = table.lines();
        let header = lines.next().unwrap();
        let row = lines.next().unwrap();
        let at = header.find("WHY").unwrap();
        assert!(
            row[at..].starts_with("flow_escalate (flow:no-exfil when private)"),
            "{table}"
        );
        let json: serde_json::Value = serde_json::from_str(&render_json(&[a])).unwrap();
        let why = &json["items"][0]["spec"]["request"]["escalation"];
        assert_eq!(why["reason"], "flow_escalate");
        assert_eq!(why["matchedRule"], "flow:no-exfil when private");
        assert_eq!(json["items"][0]["spec"]["request"]["policyVersion"], "p@1");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}
