"""Pods through the real admission chain: kube-apiserver calls the chart's
webhook configurations over TLS (caBundle from the harness's CA), applies
the JSON patch, then runs its own validation and PodSecurity admission on
the mutated pod. No kubelet runs: admitted pods stay Pending."""
import base64
import copy
import http.server
import json
import pathlib
import ssl
import threading

import pytest

from k8s_env import profile, wait_for

SIDECAR = "toolgate-sidecar"

RESTRICTED = {
    "allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(name: str, ns: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": {"toolgate.dev/profile": "safe-coding"}},
            "spec": {"containers": [{"name": "agent", "image": "example.invalid/agent:1",
                                     "securityContext": RESTRICTED}], **spec}}


@pytest.fixture(scope="module")
def agents(kube):
    """An injected namespace holding a published profile."""
    ns = kube.namespace("agents", {"toolgate.dev/inject": "true"})
    kube.apply(profile("safe-coding", ns))
    wait_for("tenant Secret", lambda: kube.get("secret", "toolgate-database", "-n", ns))
    return ns


def _sidecar(obj):
    both = obj["spec"].get("initContainers", []) + obj["spec"]["containers"]
    return next((c for c in both if c["name"] == SIDECAR), None)


def test_pod_gets_native_sidecar(kube, agents):
    out = kube.create(pod("agent-1", agents))
    obj = kube.get("pod", "agent-1", "-n", agents)
    init = obj["spec"]["initContainers"]
    assert init[0]["name"] == SIDECAR and init[0]["restartPolicy"] == "Always", init
    env = {e["name"]: e for e in init[0]["env"]}
    assert env["TOOLGATE_TENANT"]["value"] == agents, env
    assert env["TOOLGATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "toolgate-database", env
    agent = obj["spec"]["containers"][0]
    assert any(e["name"] == "TOOLGATE_URL" for e in agent["env"]), agent
    assert obj["metadata"]["annotations"]["toolgate.dev/injected"] == "true"
    assert {"toolgate-bundle", "toolgate-trust", "toolgate-workspace"} <= {v["name"] for v in obj["spec"]["volumes"]}
    # The API server's own ServiceAccount admission ran too (token volume).
    assert any(v["name"].startswith("kube-api-access-") for v in obj["spec"]["volumes"])
    assert obj["status"]["phase"] == "Pending"
    assert "Warning" not in out.stderr, out.stderr


def test_restricted_pod_security_accepts_the_mutated_pod(kube):
    """PodSecurity admission (enforce=restricted) judges the pod after the
    webhook's patch: the injected sidecar must satisfy it too."""
    ns = kube.namespace("agents-restricted", {"toolgate.dev/inject": "true",
                                              "pod-security.kubernetes.io/enforce": "restricted"})
    kube.apply(profile("safe-coding", ns))
    out = kube.create(pod("agent-1", ns), check=False)
    assert out.returncode == 0, out.stderr
    obj = kube.get("pod", "agent-1", "-n", ns)
    assert _sidecar(obj) is not None
    # The same pod without the app's own restricted settings is refused by
    # PodSecurity, naming the app container only, not the sidecar.
    loose = pod("agent-2", ns)
    del loose["spec"]["containers"][0]["securityContext"]
    out = kube.create(loose, check=False)
    assert out.returncode != 0 and "violates PodSecurity" in out.stderr, out.stderr
    assert 'container "agent"' in out.stderr and SIDECAR not in out.stderr, out.stderr


def test_pod_label_selects_injection_outside_labelled_namespaces(kube):
    ns = kube.namespace("mixed")
    kube.create(pod("plain", ns))
    assert _sidecar(kube.get("pod", "plain", "-n", ns)) is None
    labelled = pod("labelled", ns)
    labelled["metadata"]["labels"] = {"toolgate.dev/inject": "true"}
    kube.create(labelled)
    assert _sidecar(kube.get("pod", "labelled", "-n", ns)) is not None


def test_no_profile_is_admitted_with_a_warning(kube, agents):
    bare = pod("no-profile", agents)
    del bare["metadata"]["annotations"]
    out = kube.create(bare)
    assert "Warning" in out.stderr and "toolgate.dev/profile" in out.stderr, out.stderr
    assert _sidecar(kube.get("pod", "no-profile", "-n", agents)) is None


def _refusals():
    def with_(name, mutate):
        p = pod(name, "{ns}")
        mutate(p)
        return p

    def ann(p, k, v):
        p["metadata"]["annotations"][k] = v

    def container(p, **extra):
        p["spec"]["containers"].append({"name": "other", "image": "example.invalid/x:1", **extra})

    return [
        ("tenant-annotation", lambda p: ann(p, "toolgate.dev/tenant", "someone-else"), "toolgate.dev/tenant"),
        ("own-sidecar", lambda p: container(p) or p["spec"]["containers"][1].update(name=SIDECAR), SIDECAR),
        ("own-init-sidecar", lambda p: p["spec"].update(initContainers=[
            {"name": SIDECAR, "image": "example.invalid/allow-all:1"}]), SIDECAR),
        ("bundle-volume", lambda p: p["spec"].update(volumes=[{"name": "toolgate-bundle", "emptyDir": {}}]),
         "toolgate-bundle"),
        ("workspace-mount", lambda p: p["spec"]["containers"][0].update(volumeMounts=[
            {"name": "toolgate-workspace", "mountPath": "/ws"}]), "toolgate-workspace"),
        ("host-network", lambda p: p["spec"].update(hostNetwork=True), "hostNetwork"),
        ("host-pid", lambda p: p["spec"].update(hostPID=True), "hostPID"),
        ("share-process-namespace", lambda p: p["spec"].update(shareProcessNamespace=True),
         "shareProcessNamespace"),
    ]


@pytest.mark.parametrize("name,mutate,field", _refusals(), ids=[r[0] for r in _refusals()])
def test_webhook_refusals_from_the_chart_readme(kube, agents, name, mutate, field):
    p = pod(name, agents)
    mutate(p)
    out = kube.create(p, check=False)
    assert out.returncode != 0, out.stdout
    assert 'admission webhook "namespace.inject.toolgate.dev" denied the request' in out.stderr, out.stderr
    assert "[injection_refused]" in out.stderr and field in out.stderr, out.stderr
    assert kube.get("pod", name, "-n", agents) is None


def test_namespace_mismatch_never_reaches_the_webhook(kube, agents):
    """The README's `metadata.namespace` refusal is defence in depth: the
    API server itself refuses a pod whose namespace is not the request's."""
    p = pod("elsewhere", "other-tenant")
    out = kube("create", "--raw", f"/api/v1/namespaces/{agents}/pods", "-f", "-", input=json.dumps(p), check=False)
    assert out.returncode != 0 and "does not match the namespace" in out.stderr, out.stderr


def test_sidecar_is_immutable_after_creation(kube, agents):
    kube.create(pod("immutable", agents))
    obj = kube.get("pod", "immutable", "-n", agents)
    index = next(i for i, c in enumerate(obj["spec"]["initContainers"]) if c["name"] == SIDECAR)
    out = kube("patch", "pod", "immutable", "-n", agents, "--type", "json", "-p", json.dumps(
        [{"op": "replace", "path": f"/spec/initContainers/{index}/image", "value": "example.invalid/fake:1"}]),
        check=False)
    assert out.returncode != 0, out.stdout
    assert 'admission webhook "pods.validate.toolgate.dev" denied the request' in out.stderr, out.stderr
    assert "[sidecar_immutable]" in out.stderr, out.stderr
    # An ephemeral container reaching into the sidecar (kubectl debug --target).
    debug = copy.deepcopy(obj)
    debug["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "example.invalid/busybox:1",
                                             "targetContainerName": SIDECAR}]
    out = kube("replace", "--subresource", "ephemeralcontainers", "-f", "-", input=json.dumps(debug), check=False)
    assert out.returncode != 0 and "[sidecar_immutable]" in out.stderr, out.stderr
    # An in-place resize of the sidecar (pods/resize).
    out = kube("patch", "pod", "immutable", "-n", agents, "--subresource", "resize", "--type", "json", "-p",
               json.dumps([{"op": "replace", "path": f"/spec/initContainers/{index}/resources/limits/cpu",
                            "value": "2"}]), check=False)
    assert out.returncode != 0 and "[sidecar_immutable]" in out.stderr, out.stderr
    # Metadata-only patches are not even sent to the webhook (matchConditions).
    kube("label", "pod", "immutable", "-n", agents, "team=e2e")
    # An ordinary debug container is allowed.
    debug["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "example.invalid/busybox:1",
                                             "targetContainerName": "agent"}]
    debug["metadata"].pop("resourceVersion")
    out = kube("replace", "--subresource", "ephemeralcontainers", "-f", "-", input=json.dumps(debug), check=False)
    assert out.returncode == 0, out.stderr


