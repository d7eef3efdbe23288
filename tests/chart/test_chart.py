"""The Helm chart, linted and rendered with real Helm (v4, embedded through
helm-python-sdk) and every rendered object validated with
kubernetes-validate --strict against a pinned Kubernetes version.

Run from the repository root:

    pip install -r tests/chart/requirements.txt
    python3 -m pytest tests/chart -q

Objects of CRDs that kubernetes-validate has no schema for (cert-manager's
Issuer/Certificate, the Prometheus Operator's ServiceMonitor/PodMonitor) are
not skipped silently: each one must be in EXTERNAL_KINDS, and its fields the
chart relies on are asserted explicitly below.
"""
from __future__ import annotations

import base64
import json
import os
import pathlib
import re
from typing import Any, Iterable

import pytest
import yaml

try:
    import helm_python as helm
    import kubernetes_validate
except ImportError as missing:  # pragma: no cover - environment check
    message = f"{missing.name} is not installed: pip install -r tests/chart/requirements.txt"
    if os.environ.get("CI") == "true":
        raise ImportError(message) from missing
    pytest.skip(message, allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
CHART = ROOT / "charts" / "toolgate"
KUBE_VERSION = "1.33.0"
RELEASE = "toolgate"
NAMESPACE = "toolgate-system"

# Kinds whose schema is not in kubernetes-validate (CRDs of other projects).
EXTERNAL_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}

VALUE_SETS = {
    "default": {},
    "full": yaml.safe_load((HERE / "values-full.yaml").read_text()),
}


# ---------------------------------------------------------------- helpers


@pytest.fixture(scope="session")
def chart() -> Iterable[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


class StrictLoader(yaml.SafeLoader):
    """Refuses duplicate mapping keys (PyYAML keeps the last one silently;
    kubectl and the API server's YAML decoding do not)."""


def _no_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {sorted(dupes)}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.load_all(text, Loader=StrictLoader):
            if doc:
                doc.setdefault("metadata", {})
                objects.append(doc)
    return objects


@pytest.fixture(scope="session")
def rendered(chart: helm.Chart) -> dict[str, list[dict[str, Any]]]:
    return {name: render(chart, values) for name, values in VALUE_SETS.items()}


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def all_of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def deployment(objects):
    return only(objects, "Deployment")


def container(objects, name: str) -> dict[str, Any]:
    containers = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def flag(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def clap_flags(source: pathlib.Path, struct: str) -> set[str]:
    """`--kebab-case` flags of a clap `#[derive(Args)]` struct, read from its source."""
    text = source.read_text()
    body = re.search(r"pub struct " + struct + r"\s*\{(.*?)\n\}", text, re.S)
    assert body, f"struct {struct} not found in {source}"
    fields = re.findall(r"pub (\w+):", body.group(1))
    return {"--" + f.replace("_", "-") for f in fields}


def label_selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (matchLabels AND matchExpressions)."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels[key] in values,
            "NotIn": not present or labels[key] not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


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


# -------------------------------------------------------------------- RBAC


def rbac_rules(objects, subject_name: str, subject_ns: str) -> list[tuple[dict, str]]:
    """Rules of every Role/ClusterRole bound to the ServiceAccount, with the
    binding's namespace (or "*" for a ClusterRoleBinding)."""
    roles = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")): o for o in objects if o["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == subject_name and s["namespace"] == subject_ns for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], ref["name"], ns))
        assert role, f"{b['kind']} {b['metadata']['name']} refers to missing {ref['kind']} {ref['name']}"
        scope = b["metadata"].get("namespace", "*") if b["kind"] == "RoleBinding" else "*"
        out.extend((rule, scope) for rule in role["rules"])
    return out


