"""The Helm chart, linted and rendered with real Helm (v4, embedded through
helm-python-sdk) and every rendered object validated with
kubernetes-validate --strict against a pinned Kubernetes version; its values
schema, its CRDs and the controller's Deployment. Access (RBAC, webhooks,
certificates, network policies, the console) is in test_chart_access.py;
monitoring, alerts and the knobs passed on in test_chart_operations.py.

Run from the repository root:

    pip install -r tests/chart/requirements.txt
    python3 -m pytest tests/chart -q

Objects of CRDs that kubernetes-validate has no schema for (cert-manager's
Issuer/Certificate, the Prometheus Operator's ServiceMonitor/PodMonitor) are
not skipped silently: each one must be in EXTERNAL_KINDS, and its fields the
chart relies on are asserted explicitly.
"""
from __future__ import annotations

import json

import pytest
import yaml

from chart_helpers import (CHART, EXTERNAL_KINDS, HERE, KUBE_VERSION, NAMESPACE, RELEASE, ROOT, VALUE_SETS,
                           all_of, clap_flags, container, deployment, flag, helm, kubernetes_validate,
                           label_selector_matches, only, render)


# ------------------------------------------------------------- lint/render


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_lint_strict(values_name):
    report = helm.lint(
        CHART,
        VALUE_SETS[values_name],
        strict=True,
        namespace=NAMESPACE,
        kube_version="v" + KUBE_VERSION,
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["total_charts_linted"] == 1
    assert not report["errors"] and not problems, json.dumps(report, indent=2)


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_every_rendered_object_validates_strictly(rendered, values_name):
    objects = rendered[values_name]
    assert objects
    external = []
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in EXTERNAL_KINDS:
            external.append(key)
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata'].get('name')}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            pytest.fail(f"{e.message}: add it to EXTERNAL_KINDS with explicit assertions, or fix the apiVersion")
    if values_name == "default":
        assert external == [], "the default install must need no third-party CRDs"
    else:
        assert set(external) == EXTERNAL_KINDS


def test_render_is_namespaced_where_it_must_be(rendered):
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for values_name, objects in rendered.items():
        for obj in objects:
            if obj["kind"] in cluster_scoped:
                assert "namespace" not in obj["metadata"], obj["metadata"]
            else:
                assert obj["metadata"].get("namespace"), f"{values_name}: {obj['kind']}/{obj['metadata']['name']} has no namespace"


# ------------------------------------------------------------------ schema


BAD_VALUES = {
    "string replicaCount": {"replicaCount": "two"},
    "zero replicas": {"replicaCount": 0},
    "unknown top-level key": {"replicas": 2},
    "unknown nested key": {"image": {"repo": "x"}},
    "sidecar.native not a boolean": {"sidecar": {"native": "yes"}},
    "failurePolicy outside the enum": {"webhook": {"failurePolicy": "Sometimes"}},
    "both database sources": {"database": {"existingSecret": "db", "url": "postgres://x"}},
    "not a database URL": {"database": {"url": "mysql://x"}},
    "bad duration": {"controller": {"bundleValidity": "one day"}},
    "bad archive age": {"controller": {"archive": {"after": "a month"}}},
    "relative archive dir": {"controller": {"archive": {"dir": "archive"}}},
    "archive dir at the root": {"controller": {"archive": {"dir": "/"}}},
    "bad archive claim name": {"controller": {"archive": {"claimName": "Archive_Claim"}}},
    "unknown archive key": {"controller": {"archive": {"retention": "1y"}}},
    "unknown resources key": {"resources": {"request": {"cpu": "1"}}},
    "notification allowance not a CIDR": {"notifications": {"allowCidrs": ["loopback"]}},
    "notification allowance a single string": {"notifications": {"allowCidrs": "127.0.0.0/8"}},
}


@pytest.mark.parametrize("case", BAD_VALUES)
def test_schema_rejects_bad_values(chart, case):
    values = BAD_VALUES[case]
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmError):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


@pytest.mark.parametrize("path", sorted(HERE.glob("values-bad-*.yaml")), ids=lambda p: p.name)
def test_bad_values_files_fail_the_schema(chart, path):
    values = helm.values_from_yaml(path.read_text())
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v" + KUBE_VERSION)
    assert report["errors"] or any(m["severity"] >= 3 for m in report["messages"]), report


def test_good_values_pass_the_schema(chart):
    for values in VALUE_SETS.values():
        chart.validate_schema(values)


def test_schema_closes_every_object():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    free_form = {"global", "namespaceSelector", "podSelector"}  # pass-through Kubernetes objects

    def walk(node, where):
        if isinstance(node, dict):
            if node.get("type") == "object" and where.rsplit(".", 1)[-1] not in free_form:
                assert "additionalProperties" in node, f"{where} does not set additionalProperties"
                if "properties" in node:
                    assert node["additionalProperties"] is False, f"{where} accepts unknown keys"
            for key, child in node.items():
                walk(child, f"{where}.{key}" if key not in ("properties", "items") else where)
        elif isinstance(node, list):
            for child in node:
                walk(child, where)

    walk(schema, "values")
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) <= set(schema["properties"]), set(defaults) - set(schema["properties"])


