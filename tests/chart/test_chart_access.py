"""Who the chart lets do what: RBAC exactly as the controller uses it, the
admission webhooks and their certificates, network policies, and the
console's impersonation rights."""
from __future__ import annotations

import base64
import json
from typing import Iterable

import pytest
import yaml

from chart_helpers import (CHART, KUBE_VERSION, NAMESPACE, RELEASE, ROOT, VALUE_SETS, all_of, deployment, helm,
                           kubernetes_validate, label_selector_matches, only, render)


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
