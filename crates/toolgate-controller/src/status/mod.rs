//! `kubectl toolgate status`: is toolgate installed and working? One line
//! per check, `ok`, `warn` or `FAIL`, and a non-zero exit when any fails.
//!
//! - the two CRDs are installed and their schema and printer columns are
//!   those this build generates;
//! - a controller replica holds the leader Lease and renews it;
//! - the inject webhook is registered with a CA bundle that has not
//!   expired, answers `/healthz`, and (with `--webhook-url`) presents a
//!   serving certificate that chains to that CA, names the Service and has
//!   not expired;
//! - the trust ConfigMap is published (controller namespace and every
//!   namespace that holds a profile);
//! - every PolicyProfile is Valid and Ready, its bundle is not about to
//!   expire, and its fleet (pods current / stale).

use std::fmt;
use std::io::Write;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{CustomResourceExt, ResourceExt};

use crate::crd::{Approval, ConditionType, PolicyProfile};
use crate::error::ControllerError;

mod webhook;
#[cfg(test)]
use webhook::url_authority;
use webhook::webhook;

/// Arguments of `status`.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// Namespace toolgate is installed in (its Lease and trust ConfigMap).
    #[arg(long, default_value = "toolgate-system")]
    pub controller_namespace: String,
    /// Reach the webhook here instead of through the API server's service
    /// proxy (e.g. `https://127.0.0.1:8443` after `kubectl port-forward`):
    /// then its serving certificate is checked against the registered CA.
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// A bundle expiring sooner than this many hours is a failure.
    #[arg(long, default_value_t = 2)]
    pub expiry_hours: i64,
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Fine.
    Ok,
    /// Worth a look; does not fail the command.
    Warn,
    /// Broken; the command exits non-zero.
    Fail,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        })
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Its outcome.
    pub level: Level,
    /// What was checked.
    pub what: String,
    /// What was found.
    pub detail: String,
}

fn check(level: Level, what: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        level,
        what: what.into(),
        detail: detail.into(),
    }
}

/// Runs every check and writes the report; `Err` when one failed.
pub async fn run(
    client: &kube::Client,
    args: &StatusArgs,
    out: &mut dyn Write,
) -> Result<(), ControllerError> {
    let now = Timestamp::now();
    let mut checks = Vec::new();
    checks.extend(crds(client).await);
    checks.push(leader(client, &args.controller_namespace, now).await);
    checks.extend(webhook(client, args, now).await);
    let profiles = match Api::<PolicyProfile>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            checks.push(check(
                Level::Fail,
                "PolicyProfiles",
                format!("cannot list: {e}"),
            ));
            Vec::new()
        }
    };
    let mut namespaces: Vec<String> = profiles.iter().filter_map(|p| p.namespace()).collect();
    namespaces.push(args.controller_namespace.clone());
    namespaces.sort();
    namespaces.dedup();
    for ns in &namespaces {
        checks.push(trust(client, ns).await);
    }
    if profiles.is_empty() {
        checks.push(check(Level::Warn, "PolicyProfiles", "none in the cluster"));
    }
    for p in &profiles {
        checks.push(profile(
            p,
            now,
            SignedDuration::from_hours(args.expiry_hours),
        ));
    }
    let io = |e: std::io::Error| ControllerError::Io(e.to_string());
    let width = checks.iter().map(|c| c.what.len()).max().unwrap_or(0);
    for c in &checks {
        writeln!(out, "{}  {:width$}  {}", c.level, c.what, c.detail).map_err(io)?;
    }
    let failed = checks.iter().filter(|c| c.level == Level::Fail).count();
    if failed > 0 {
        writeln!(out, "\n{failed} check(s) failed").map_err(io)?;
        return Err(ControllerError::InvalidObject(format!(
            "toolgate status: {failed} check(s) failed"
        )));
    }
    writeln!(out, "\ntoolgate is healthy").map_err(io)?;
    Ok(())
}

/// What of a CRD must match the generated one: per version, the schema and
/// the printer columns (the API server adds defaults elsewhere).
fn crd_fingerprint(crd: &CustomResourceDefinition) -> serde_json::Value {
    serde_json::Value::Array(
        crd.spec
            .versions
            .iter()
            .map(|v| {
                let columns: Vec<_> = v
                    .additional_printer_columns
                    .iter()
                    .flatten()
                    .map(|c| (c.name.clone(), c.json_path.clone()))
                    .collect();
                serde_json::json!({
                    "name": v.name,
                    "schema": v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()),
                    "columns": columns,
                })
            })
            .collect(),
    )
}