# -------------------------------------------------------------------- CRDs


def test_chart_crds_equal_generated_crds(chart):
    generated = {p.name: p.read_text() for p in sorted((ROOT / "crds").glob("*.yaml"))}
    shipped = {p.name: p.read_text() for p in sorted((CHART / "crds").glob("*.yaml"))}
    assert generated, "no generated CRDs under crds/"
    assert shipped.keys() == generated.keys(), "charts/toolgate/crds/ must hold exactly the files of crds/"
    for name, text in generated.items():
        assert shipped[name] == text, (
            f"charts/toolgate/crds/{name} differs from crds/{name}: "
            "run `cp crds/*.yaml charts/toolgate/crds/`"
        )
    loaded = {c["filename"].rsplit("/", 1)[-1] for c in chart.crds}
    assert loaded == set(generated), "Helm does not see every CRD"


def test_chart_crds_validate(chart):
    for crd in chart.crds:
        for doc in yaml.safe_load_all(crd["data"]):
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
            assert doc["spec"]["group"] == "toolgate.dev"
            assert [v["name"] for v in doc["spec"]["versions"]] == ["v1alpha1"]


# -------------------------------------------------------------- deployment


def test_controller_deployment_defaults(rendered):
    objects = rendered["default"]
    dep = deployment(objects)
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert [c["name"] for c in pod["containers"]] == ["controller", "webhook"]
    image = f"ghcr.io/toolgate/toolgate:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    for c in pod["containers"]:
        assert c["image"] == image
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert c["resources"]["limits"] and c["resources"]["requests"]
    assert pod["serviceAccountName"] == only(objects, "ServiceAccount")["metadata"]["name"]


def test_controller_container(rendered):
    for values_name, objects in rendered.items():
        c = container(objects, "controller")
        args = c["args"]
        assert args[0] == "controller"
        assert flag(args, "--database") == "$(TOOLGATE_DATABASE_URL)"
        assert flag(args, "--namespace") == "$(POD_NAMESPACE)"
        assert flag(args, "--metrics-listen") == "0.0.0.0:8080"
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        assert env["TOOLGATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "url"
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
        known = clap_flags(ROOT / "crates" / "toolgate-controller" / "src" / "config.rs", "ControllerArgs")
        assert {a for a in args if a.startswith("--")} <= known
        sidecar_values = VALUE_SETS[values_name].get("sidecar", {})
        assert flag(args, "--tenant-secret") == sidecar_values.get("databaseSecret", "toolgate-database")
        assert "--no-tenant-provisioning" not in args


def test_tenant_provisioning_can_be_turned_off(chart):
    """Without provisioning the controller is told so, and keeps no
    cluster-wide Secret rights."""
    objects = render(chart, {"database": {"provisionTenants": False}})
    args = container(objects, "controller")["args"]
    assert "--no-tenant-provisioning" in args
    cluster = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-controller")][0]
    # Only the notification channels' Secret, by name, read only.
    secret_rules = [r for r in cluster["rules"] if "secrets" in r["resources"]]
    assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["toolgate-notify"],
                             "verbs": ["get"]}], cluster["rules"]


def test_the_archive_schedule_is_off_by_default(rendered):
    c = container(rendered["default"], "controller")
    assert not [a for a in c["args"] if a.startswith("--archive")], c["args"]
    assert "archive" not in {m["name"] for m in c["volumeMounts"]}
    assert "archive" not in {v["name"] for v in deployment(rendered["default"])["spec"]["template"]["spec"]["volumes"]}


