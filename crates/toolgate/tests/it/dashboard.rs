//! The Grafana dashboard shipped by the chart
//! (`charts/toolgate/dashboards/toolgate.json`) only queries metrics the code
//! really exports, with labels those metrics really carry.
//!
//! Sidecar metrics come from the real registry (`toolgate_sidecar::metrics`):
//! every labelled family is touched once so that `render()` lists it, and the
//! rendered set must equal `METRIC_NAMES`. Controller metrics come from the
//! controller's real registry (`toolgate_controller::metrics`), which
//! pre-initialises every label combination, so its closed label sets (e.g.
//! `phase`) are checked value by value too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use toolgate_sidecar::metrics::{METRIC_NAMES, sidecar_metrics};

/// One exported metric family: its type, and the values of each label in
/// the rendered samples.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Family {
    kind: String,
    labels: BTreeMap<String, BTreeSet<String>>,
}

/// Labels Prometheus attaches to scraped series (target labels, and the
/// PodMonitor's `injected_profile`), not part of the registries.
const TARGET_LABELS: &[&str] = &[
    "namespace",
    "pod",
    "container",
    "instance",
    "job",
    "service",
    "endpoint",
    "injected_profile",
];

/// What the dashboard must show at least (the panels the chart README describes).
const REQUIRED_ON_DASHBOARD: &[&str] = &[
    "toolgate_decisions_total",
    "toolgate_decision_duration_seconds",
    "toolgate_bundle_info",
    "toolgate_approvals",
    "toolgate_intents_total",
    "toolgate_bundle_reload_failures_total",
    "toolgate_decision_log_dropped_total",
    "toolgate_reconcile_total",
    "toolgate_reconcile_errors_total",
];

fn dashboard_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/toolgate/dashboards/toolgate.json")
}

fn dashboard() -> Value {
    let path = dashboard_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every string anywhere in the JSON document.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Occurrences of `toolgate_[a-z_]+` (not preceded by an identifier
/// character), each with the selector text in braces right after it.
fn metric_refs(text: &str) -> Vec<(String, Option<String>)> {
    let bytes = text.as_bytes();
    let mut refs = Vec::new();
    let mut i = 0;
    while let Some(found) = text[i..].find("toolgate_") {
        let start = i + found;
        let preceded = start > 0 && {
            let c = bytes[start - 1];
            c.is_ascii_alphanumeric() || c == b'_'
        };
        let mut end = start + "toolgate_".len();
        while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_') {
            end += 1;
        }
        let followed = end < bytes.len() && bytes[end].is_ascii_alphanumeric();
        if !preceded && !followed && end > start + "toolgate_".len() {
            let selector = text[end..]
                .strip_prefix('{')
                .and_then(|rest| rest.find('}').map(|close| rest[..close].to_owned()));
            refs.push((text[start..end].to_owned(), selector));
        }
        i = end;
    }
    refs
}

/// `(label, op, value)` matchers of a PromQL selector body
/// (`namespace=~"$namespace", phase="Pending"`).
fn matchers(selector: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut rest = selector.trim();
    while !rest.is_empty() {
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = rest[..name_end].to_owned();
        let after = rest[name_end..].trim_start();
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| after.starts_with(op))
            .unwrap_or_else(|| panic!("cannot parse selector `{selector}`"));
        let after = after[op.len()..].trim_start();
        assert!(
            after.starts_with('"'),
            "selector `{selector}`: value must be quoted"
        );
        let close = after[1..]
            .find('"')
            .unwrap_or_else(|| panic!("selector `{selector}`: unterminated value"));
        out.push((name, op.to_owned(), after[1..=close].to_owned()));
        rest = after[close + 2..]
            .trim_start()
            .trim_start_matches(',')
            .trim();
    }
    out
}

/// Families listed in a text exposition: `# TYPE` gives the type, samples
/// give the label names (`le` of buckets excluded).
fn families(exposition: &str) -> BTreeMap<String, Family> {
    let mut out: BTreeMap<String, Family> = BTreeMap::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            out.insert(
                name.to_owned(),
                Family {
                    kind: kind.to_owned(),
                    labels: BTreeMap::new(),
                },
            );
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| sample.strip_suffix(s))
            .find(|base| out.get(*base).is_some_and(|f| f.kind == "histogram"))
            .unwrap_or(sample)
            .to_owned();
        if let Some(body) = line[name_end..]
            .strip_prefix('{')
            .and_then(|b| b.split_once('}'))
            .map(|(b, _)| b)
        {
            let family = out
                .get_mut(&family)
                .unwrap_or_else(|| panic!("sample `{sample}` before its # TYPE line"));
            for (label, _, value) in matchers(body) {
                if label != "le" {
                    family.labels.entry(label).or_default().insert(value);
                }
            }
        }
    }
    out
}