async fn crds(client: &kube::Client) -> Vec<Check> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut checks = Vec::new();
    for want in [
        PolicyProfile::crd(),
        Approval::crd(),
        crate::cancellation::RunCancellation::crd(),
    ] {
        let name = want.name_any();
        let what = format!("CRD {name}");
        checks.push(match api.get_opt(&name).await {
            Ok(Some(have)) if crd_fingerprint(&have) == crd_fingerprint(&want) => {
                check(Level::Ok, what, "installed and current")
            }
            Ok(Some(_)) => check(
                Level::Fail,
                what,
                "installed but differs from this version's (apply charts/toolgate/crds/)",
            ),
            Ok(None) => check(Level::Fail, what, "not installed"),
            Err(e) => check(Level::Fail, what, format!("cannot read: {e}")),
        });
    }
    checks
}

async fn leader(client: &kube::Client, namespace: &str, now: Timestamp) -> Check {
    let what = "controller leader";
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = match api.get_opt(crate::leader::LEASE_NAME).await {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            return check(
                Level::Fail,
                what,
                format!(
                    "no Lease {namespace}/{}: is the controller running?",
                    crate::leader::LEASE_NAME
                ),
            );
        }
        Err(e) => return check(Level::Fail, what, format!("cannot read the Lease: {e}")),
    };
    let spec = lease.spec.unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    let renewed = spec
        .renew_time
        .and_then(|t| t.0.to_string().parse::<Timestamp>().ok());
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    match renewed {
        _ if holder.is_empty() => check(Level::Fail, what, "the Lease has no holder"),
        Some(at) if at + duration >= now => check(
            Level::Ok,
            what,
            format!("{holder} (renewed {}s ago)", (now - at).get_seconds()),
        ),
        Some(at) => check(
            Level::Fail,
            what,
            format!(
                "{holder} stopped renewing {}s ago",
                (now - at).get_seconds()
            ),
        ),
        None => check(
            Level::Fail,
            what,
            format!("{holder} never renewed the Lease"),
        ),
    }
}

async fn trust(client: &kube::Client, namespace: &str) -> Check {
    let what = format!("trust ConfigMap {namespace}");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(crate::keys::TRUST_CONFIGMAP).await {
        Ok(Some(cm)) => {
            let keys = cm
                .data
                .as_ref()
                .and_then(|d| d.get("trust.pem"))
                .map(|pem| pem.matches("BEGIN PUBLIC KEY").count())
                .unwrap_or(0);
            if keys == 0 {
                check(Level::Fail, what, "holds no public key under trust.pem")
            } else {
                check(Level::Ok, what, format!("{keys} key(s)"))
            }
        }
        Ok(None) => check(
            Level::Fail,
            what,
            format!(
                "{} missing: sidecars cannot verify bundles",
                crate::keys::TRUST_CONFIGMAP
            ),
        ),
        Err(e) => check(Level::Fail, what, format!("cannot read: {e}")),
    }
}

/// The line of one profile: validity, readiness, bundle expiry and fleet,
/// and what its shadowed candidate decided otherwise (a `warn` when it
/// disagrees or could not be shadowed: promoting it would change those
/// calls).
pub fn profile(p: &PolicyProfile, now: Timestamp, margin: SignedDuration) -> Check {
    let mut line = profile_bundle(p, now, margin);
    let status = p.status.clone().unwrap_or_default();
    if let Some(first) = status.warnings.first() {
        line.detail = format!(
            "{}; {} analysis warning(s), first: {first}",
            line.detail,
            status.warnings.len()
        );
    }
    if let Some(c) = status.condition(ConditionType::CandidateDisagrees) {
        line.detail = format!("{}; {}", line.detail, c.message);
        if c.status != "False" && line.level == Level::Ok {
            line.level = Level::Warn;
        }
    }
    line
}