class _LateContainer(http.server.BaseHTTPRequestHandler):
    """A second mutating webhook, called after toolgate's (configurations
    run in name order), that appends a container: the API server must then
    reinvoke toolgate's (reinvocationPolicy: IfNeeded)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        containers = request["object"]["spec"]["containers"]
        patch = [] if any(c["name"] == "late" for c in containers) else [
            {"op": "add", "path": "/spec/containers/-", "value": {
                "name": "late", "image": "example.invalid/late:1", "securityContext": RESTRICTED}}]
        response = {"uid": request["uid"], "allowed": True}
        if patch:
            response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_reinvocation_after_a_later_webhook_adds_a_container(kube, cluster):
    ns = kube.namespace("reinvoke", {"toolgate.dev/inject": "true"})
    kube.apply(profile("safe-coding", ns))
    d = pathlib.Path(cluster["dir"])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LateContainer)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(d / "webhook.crt", d / "webhook.key")  # CA-signed, SAN 127.0.0.1
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zz-e2e-late-container"},
        "webhooks": [{
            "name": "late.e2e.toolgate.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "clientConfig": {"url": f"https://127.0.0.1:{server.server_address[1]}/mutate",
                             "caBundle": base64.b64encode((d / "ca.crt").read_bytes()).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        }],
    }
    kube.apply(config)
    try:
        out = kube.create(pod("agent-1", ns), check=False)
        assert out.returncode == 0, out.stderr
        obj = kube.get("pod", "agent-1", "-n", ns)
        late = next(c for c in obj["spec"]["containers"] if c["name"] == "late")
        # Reinvoked, toolgate gave the late container the agent API's address
        # and accepted its own sidecar as it found it.
        assert any(e["name"] == "TOOLGATE_URL" for e in late.get("env", [])), late
        assert [c["name"] for c in obj["spec"]["initContainers"]].count(SIDECAR) == 1
    finally:
        kube("delete", "mutatingwebhookconfiguration", "zz-e2e-late-container", check=False)
        server.shutdown()