/// The sidecar's registry with every labelled family touched once.
fn sidecar_families() -> BTreeMap<String, Family> {
    let m = sidecar_metrics();
    m.decisions
        .with_label_values(&["allow", "allow_rule", "bash", "safe-coding", "true"])
        .inc();
    m.decision_duration
        .with_label_values(&["high"])
        .observe(0.000_3);
    m.bundle_info
        .with_label_values(&["safe-coding@0123456789ab+h01234567", "safe-coding"])
        .set(1);
    m.bundle_expiry
        .with_label_values(&["safe-coding"])
        .set(1.9e9);
    m.bundle_reload_failures
        .with_label_values(&["bundle_signature"])
        .inc();
    m.intents.with_label_values(&["pending"]).inc();
    m.decision_log_dropped.inc();
    m.decision_log_written.inc();
    m.mcp_forward_seconds
        .with_label_values(&["fs"])
        .observe(0.002);
    m.mcp_upstream_errors.with_label_values(&["fs"]).inc();
    m.mcp_tasks.with_label_values(&["fs", "created"]).inc();
    m.flow_refusals
        .with_label_values(&["no-exfiltration", "deny", "research-agent"])
        .inc();
    m.shadow_decisions
        .with_label_values(&["safe-coding", "allow", "deny"])
        .inc();
    toolgate_families(&m.render())
}

/// [`families`] without the standard `process_*` collector.
fn toolgate_families(exposition: &str) -> BTreeMap<String, Family> {
    let mut all = families(exposition);
    assert!(
        !cfg!(target_os = "linux") || all.contains_key("process_resident_memory_bytes"),
        "process metrics missing"
    );
    all.retain(|name, _| name.starts_with("toolgate_"));
    all
}

/// The webhook's registry (every label combination pre-initialised).
fn webhook_families() -> BTreeMap<String, Family> {
    toolgate_families(&toolgate_webhook::metrics::Metrics::default().render())
}

/// Families every binary exports alike.
const SHARED: &[&str] = &["toolgate_build_info"];

/// The controller's registry (every label combination pre-initialised).
fn controller_families() -> BTreeMap<String, Family> {
    let m = toolgate_controller::metrics::Metrics::new();
    let status = toolgate_controller::crd::PolicyProfileStatus {
        expires_at: Some("2030-01-01T00:00:00Z".into()),
        ..Default::default()
    };
    m.observe_profile("agents", "safe-coding", &status);
    toolgate_families(&m.render())
}

#[test]
fn sidecar_registry_renders_exactly_metric_names() {
    let rendered: BTreeSet<String> = sidecar_families().into_keys().collect();
    let declared: BTreeSet<String> = METRIC_NAMES.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        rendered, declared,
        "toolgate_sidecar::metrics::METRIC_NAMES and the registry disagree"
    );
}

#[test]
fn controller_registry_exports_the_documented_families() {
    let controller = controller_families();
    let sidecar = sidecar_families();
    for (name, kind) in [
        ("toolgate_reconcile_total", "counter"),
        ("toolgate_reconcile_errors_total", "counter"),
        ("toolgate_reconcile_duration_seconds", "histogram"),
        ("toolgate_approvals", "gauge"),
        ("toolgate_controller_leader", "gauge"),
    ] {
        let family = controller
            .get(name)
            .unwrap_or_else(|| panic!("controller registry has no {name}"));
        assert_eq!(family.kind, kind, "{name}");
    }
    let webhook = webhook_families();
    for name in controller.keys().chain(webhook.keys()) {
        assert!(name.starts_with("toolgate_"), "{name}");
        let in_sidecar = sidecar.contains_key(name);
        let in_both = controller.contains_key(name) && webhook.contains_key(name);
        assert!(
            SHARED.contains(&name.as_str()) || !(in_sidecar || in_both),
            "{name} is exported by more than one binary"
        );
    }
    for family in [&controller, &sidecar, &webhook] {
        let versions = &family["toolgate_build_info"].labels["version"];
        assert!(versions.contains(env!("CARGO_PKG_VERSION")), "{versions:?}");
    }
    let phases = &controller["toolgate_approvals"].labels["phase"];
    assert!(phases.contains("Pending"), "{phases:?}");
}