fn profile_bundle(p: &PolicyProfile, now: Timestamp, margin: SignedDuration) -> Check {
    let what = format!(
        "profile {}/{}",
        p.namespace().unwrap_or_default(),
        p.name_any()
    );
    let status = p.status.clone().unwrap_or_default();
    let fleet = status.fleet.unwrap_or_default();
    let fleet_text = format!("pods {} current / {} stale", fleet.current, fleet.stale);
    let expires = status
        .expires_at
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok());
    if let Some(valid) = status
        .condition(ConditionType::Valid)
        .filter(|c| c.status != "True")
    {
        return check(
            Level::Fail,
            what,
            format!("invalid spec: {} ({fleet_text})", valid.message),
        );
    }
    match status.condition(ConditionType::Ready) {
        Some(c) if c.status == "True" => {}
        Some(c) => {
            return check(
                Level::Fail,
                what,
                format!("not ready: {} {}", c.reason, c.message),
            );
        }
        None => return check(Level::Fail, what, "not reconciled yet (no Ready condition)"),
    }
    let version = status.version.unwrap_or_default();
    match expires {
        Some(t) if t <= now => check(
            Level::Fail,
            what,
            format!("{version}: bundle expired at {t}"),
        ),
        Some(t) if t <= now + margin => check(
            Level::Fail,
            what,
            format!("{version}: bundle expires at {t}, not re-signed ({fleet_text})"),
        ),
        Some(t) if fleet.stale > 0 => check(
            Level::Warn,
            what,
            format!("{version}, expires {t}; {fleet_text}"),
        ),
        Some(t) => check(
            Level::Ok,
            what,
            format!("{version}, expires {t}; {fleet_text}"),
        ),
        None => check(
            Level::Fail,
            what,
            "ready but no bundle expiry in its status",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Condition, FleetStatus, PolicyProfileSpec, PolicyProfileStatus};

    fn with_status(status: PolicyProfileStatus) -> PolicyProfile {
        let spec: PolicyProfileSpec = serde_json::from_value(serde_json::json!({
            "mode": "allowAll", "effects": {}
        }))
        .unwrap();
        let mut p = PolicyProfile::new("coding", spec);
        p.metadata.namespace = Some("agents".into());
        p.status = Some(status);
        p
    }

    fn cond(kind: &str, status: &str, message: &str) -> Condition {
        Condition {
            type_: kind.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
            observed_generation: None,
        }
    }

    #[test]
    fn webhook_urls_are_probed_at_their_authority() {
        let got = |url| url_authority(url).map(|(b, h)| format!("{b} {h}"));
        let ip = "https://127.0.0.1:9443 127.0.0.1";
        assert_eq!(
            got("https://127.0.0.1:9443/mutate-pods").as_deref(),
            Some(ip)
        );
        let named = "https://hooks.example.com:443 hooks.example.com";
        assert_eq!(
            got("https://hooks.example.com/x?y=1").as_deref(),
            Some(named)
        );
        let v6 = "https://[::1]:8443 ::1";
        assert_eq!(got("https://[::1]:8443/validate").as_deref(), Some(v6));
        assert_eq!(got("http://127.0.0.1:80/plain"), None);
        assert_eq!(got("https:///nohost"), None);
    }

    #[test]
    fn profile_lines_fail_on_invalid_unready_or_expiring_and_warn_on_stale() {
        let now: Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
        let margin = SignedDuration::from_hours(2);
        let healthy = PolicyProfileStatus {
            version: Some("coding@abc".into()),
            expires_at: Some("2026-06-02T00:00:00Z".into()),
            fleet: Some(FleetStatus {
                current: 3,
                stale: 0,
                total: 3,
            }),
            conditions: vec![cond("Valid", "True", ""), cond("Ready", "True", "")],
            ..Default::default()
        };
        let line = profile(&with_status(healthy.clone()), now, margin);
        assert_eq!(line.level, Level::Ok, "{line:?}");
        assert!(line.detail.contains("3 current / 0 stale"), "{line:?}");

        let mut stale = healthy.clone();
        stale.fleet = Some(FleetStatus {
            current: 1,
            stale: 2,
            total: 3,
        });
        assert_eq!(profile(&with_status(stale), now, margin).level, Level::Warn);

        let mut invalid = healthy.clone();
        invalid.conditions[0] = cond("Valid", "False", "profile_invalid_glob at rules.bash");
        let line = profile(&with_status(invalid), now, margin);
        assert_eq!(line.level, Level::Fail);
        assert!(line.detail.contains("profile_invalid_glob"), "{line:?}");

        let mut expiring = healthy.clone();
        expiring.expires_at = Some("2026-06-01T13:00:00Z".into());
        assert_eq!(
            profile(&with_status(expiring), now, margin).level,
            Level::Fail
        );

        let mut unready = healthy;
        unready.conditions[1] = cond("Ready", "False", "no bundle");
        assert_eq!(
            profile(&with_status(unready), now, margin).level,
            Level::Fail
        );
        assert_eq!(
            profile(&with_status(PolicyProfileStatus::default()), now, margin).level,
            Level::Fail
        );
    }

    #[test]
    fn a_crd_is_current_only_with_this_builds_schema_and_columns() {
        let want = PolicyProfile::crd();
        assert_eq!(crd_fingerprint(&want), crd_fingerprint(&want.clone()));
        let mut older = want.clone();
        older.spec.versions[0].additional_printer_columns = None;
        assert_ne!(crd_fingerprint(&older), crd_fingerprint(&want));
        assert_ne!(crd_fingerprint(&Approval::crd()), crd_fingerprint(&want));
    }
}
