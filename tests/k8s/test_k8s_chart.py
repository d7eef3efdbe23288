"""The chart as the real API server takes it: `envtest.py up` applied every
object `helm template` renders (webhooks pointed at the local webhook) with
server-side apply under field manager `helm`; here, that they are stored as
rendered, that applying them again is a no-op without conflicts, and that
the controller's ServiceAccount holds exactly what the chart grants."""
import json
import pathlib

NS = "toolgate-system"
SA = f"system:serviceaccount:{NS}:toolgate"


def _chart(cluster):
    return json.loads((pathlib.Path(cluster["dir"]) / "chart.json").read_text())["items"]


def test_chart_objects_stored_and_reapplied_without_conflict(kube, cluster):
    items = _chart(cluster)
    kinds = {o["kind"] for o in items}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
            "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds, kinds
    for obj in items:
        ns = obj["metadata"].get("namespace")
        stored = kube.get(obj["kind"].lower(), obj["metadata"]["name"], *(["-n", ns] if ns else []),
                          "--show-managed-fields")
        assert stored, (obj["kind"], obj["metadata"]["name"])
        assert any(m["manager"] == "helm" and m["operation"] == "Apply" for m in stored["metadata"]["managedFields"])
    out = kube("apply", "--server-side", "--field-manager", "helm", "-f", str(pathlib.Path(cluster["dir"]) /
                                                                             "chart.json"))
    assert "conflict" not in out.stderr.lower(), out.stderr
    # The Deployment's pod template passes the API server's validation and
    # the namespace's default PodSecurity; no controller-manager runs, so no pods.
    dep = kube.get("deployment", "toolgate", "-n", NS)
    assert dep["spec"]["replicas"] == 2 and not dep.get("status", {}).get("replicas")


def test_controller_rbac_is_what_the_chart_grants(kube):
    def can(verb, resource, ns=None):
        args = ["auth", "can-i", verb, resource, "--as", SA] + (["-n", ns] if ns else ["--all-namespaces"])
        return kube(*args, check=False).stdout.strip() == "yes"

    assert can("patch", "policyprofiles.toolgate.dev")
    assert can("patch", "policyprofiles.toolgate.dev/status")
    assert can("create", "configmaps", "agents")
    assert can("create", "leases.coordination.k8s.io", NS)
    assert not can("get", "pods", "agents")
    assert not can("list", "secrets")
    assert not can("create", "leases.coordination.k8s.io", "agents")