def test_the_archive_schedule_reaches_the_controller_with_its_volume(rendered, chart):
    """values-full: a claim mounted at the directory the flags name; without
    a claim, an emptyDir; only the controller container mounts it."""
    c = container(rendered["full"], "controller")
    assert (flag(c["args"], "--archive-after"), flag(c["args"], "--archive-dir"),
            flag(c["args"], "--archive-interval")) == ("30d", "/var/lib/toolgate/archive", "6h")
    assert {"name": "archive", "mountPath": "/var/lib/toolgate/archive"} in c["volumeMounts"]
    pod = deployment(rendered["full"])["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["archive"] == {"name": "archive", "persistentVolumeClaim": {"claimName": "toolgate-archive"}}
    assert "archive" not in {m["name"] for m in container(rendered["full"], "webhook")["volumeMounts"]}

    objects = render(chart, {"controller": {"archive": {"after": "7d", "dir": "/archive"}}})
    c = container(objects, "controller")
    assert (flag(c["args"], "--archive-after"), flag(c["args"], "--archive-dir"),
            flag(c["args"], "--archive-interval")) == ("7d", "/archive", "1h")
    assert {"name": "archive", "mountPath": "/archive"} in c["volumeMounts"]
    volumes = {v["name"]: v for v in deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["archive"] == {"name": "archive", "emptyDir": {}}


def test_webhook_container(rendered):
    known = clap_flags(ROOT / "crates" / "toolgate-webhook" / "src" / "config.rs", "WebhookArgs")
    for values_name, objects in rendered.items():
        values = VALUE_SETS[values_name]
        c = container(objects, "webhook")
        args = c["args"]
        assert args[0] == "webhook"
        assert {a for a in args if a.startswith("--")} <= known
        assert flag(args, "--listen") == "0.0.0.0:8443"
        assert (flag(args, "--tls-cert"), flag(args, "--tls-key")) == ("/tls/tls.crt", "/tls/tls.key")
        assert {"name": "tls", "mountPath": "/tls", "readOnly": True} in c["volumeMounts"]
        expected_mode = "container" if values.get("sidecar", {}).get("native") is False else "native"
        assert flag(args, "--sidecar-mode") == expected_mode
        expected_image = values.get("sidecar", {}).get("image") or container(objects, "controller")["image"]
        assert flag(args, "--sidecar-image") == expected_image
        assert flag(args, "--database-secret") == values.get("sidecar", {}).get("databaseSecret", "toolgate-database")
        if values.get("defaultProfile"):
            assert flag(args, "--default-profile") == values["defaultProfile"]
        else:
            assert "--default-profile" not in args
        assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "webhook", "scheme": "HTTPS"}
        # Only the controller, whose ServiceAccount the webhook shares, may
        # create request Approvals.
        sa = only(objects, "ServiceAccount")["metadata"]["name"]
        assert flag(args, "--controller-user") == f"system:serviceaccount:{NAMESPACE}:{sa}"
        controller_args = container(objects, "controller")["args"]
        if values.get("approvalsNamespace"):
            assert flag(controller_args, "--approvals-namespace") == values["approvalsNamespace"]
        else:
            assert "--approvals-namespace" not in controller_args


def test_database_secret(rendered):
    default = rendered["default"]
    ref = container(default, "controller")["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == f"{RELEASE}-database"
    assert not [o for o in default if o["kind"] == "Secret" and o["metadata"]["name"] == ref["name"]]
    full = rendered["full"]
    ref = container(full, "controller")["env"][0]["valueFrom"]["secretKeyRef"]
    secret = only(full, "Secret", ref["name"])
    assert secret["stringData"]["url"] == VALUE_SETS["full"]["database"]["url"]


def test_existing_database_secret(chart):
    objects = render(chart, {"database": {"existingSecret": "pg-credentials"}})
    ref = container(objects, "controller")["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "pg-credentials", "key": "url"}
    assert not [o for o in objects if o["kind"] == "Secret" and "database" in o["metadata"]["name"]]


def test_services(rendered):
    objects = rendered["default"]
    labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    webhook = only(objects, "Service", f"{RELEASE}-webhook")
    assert webhook["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    metrics = only(objects, "Service", f"{RELEASE}-metrics")
    assert metrics["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"},
        {"name": "webhook-metrics", "port": 8081, "targetPort": "webhook-metrics", "protocol": "TCP"},
    ]
    for svc in (webhook, metrics):
        assert label_selector_matches({"matchLabels": svc["spec"]["selector"]}, labels)
    assert {"name": "webhook", "containerPort": 8443, "protocol": "TCP"} in container(objects, "webhook")["ports"]
    assert {"name": "webhook-metrics", "containerPort": 8081, "protocol": "TCP"} in container(objects, "webhook")["ports"]
    assert flag(container(objects, "webhook")["args"], "--metrics-listen") == "0.0.0.0:8081"


def test_pod_disruption_budget(rendered, chart):
    pdb = only(rendered["default"], "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    labels = deployment(rendered["default"])["spec"]["template"]["metadata"]["labels"]
    assert label_selector_matches(pdb["spec"]["selector"], labels)
    assert only(rendered["full"], "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    assert not all_of(render(chart, {"replicaCount": 1}), "PodDisruptionBudget"), "a one-replica PDB would block drains"


def test_leader_election_namespace_matches_rbac(rendered):
    """The controller's Lease and signing key live in --namespace, which is
    the pod's namespace: the Role is granted there."""
    leader = (ROOT / "crates" / "toolgate-controller" / "src" / "leader.rs").read_text()
    assert 'LEASE_NAME: &str = "toolgate-controller-leader"' in leader
    keys = (ROOT / "crates" / "toolgate-controller" / "src" / "keys.rs").read_text()
    assert 'SIGNING_SECRET: &str = "toolgate-signing-key"' in keys
    names = (ROOT / "crates" / "toolgate-contract" / "src" / "names.rs").read_text()
    assert 'TRUST_CONFIGMAP: &str = "toolgate-trust"' in names
    role = only(rendered["default"], "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
