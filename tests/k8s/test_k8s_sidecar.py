"""A real sidecar process (this checkout's binary) run from an injected
pod's spec as a kubelet would: the bundle and trust set from the ConfigMaps
the controller published, the tenant credential from the Secret it wrote
into the namespace. An escalation becomes an Approval object, an approver
(a client certificate, in the chart's RBAC) approves it with
`kubectl toolgate approve`, the approved call passes once; the finished
Approval object is deleted after its retention while the database row
stays; `kubectl toolgate cancel` stops the run in the sidecar."""
import json
import subprocess
import urllib.request

from k8s_env import post_json, profile, start_injected_sidecar, stop_sidecar, user_kubeconfig, wait_for


def _psql(cluster, sql):
    out = subprocess.run(["psql", cluster["database_url"], "-AtXqc", sql], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_sidecar_escalation_approval_retention_and_cancellation(kube, cluster, tmp_path):
    ns = kube.namespace("sidecar-e2e", {"toolgate.dev/inject": "true"})
    approvals = {"ttlSeconds": 900, "approvers": ["group:platform-oncall"], "retentionSeconds": 3}
    # A profile name of its own: a request's retention is the longest among
    # the profiles of its name, cluster-wide (documented in approval/status.rs).
    kube.apply(profile("sidecar-coding", ns, approvals=approvals))
    wait_for("bundle and tenant Secret", lambda: kube.get("configmap", "toolgate-bundle-sidecar-coding", "-n", ns)
             and kube.get("secret", "toolgate-database", "-n", ns))
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "oncall-approves", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "toolgate-approver"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                              "name": "platform-oncall"}]})
    url, _, proc = start_injected_sidecar(kube, ns, "agent-0", "sidecar-coding", tmp_path)
    try:
        call = {"tool": "bash", "arguments": {"command": "git status"}, "run_id": "run-1"}
        status, allowed = post_json(f"{url}/v1/authorize", call)
        assert (status, allowed["verdict"]) == (200, "allow"), allowed
        version = kube.get("tgp", "sidecar-coding", "-n", ns)["status"]["version"]
        assert allowed["policy_version"] == version

        # An escalation: recorded with the tenant's own database role ...
        call = {"tool": "bash", "arguments": {"command": "make deploy"}, "run_id": "run-1"}
        status, escalated = post_json(f"{url}/v1/authorize", call)
        assert escalated["verdict"] == "escalate" and escalated["approval_id"], escalated
        approval_id = escalated["approval_id"]
        assert _psql(cluster, f"SELECT tenant, status FROM approvals WHERE id = '{approval_id}'") == f"{ns}|pending"
        # ... mirrored by the controller as an Approval object, decided by an approver.
        name = f"apr-{approval_id}"
        obj = wait_for("mirrored Approval", lambda: kube.get("approval", name, "-n", ns), 30)
        request = obj["spec"]["request"]
        assert request["tenant"] == ns and request["profile"] == "sidecar-coding"
        # ... carrying why: the escalating decision's reason, rule and policy
        # version as the decision log recorded them, and the run's earlier
        # decision (the allowed `git status`).
        why = request["escalation"]
        assert why["reason"] == "escalate_rule" and why["matchedRule"], why
        assert request["policyVersion"] == version and escalated["policy_version"] == version
        assert [(d["tool"], d["verdict"]) for d in why["history"]] == [("bash", "allow")], why
        # The plugin, as carol (a client certificate: plugins take no --as):
        # list, then approve with decidedBy/decidedByGroups from a SelfSubjectReview.
        carol = dict(kube.env, KUBECONFIG=str(user_kubeconfig(cluster, "carol", ["platform-oncall"],
                                                               tmp_path / "carol.kubeconfig")))
        plugin = [cluster["kubectl"], "toolgate"]
        listed = subprocess.run([*plugin, "list", "-n", ns], env=carol, capture_output=True, text=True)
        assert listed.returncode == 0 and name in listed.stdout and "make deploy" in listed.stdout, listed
        assert "WHY" in listed.stdout and "escalate_rule (" in listed.stdout, listed.stdout
        listed = subprocess.run([*plugin, "approvals", "-n", ns, "-o", "json"], env=carol,
                                capture_output=True, text=True)
        assert listed.returncode == 0, listed
        items = {i["metadata"]["name"]: i for i in json.loads(listed.stdout)["items"]}
        assert items[name]["spec"]["request"]["escalation"]["reason"] == "escalate_rule", listed.stdout
        approved = subprocess.run([*plugin, "approve", name, "-n", ns, "--reason", "e2e"], env=carol,
                                  capture_output=True, text=True)
        assert approved.returncode == 0 and "approved" in approved.stdout, approved
        spec = kube.get("approval", name, "-n", ns)["spec"]
        assert spec["decidedBy"] == "carol" and "platform-oncall" in spec["decidedByGroups"], spec
        with urllib.request.urlopen(f"{url}/v1/approvals/{approval_id}?wait=30", timeout=40) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "approved", answer

        # The approved call passes once; the same call again escalates anew.
        status, passed = post_json(f"{url}/v1/authorize", call)
        assert passed["verdict"] == "allow", passed
        status, again = post_json(f"{url}/v1/authorize", call)
        assert again["verdict"] == "escalate" and again["approval_id"] != approval_id, again

        # Retention: the finished Approval object goes, the database row stays.
        wait_for("Approval deleted after retention", lambda: kube.get("approval", name, "-n", ns) is None,
                 60)
        assert _psql(cluster, f"SELECT status, resolved_by FROM approvals WHERE id = '{approval_id}'") \
            == "approved|carol"

        # `kubectl toolgate cancel` stops the run: the sidecar refuses its calls
        # and the run's pending approval (the second escalation) is cancelled.
        out = kube("toolgate", "cancel", "run-1", "-n", ns, "--reason", "e2e stop", "--wait", "30")
        assert "applied" in out.stdout and "1 pending approval(s) cancelled" in out.stdout, out.stdout
        status, refused = post_json(f"{url}/v1/authorize", {**call, "arguments": {"command": "git status"}})
        assert refused.get("reason") == "run_cancelled" or refused.get("code") == "run_cancelled", refused
        rc = kube.get("tgrc", "-n", ns)["items"]
        assert [(o["spec"]["runId"], o["status"]["phase"]) for o in rc] == [("run-1", "Applied")], rc

        # The agent steps around a run stop with a new run id; stopping the
        # whole namespace (a kill switch) refuses every run id.
        status, other = post_json(f"{url}/v1/authorize",
                                  {**call, "run_id": "run-2", "arguments": {"command": "git status"}})
        assert other.get("verdict") == "allow", other
        out = kube("toolgate", "cancel", "--all", "-n", ns, "--reason", "kill switch", "--wait", "30")
        assert "applied: namespace cancelled" in out.stdout, out.stdout
        for run in ("run-2", "run-3"):
            status, refused = post_json(f"{url}/v1/authorize",
                                        {**call, "run_id": run, "arguments": {"command": "git status"}})
            assert refused.get("reason") == "run_cancelled", (run, refused)
        scoped = [o for o in kube.get("tgrc", "-n", ns)["items"] if o["spec"].get("scope") == "namespace"]
        assert [o["status"]["phase"] for o in scoped] == ["Applied"], scoped
    finally:
        stop_sidecar(proc)