#[test]
fn every_dashboard_query_uses_an_exported_metric_and_its_labels() {
    let mut texts = Vec::new();
    strings(&dashboard(), &mut texts);
    check_queries(&texts, REQUIRED_ON_DASHBOARD, "dashboard");
}

/// Every alert expression of the chart's rules file only names exported
/// metrics and labels, and the alerts cover what they must.
#[test]
fn every_alert_uses_an_exported_metric_and_its_labels() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/toolgate/rules/toolgate.rules.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let rules: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut exprs = Vec::new();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            exprs.push(rule["expr"].as_str().unwrap().to_owned());
        }
    }
    assert!(exprs.len() >= 12, "{} rules", exprs.len());
    check_queries(
        &exprs,
        &[
            "toolgate_bundle_expiry_timestamp_seconds",
            "toolgate_bundle_reload_failures_total",
            "toolgate_decisions_total",
            "toolgate_decision_log_dropped_total",
            "toolgate_controller_leader",
            "toolgate_admission_duration_seconds",
            "toolgate_profile_pods",
            "toolgate_approvals_overdue",
            "toolgate_open_intents",
            "toolgate_profile_valid",
            "toolgate_webhook_certificate_expiry_timestamp_seconds",
        ],
        "alert rules",
    );
}

fn check_queries(texts: &[String], required: &[&str], what: &str) {
    let controller = controller_families();
    let mut exported = sidecar_families();
    exported.extend(controller.clone());
    exported.extend(webhook_families());

    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    for text in texts {
        for (name, selector) in metric_refs(text) {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .find(|base| exported.get(*base).is_some_and(|f| f.kind == "histogram"))
                .unwrap_or(&name)
                .to_owned();
            let Some(info) = exported.get(&family) else {
                problems.push(format!(
                    "`{name}` is not exported by the sidecar, the controller or the webhook (in `{text}`)"
                ));
                continue;
            };
            if name.ends_with("_bucket") && info.kind != "histogram" {
                problems.push(format!("`{name}`: {family} is a {}", info.kind));
            }
            used.insert(family.clone());
            for (label, op, value) in selector.as_deref().map(matchers).unwrap_or_default() {
                let known = info.labels.contains_key(&label)
                    || TARGET_LABELS.contains(&label.as_str())
                    || (label == "le" && name.ends_with("_bucket"));
                if !known {
                    problems.push(format!(
                        "`{family}` has no label `{label}` (labels: {:?}) in `{text}`",
                        info.labels.keys().collect::<Vec<_>>()
                    ));
                }
                // Controller label sets are closed and pre-initialised: an
                // equality matcher must name a value that exists.
                let closed = controller
                    .get(&family)
                    .filter(|_| !SHARED.contains(&family.as_str()))
                    .and_then(|f| f.labels.get(&label));
                if let (Some(values), "=") = (closed, op.as_str())
                    && !values.contains(&value)
                {
                    problems.push(format!(
                        "`{family}{{{label}=\"{value}\"}}` never exists: {label} is one of {values:?}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for required in required {
        assert!(used.contains(*required), "the {what} use no {required}");
    }
}

#[test]
fn the_extractor_finds_names_and_selectors() {
    let refs = metric_refs(
        r#"histogram_quantile(0.99, sum by (le) (rate(toolgate_decision_duration_seconds_bucket{namespace=~"$ns"}[5m]))) + xtoolgate_no + toolgate_approvals{phase="Pending"}"#,
    );
    assert_eq!(
        refs,
        vec![
            (
                "toolgate_decision_duration_seconds_bucket".to_owned(),
                Some(r#"namespace=~"$ns""#.to_owned())
            ),
            (
                "toolgate_approvals".to_owned(),
                Some(r#"phase="Pending""#.to_owned())
            ),
        ]
    );
    assert_eq!(
        matchers(r#"a="1", b=~"x|y",c!="""#),
        vec![
            ("a".into(), "=".into(), "1".into()),
            ("b".into(), "=~".into(), "x|y".into()),
            ("c".into(), "!=".into(), "".into()),
        ]
    );
}