def triples(rules: Iterable[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_rbac_has_no_wildcards(rendered, values_name):
    for role in [o for o in rendered[values_name] if o["kind"] in ("Role", "ClusterRole")]:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard in {field}"
            assert "nonResourceURLs" not in rule
        assert "aggregationRule" not in role


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_rbac_is_exactly_what_the_controller_uses(rendered, values_name):
    """Both directions: nothing granted that crates/toolgate-controller/rbac.yaml
    does not list, and nothing listed there missing from the chart."""
    objects = rendered[values_name]
    sa = only(objects, "ServiceAccount")["metadata"]["name"]
    granted = rbac_rules(objects, sa, NAMESPACE)
    used = yaml.safe_load((ROOT / "crates" / "toolgate-controller" / "rbac.yaml").read_text())
    for rule in used:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
    extra = triples(r for r, _ in granted) - triples(used)
    missing = triples(used) - triples(r for r, _ in granted)
    assert not extra, f"chart grants what the controller never does: {sorted(extra)}"
    assert not missing, f"controller needs what the chart does not grant: {sorted(missing)}"


def test_rbac_scopes(rendered):
    """Lease and signing Secret only in the release namespace, by name where
    possible; mirrored Approvals created in every namespace (each tenant's
    own) or, with a central queue, only there."""
    for values_name, objects in rendered.items():
        values = VALUE_SETS[values_name]
        sa = only(objects, "ServiceAccount")["metadata"]["name"]
        approvals_ns = values.get("approvalsNamespace") or "*"
        for rule, scope in rbac_rules(objects, sa, NAMESPACE):
            res = set(rule["resources"])
            if res & {"leases", "secrets"}:
                names = rule.get("resourceNames")
                tenant_secret = values.get("sidecar", {}).get("databaseSecret", "toolgate-database")
                if "secrets" in res and scope == "*":
                    # Cluster-wide only for the tenant database Secret
                    # (create, and get by that one name) and the approval
                    # notification channels' Secret (get by its one name).
                    if rule["verbs"] == ["get"] and names == ["toolgate-notify"]:
                        continue
                    assert values.get("database", {}).get("provisionTenants", True), (values_name, rule)
                    assert rule["verbs"] == ["create"] or (rule["verbs"] == ["get"] and names == [tenant_secret]), rule
                    continue
                assert scope == NAMESPACE, (values_name, rule)
                if set(rule["verbs"]) - {"create"}:
                    assert names in (["toolgate-controller-leader"], ["toolgate-signing-key"]), rule
            if "approvals" in res and "create" in rule["verbs"]:
                assert scope == approvals_ns, (values_name, rule)
            if "configmaps" in res and "update" in rule["verbs"]:
                assert rule.get("resourceNames") == ["toolgate-trust"], rule
            assert not res & {"pods", "namespaces", "nodes", "serviceaccounts"}, rule


def test_injected_pods_get_no_rbac(rendered):
    """The sidecar never calls the API server: the only ServiceAccount the
    chart creates, and the only subject it binds, is the controller's."""
    for objects in rendered.values():
        sas = all_of(objects, "ServiceAccount")
        assert len(sas) == 1
        for b in [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
            assert [(s["kind"], s["name"]) for s in b["subjects"]] == [("ServiceAccount", sas[0]["metadata"]["name"])]


# ---------------------------------------------------------------- webhooks


def mutating(objects):
    return only(objects, "MutatingWebhookConfiguration")


def validating(objects):
    return only(objects, "ValidatingWebhookConfiguration")


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_mutating_webhook_settings(rendered, values_name):
    objects = rendered[values_name]
    hooks = mutating(objects)["webhooks"]
    service = only(objects, "Service", f"{RELEASE}-webhook")
    assert len(hooks) == 2
    for hook in hooks:
        assert hook["failurePolicy"] == "Fail"
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 5
        assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"], "scope": "Namespaced"}]
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (service["metadata"]["name"], NAMESPACE, "/mutate-pods", 443)
        excluded = [e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
        assert excluded and excluded[0]["operator"] == "NotIn" and NAMESPACE in excluded[0]["values"]


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_mutating_webhook_selects_labelled_pod_or_namespace_once(rendered, values_name):
    hooks = mutating(rendered[values_name])["webhooks"]
    label = "toolgate.dev/inject"

    def calls(ns_name, ns_labels, pod_labels):
        ns_labels = {"kubernetes.io/metadata.name": ns_name, **ns_labels}
        return sum(
            label_selector_matches(h.get("namespaceSelector"), ns_labels) and label_selector_matches(h.get("objectSelector"), pod_labels)
            for h in hooks
        )

    assert calls("agents", {label: "true"}, {}) == 1
    assert calls("agents", {label: "true"}, {label: "true"}) == 1
    assert calls("agents", {}, {label: "true"}) == 1
    assert calls("agents", {}, {}) == 0
    assert calls("agents", {label: "true"}, {label: "false"}) == 0
    assert calls("agents", {label: "false"}, {label: "true"}) == 1
    assert calls(NAMESPACE, {label: "true"}, {label: "true"}) == 0
    assert calls("kube-system", {label: "true"}, {label: "true"}) == 0


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_validating_webhooks(rendered, values_name):
    hooks = {h["clientConfig"]["service"]["path"]: h for h in validating(rendered[values_name])["webhooks"]}
    assert set(hooks) == {"/validate-policyprofiles", "/validate-approvals", "/validate-pods"}
    for path, hook in hooks.items():
        if path == "/validate-pods":
            continue  # test_pod_update_webhook
        resource = path.removeprefix("/validate-")
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 5
        assert hook["rules"] == [{"apiGroups": ["toolgate.dev"], "apiVersions": ["v1alpha1"], "resources": [resource], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}]
    # Finalizer patches (metadata only) are not re-validated.
    assert [c["name"] for c in hooks["/validate-policyprofiles"]["matchConditions"]] == ["spec-written"]


@pytest.mark.parametrize("values_name", VALUE_SETS)
def test_pod_update_webhook(rendered, values_name):
    """Pod UPDATEs, `kubectl debug` (pods/ephemeralcontainers) and in-place
    resizes (pods/resize) of injected pods go to the validating webhook, which
    refuses any change to the sidecar."""
    objects = rendered[values_name]
    hooks = [h for h in validating(objects)["webhooks"] if h["clientConfig"]["service"]["path"] == "/validate-pods"]
    assert len(hooks) == 1
    hook = hooks[0]
    assert hook["name"] == "pods.validate.toolgate.dev"
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "pods/ephemeralcontainers", "pods/resize"], "operations": ["UPDATE"], "scope": "Namespaced"}
    ]
    service = only(objects, "Service", f"{RELEASE}-webhook")
    svc = hook["clientConfig"]["service"]
    assert (svc["name"], svc["namespace"], svc["port"]) == (service["metadata"]["name"], NAMESPACE, 443)
    # Not selected by the pod's own labels: an update could drop them first.
    assert "objectSelector" not in hook
    exprs = hook["namespaceSelector"]["matchExpressions"]
    assert exprs == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": exprs[0]["values"]}]
    assert NAMESPACE in exprs[0]["values"] and "kube-system" in exprs[0]["values"]
    # Injected pods only (by the stored pod's container, whose name cannot
    # change), and only when the spec changes: the sidecar is all in spec.
    conditions = {c["name"]: " ".join(c["expression"].split()) for c in hook["matchConditions"]}
    assert conditions == {
        "injected": "oldObject.spec.containers.exists(c, c.name == 'toolgate-sidecar') || "
        "(has(oldObject.spec.initContainers) && oldObject.spec.initContainers.exists(c, c.name == 'toolgate-sidecar'))",
        "spec-written": "object.spec != oldObject.spec",
    }
    names = (ROOT / "crates" / "toolgate-contract" / "src" / "names.rs").read_text()
    assert 'SIDECAR_NAME: &str = "toolgate-sidecar"' in names
    # The injecting webhook still only sees CREATE.
    for mutating_hook in mutating(objects)["webhooks"]:
        assert [r["operations"] for r in mutating_hook["rules"]] == [["CREATE"]]


def test_webhook_paths_exist_in_the_server():
    server = (ROOT / "crates" / "toolgate-webhook" / "src" / "server.rs").read_text()
    for path in ("/mutate-pods", "/validate-pods", "/validate-policyprofiles", "/validate-approvals", "/healthz"):
        assert f'"{path}"' in server, f"{path} is not routed by toolgate-webhook"


def cert_from_pem(pem: bytes):
    x509 = pytest.importorskip("cryptography.x509")
    return x509.load_pem_x509_certificate(pem)


def test_generated_certificates(rendered):
    objects = rendered["default"]
    secret = only(objects, "Secret", f"{RELEASE}-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_b64 = secret["data"]["ca.crt"]
    for conf in (mutating(objects), validating(objects)):
        assert "cert-manager.io/inject-ca-from" not in (conf["metadata"].get("annotations") or {})
        for hook in conf["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == ca_b64
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    # The serving certificate is signed by the CA and names the Service.
    x509 = pytest.importorskip("cryptography.x509")
    ca = cert_from_pem(base64.b64decode(ca_b64))
    leaf = cert_from_pem(base64.b64decode(secret["data"]["tls.crt"]))
    assert leaf.issuer == ca.subject
    ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, *_verify_args(ca, leaf))
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{RELEASE}-webhook.{NAMESPACE}.svc" in sans


def _verify_args(ca, leaf):
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    key = ca.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        return (padding.PKCS1v15(), leaf.signature_hash_algorithm)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return (ec.ECDSA(leaf.signature_hash_algorithm),)
    return ()


def test_cert_manager_certificates(rendered):
    objects = rendered["full"]
    assert not [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-webhook-tls")]
    certs = {o["metadata"]["name"]: o for o in all_of(objects, "Certificate")}
    issuers = {o["metadata"]["name"]: o for o in all_of(objects, "Issuer")}
    for o in list(certs.values()) + list(issuers.values()):
        assert o["apiVersion"] == "cert-manager.io/v1"
        assert o["metadata"]["namespace"] == NAMESPACE
    # self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate
    selfsigned = next(i for i in issuers.values() if "selfSigned" in i["spec"])
    ca_cert = next(c for c in certs.values() if c["spec"].get("isCA"))
    assert ca_cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": selfsigned["metadata"]["name"]}
    ca_issuer = next(i for i in issuers.values() if "ca" in i["spec"])
    assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
    serving = next(c for c in certs.values() if not c["spec"].get("isCA"))
    assert serving["spec"]["issuerRef"] == {"kind": "Issuer", "name": ca_issuer["metadata"]["name"]}
    assert f"{RELEASE}-webhook.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    volumes = deployment(objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": serving["spec"]["secretName"], "defaultMode": 0o440}} in volumes
    for conf in (mutating(objects), validating(objects)):
        assert conf["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{serving['metadata']['name']}"
        for hook in conf["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]


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


# ----------------------------------------------------------- network policy


def test_network_policy(rendered):
    assert not all_of(rendered["default"], "NetworkPolicy")
    objects = rendered["full"]
    np = only(objects, "NetworkPolicy")
    labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert label_selector_matches(np["spec"]["podSelector"], labels)
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ingress = np["spec"]["ingress"]
    webhook = next(r for r in ingress if r["ports"] == [{"port": 8443, "protocol": "TCP"}])
    assert "from" not in webhook, "the API server must reach the webhook from wherever it runs"
    metrics = next(r for r in ingress if r["ports"] == [{"port": 8080, "protocol": "TCP"}, {"port": 9091, "protocol": "TCP"}])
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    egress_ports = {(p["port"], p["protocol"]) for r in np["spec"]["egress"] for p in r["ports"]}
    assert egress_ports == {(53, "UDP"), (53, "TCP"), (443, "TCP"), (5432, "TCP")}
    db = next(r for r in np["spec"]["egress"] if r["ports"] == [{"port": 5432, "protocol": "TCP"}])
    assert db["to"] == [{"ipBlock": {"cidr": "10.20.0.0/24"}}]


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


# ---------------------------------------------------------------- console


CONSOLE_VALUES = {
    "token": {"console": {"enabled": True}},
    "proxy": {"console": {"enabled": True, "proxy": {"existingSecret": "console-proxy"}}},
}


@pytest.mark.parametrize("mode", CONSOLE_VALUES)
def test_the_console_renders_strictly_and_may_only_impersonate_and_watch(chart, mode):
    report = helm.lint(CHART, CONSOLE_VALUES[mode], strict=True, namespace=NAMESPACE,
                       kube_version="v" + KUBE_VERSION)
    assert not report["errors"] and not [m for m in report["messages"] if m["severity"] >= 2], report
    objects = render(chart, CONSOLE_VALUES[mode])
    console = [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "console"]
    assert sorted(o["kind"] for o in console) == ["ClusterRole", "ClusterRoleBinding", "Deployment",
                                                  "Service", "ServiceAccount"], console
    for obj in console:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    role = only(console, "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    impersonate = {("", r, "impersonate") for r in ("users", "groups", "serviceaccounts")}
    review = {("authentication.k8s.io", "tokenreviews", "create")}
    # One metadata watch of Approvals (where they are, when they change); no get, no writes.
    watch = {("toolgate.dev", "approvals", v) for v in ("list", "watch")}
    assert granted == (impersonate | watch | review if mode == "token" else impersonate | watch), granted
    binding = only(console, "ClusterRoleBinding")
    sa = only(console, "ServiceAccount")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    deployment = only(console, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa
    args = pod["containers"][0]["args"]
    assert args[0] == "console" and ("--proxy-secret-file=/etc/toolgate-console/proxy/secret" in args) == (
        mode == "proxy"), args
    # Namespace-agnostic: Approvals are wherever their tenants are.
    assert not any(a.startswith("--namespace") for a in args), args
    # The console's pods are never the controller's: no Service, PDB or
    # NetworkPolicy of the controller selects them, and the reverse.
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for obj in objects:
        if obj in console:
            continue
        selector = (obj.get("spec", {}).get("selector") or {})
        selector = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
        if selector and obj["kind"] in ("Service", "PodDisruptionBudget", "Deployment"):
            assert not all(pod_labels.get(k) == v for k, v in selector.items()), obj["metadata"]["name"]
    service_selector = only(console, "Service")["spec"]["selector"]
    assert service_selector["app.kubernetes.io/component"] == "console"


def test_default_notification_channels_reach_the_controller(rendered):
    """The chart hands `notifications.defaultChannels` to the controller as
    the JSON its --default-notify takes, channel for channel."""
    args = only(rendered["full"], "Deployment", f"{RELEASE}")["spec"]["template"]["spec"]["containers"][0]["args"]
    channels = json.loads(args[args.index("--default-notify") + 1])
    assert channels == VALUE_SETS["full"]["notifications"]["defaultChannels"]
    default_args = only(rendered["default"], "Deployment", f"{RELEASE}")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--default-notify" not in default_args
    # notifications.allowCidrs: one --notify-allow-cidr per range, none by default.
    allowed = [args[i + 1] for i, a in enumerate(args) if a == "--notify-allow-cidr"]
    assert allowed == VALUE_SETS["full"]["notifications"]["allowCidrs"], args
    assert "--notify-allow-cidr" not in default_args



def test_the_console_network_policy_admits_only_the_named_peers(chart):
    proxy = {"podSelector": {"matchLabels": {"app": "oauth2-proxy"}}}
    objects = render(chart, {"console": {"enabled": True, "proxy": {"existingSecret": "p"},
                                         "networkPolicy": {"enabled": True, "from": [proxy]}}})
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"
                and o["metadata"]["labels"].get("app.kubernetes.io/component") == "console"]
    assert len(policies) == 1, policies
    policy = policies[0]
    kubernetes_validate.validate(policy, KUBE_VERSION, strict=True)
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-console"))
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert policy["spec"]["ingress"] == [{"from": [proxy], "ports": [{"port": "http", "protocol": "TCP"}]}]
    # Enabled without peers would shut everyone out: refused at render time.
    with pytest.raises(Exception, match="must name who may reach the console"):
        render(chart, {"console": {"enabled": True, "networkPolicy": {"enabled": True}}})
