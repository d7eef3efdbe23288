"""Running the chart: monitoring (ServiceMonitor, PodMonitor, dashboard),
alert rules, the sidecar and fleet knobs that reach the webhook's flags,
scheduling, the database checksum and the CRDs' printer columns."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from chart_helpers import (CHART, NAMESPACE, RELEASE, ROOT, all_of, clap_flags, container, deployment, flag, helm,
                           label_selector_matches, only, render)


# -------------------------------------------------------------- monitoring


def test_service_monitor(rendered):
    assert not all_of(rendered["default"], "ServiceMonitor")
    objects = rendered["full"]
    sm = only(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    metrics = only(objects, "Service", f"{RELEASE}-metrics")
    assert label_selector_matches(sm["spec"]["selector"], metrics["metadata"]["labels"])
    assert not label_selector_matches(sm["spec"]["selector"], only(objects, "Service", f"{RELEASE}-webhook")["metadata"]["labels"])
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [p["name"] for p in metrics["spec"]["ports"]]


def test_pod_monitor_scrapes_only_injected_sidecars(rendered):
    pm = only(rendered["full"], "PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    relabel = pm["spec"]["podMetricsEndpoints"][0]["relabelings"]
    keep = {r["sourceLabels"][0]: r["regex"] for r in relabel if r.get("action") == "keep"}
    assert keep == {
        "__meta_kubernetes_pod_annotation_toolgate_dev_injected": "true",
        "__meta_kubernetes_pod_container_name": "toolgate-sidecar",
    }
    names = (ROOT / "crates" / "toolgate-k8s" / "src" / "names.rs").read_text()
    shared = (ROOT / "crates" / "toolgate-contract" / "src" / "names.rs").read_text()
    assert 'SIDECAR_NAME: &str = "toolgate-sidecar"' in shared
    assert 'ANNOTATION_INJECTED: &str = "toolgate.dev/injected"' in names
    assert "OPS_PORT: u16 = 15032" in shared
    assert any(r.get("replacement") == "$1:15032" for r in relabel)


def test_dashboard_configmap(rendered):
    shipped = json.loads((CHART / "dashboards" / "toolgate.json").read_text())
    cm = only(rendered["default"], "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["toolgate.json"]) == shipped
    full = only(rendered["full"], "ConfigMap")
    assert full["metadata"]["namespace"] == "monitoring"
    assert full["metadata"]["annotations"] == {"grafana_folder": "toolgate"}


def test_dashboard_queries_use_known_metrics():
    """Quick guard (the authority is crates/toolgate/tests/it/dashboard.rs,
    which checks against the real registries)."""
    text = (CHART / "dashboards" / "toolgate.json").read_text()
    names = {re.sub(r"_(bucket|sum|count)$", "", n) for n in re.findall(r"toolgate_[a-z_]+", text)}
    sources = "".join(
        (ROOT / "crates" / crate / "src" / "metrics.rs").read_text()
        for crate in ("toolgate-gate", "toolgate-controller", "toolgate-webhook")
    )
    for name in names:
        assert f'"{name}"' in sources, f"dashboard uses {name}, which no registry defines"
    dash = json.loads(text)
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]


# ------------------------------------------------------ alerts and knobs


def test_prometheus_rule_embeds_the_rules_file_unchanged(rendered, chart):
    assert not all_of(rendered["default"], "PrometheusRule")
    rule = only(rendered["full"], "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    source = yaml.safe_load((CHART / "rules" / "toolgate.rules.yaml").read_text())
    assert rule["spec"] == source, "the PrometheusRule must be the rules file promtool tests"
    # `{{ $labels.x }}` reaches Prometheus as written, not eaten by Helm.
    annotations = [r["annotations"]["summary"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert any("{{ $labels.pod }}" in a for a in annotations), annotations
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    readme = (CHART / "README.md").read_text()
    missing = [n for n in sorted(names) if f"`{n}`" not in readme]
    assert not missing, f"the chart README's Alerts section does not explain {missing}"
    # Release namespace by default.
    default_ns = only(render(chart, {"prometheusRule": {"enabled": True}}), "PrometheusRule")
    assert default_ns["metadata"]["namespace"] == NAMESPACE


def test_sidecar_knobs_reach_the_webhook_flags(rendered, chart):
    args = container(rendered["default"], "webhook")["args"]
    assert flag(args, "--sidecar-pull-policy") == "IfNotPresent"
    assert flag(args, "--sidecar-run-as-user") == "65532"
    assert [flag(args, f"--sidecar-{k}") for k in ("cpu-request", "memory-request", "cpu-limit", "memory-limit")] == [
        "10m", "32Mi", "500m", "128Mi"]
    args = container(rendered["full"], "webhook")["args"]
    assert flag(args, "--sidecar-pull-policy") == "Always"
    assert flag(args, "--sidecar-run-as-user") == "none"
    assert [flag(args, f"--sidecar-{k}") for k in ("cpu-request", "memory-request", "cpu-limit", "memory-limit")] == [
        "50m", "64Mi", "1", "1Gi"]
    # The defaults the webhook falls back to are the chart's.
    config = (ROOT / "crates" / "toolgate-webhook" / "src" / "config.rs").read_text()
    for value in ('default_value = "10m"', 'default_value = "32Mi"', 'default_value = "500m"', 'default_value = "128Mi"'):
        assert value in config, value
    for bad in ({"sidecar": {"resources": {"requests": {"cpu": "0.5", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}},
                {"sidecar": {"resources": {"requests": {"cpu": "10m", "memory": "32M"}, "limits": {"cpu": "1", "memory": "1Gi"}}}},
                {"sidecar": {"resources": {"requests": {"cpu": "10m", "memory": "64"}, "limits": {"cpu": "1", "memory": "1Gi"}}}},
                {"sidecar": {"pullPolicy": "Sometimes"}},
                {"sidecar": {"runAsUser": -1}},
                {"sidecar": {"resources": {"requests": {"gpu": "1"}}}}):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


def test_a_fleet_behind_a_pooler_reaches_the_webhook_flags(rendered, chart):
    args = container(rendered["default"], "webhook")["args"]
    assert flag(args, "--sidecar-database-pooler") == "none"
    assert "--sidecar-wakeups-url" not in args
    relay = "http://toolgate-wakeups.toolgate-system:8790"
    objects = render(chart, {"sidecar": {"databasePooler": "transaction", "wakeupsUrl": relay}})
    args = container(objects, "webhook")["args"]
    assert flag(args, "--sidecar-database-pooler") == "transaction"
    assert flag(args, "--sidecar-wakeups-url") == relay
    known = clap_flags(ROOT / "crates" / "toolgate-webhook" / "src" / "config.rs", "WebhookArgs")
    assert {"--sidecar-database-pooler", "--sidecar-wakeups-url"} <= known
    for bad in ({"sidecar": {"databasePooler": "session"}}, {"sidecar": {"wakeupsUrl": "relay:8790"}}):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


def test_priority_spread_affinity_and_user(rendered):
    pod = deployment(rendered["default"])["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    keys = {(c["topologyKey"], c["whenUnsatisfiable"]) for c in pod["topologySpreadConstraints"]}
    assert keys == {("kubernetes.io/hostname", "ScheduleAnyway"), ("topology.kubernetes.io/zone", "ScheduleAnyway")}
    labels = deployment(rendered["default"])["spec"]["template"]["metadata"]["labels"]
    for c in pod["topologySpreadConstraints"]:
        assert label_selector_matches(c["labelSelector"], labels)
    assert "affinity" not in pod
    assert pod["securityContext"]["runAsUser"] == 65532 and pod["securityContext"]["fsGroup"] == 65532
    for c in pod["containers"]:
        assert c["securityContext"]["runAsUser"] == 65532

    full = deployment(rendered["full"])["spec"]["template"]["spec"]
    assert full["priorityClassName"] == "platform-critical"
    assert full["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}}}]
    assert full["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # runAsUser: null leaves the ids to the platform (OpenShift); non-root stays required.
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(full["securityContext"])
    assert full["securityContext"]["runAsNonRoot"] is True
    for c in full["containers"]:
        assert "runAsUser" not in c["securityContext"] and c["securityContext"]["runAsNonRoot"] is True


def _checksum(chart, database):
    dep = deployment(render(chart, {"database": database}))
    return dep["spec"]["template"]["metadata"]["annotations"]["checksum/database"]


def test_database_checksum_never_hashes_the_password(chart):
    import hashlib
    url = "postgres://toolgate:s3cret@db.example.test:5432/toolgate?sslmode=require"
    value = _checksum(chart, {"url": url})
    # Neither the old hash of the whole URL nor anything that moves with the password.
    assert value != hashlib.sha256(f"|{url}".encode()).hexdigest()[:16]
    assert _checksum(chart, {"url": url.replace("s3cret", "other")}) == value
    # A new host, user, database or option does restart the controller.
    for changed in (url.replace("db.example", "db2.example"), url.replace("toolgate:", "admin:"),
                    url.replace("/toolgate?", "/tg?"), url.replace("require", "verify-full")):
        assert _checksum(chart, {"url": changed}) != value, changed
    # An existing Secret: its name (and, on a live install, its resourceVersion).
    assert _checksum(chart, {"existingSecret": "pg-a"}) != _checksum(chart, {"existingSecret": "pg-b"})
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'lookup "v1" "Secret"' in helpers and "resourceVersion" in helpers


def test_kubectl_get_shows_validity_mode_fleet_and_approval_details():
    def columns(name):
        crd = yaml.safe_load((CHART / "crds" / name).read_text())
        return {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}

    tgp = columns("policyprofiles.toolgate.dev.yaml")
    for name in ("Valid", "Ready", "Mode", "Current", "Stale", "Message"):
        assert name in tgp and tgp[name].get("priority", 0) == 0, (name, tgp.get(name))
    assert tgp["Mode"]["jsonPath"] == ".spec.enforcement"
    assert tgp["Message"]["jsonPath"] == '.status.conditions[?(@.type=="Valid")].message'
    tga = columns("approvals.toolgate.dev.yaml")
    for name, path in (("Tool", ".status.tool"), ("Preview", ".spec.request.preview"),
                       ("Decided By", ".spec.decidedBy"), ("Expires", ".status.expiresAt")):
        assert tga[name]["jsonPath"] == path and tga[name].get("priority", 0) == 0, name
