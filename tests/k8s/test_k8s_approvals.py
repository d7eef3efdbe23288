"""Approvals decided by impersonated users (`kubectl --as USER --as-group G`)
against the chart's real RBAC: the approver ClusterRole bound to a group,
the webhook pinning `decidedBy`/`decidedByGroups` to what the API server
authenticated, and the controller's approvers check; the database row the
controller resolves is read back from PostgreSQL."""
import json
import subprocess
import time

from k8s_env import profile, ready, wait_for



def _psql(cluster, sql):
    out = subprocess.run(["psql", cluster["database_url"], "-v", "ON_ERROR_STOP=1", "-AtXqc", sql],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _get(kube, name, ns):
    """The Approval: in the tenant's own namespace (the chart's default)."""
    return kube.get("approval", name, "-n", ns)


def _pending(kube, cluster, approval_id, tenant, version):
    now = int(time.time() * 1000)
    _psql(cluster, "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, policy_version,"
                   " decision_id, requested_by, status, created_at, expires_at, action, preview) VALUES"
                   f" ('{approval_id}', '{tenant}', 'inv-{approval_id}', 'run-1', 'bash', 'sha256:abc',"
                   f" '{version}', 'dec-{approval_id}', 'sidecar/agent-0', 'pending', {now}, {now + 900_000},"
                   " 'bash', 'make deploy')")
    name = f"apr-{approval_id}"
    wait_for("mirrored Approval", lambda: _get(kube, name, tenant), 30)
    return name


def test_impersonated_approvals_against_chart_rbac(kube, cluster):
    ns = kube.namespace("approving")
    kube.apply(profile("safe-coding", ns))
    version = wait_for("profile Ready", lambda: (p := kube.get("tgp", "safe-coding", "-n", ns))
                       and ready(p.get("status")) and p["status"]["version"])
    kube("-n", ns, "create", "rolebinding", "toolgate-approvers", "--clusterrole=toolgate-approver",
         "--group=platform-oncall", "--group=helpers")

    name = _pending(kube, cluster, "e2e-1", ns, version)
    obj = _get(kube, name, ns)
    assert obj["spec"]["request"]["profile"] == "safe-coding" and obj["status"]["phase"] == "Pending", obj

    def decide(user, groups, spec, check=False):
        return kube("patch", "approval", name, "-n", ns, "--type", "merge",
                    "-p", json.dumps({"spec": spec}), as_user=user, groups=groups, check=check)

    # 1. RBAC: a user in no bound group may not even read Approvals.
    out = kube("get", "approvals", "-n", ns, as_user="mallory", check=False)
    assert out.returncode != 0 and "Forbidden" in out.stderr, out.stderr
    out = decide("mallory", [], {"decision": "approved", "decidedBy": "mallory"})
    assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr
    # ... and the approver role gives exactly get/list/watch/patch, not delete.
    out = kube("delete", "approval", name, "-n", ns, as_user="carol", groups=["platform-oncall"],
               check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr

    # 2. The webhook pins decidedBy to the authenticated user ...
    out = decide("dave", ["platform-oncall"], {"decision": "approved", "decidedBy": "carol"})
    assert out.returncode != 0 and "approvals.validate.toolgate.dev" in out.stderr, out.stderr
    assert "spec.decidedBy" in out.stderr, out.stderr
    # ... and decidedByGroups to the groups the API server authenticated.
    out = decide("dave", ["helpers"], {"decision": "approved", "decidedBy": "dave",
                                       "decidedByGroups": ["platform-oncall"]})
    assert out.returncode != 0 and "spec.decidedByGroups" in out.stderr, out.stderr
    assert _psql(cluster, "SELECT status FROM approvals WHERE id = 'e2e-1'") == "pending"

    # 3. Issue #46 item 2: a user RBAC lets decide but the profile's approvers
    #    do not name (group:platform-oncall only) is refused at admission, so
    #    nothing sticks: no decision, no decidedBy, the row pending ...
    out = decide("erin", ["helpers"], {"decision": "denied", "decidedBy": "erin", "decidedByGroups": ["helpers"]})
    assert out.returncode != 0 and "approvals.validate.toolgate.dev" in out.stderr, out.stderr
    assert "approver_not_allowed" in out.stderr and "spec.approvals.approvers" in out.stderr, out.stderr
    assert f"PolicyProfile {ns}/safe-coding" in out.stderr, out.stderr
    spec = _get(kube, name, ns)["spec"]
    assert "decision" not in spec and "decidedBy" not in spec, spec
    assert _psql(cluster, "SELECT status FROM approvals WHERE id = 'e2e-1'") == "pending"
    # ... and the real approver's decision of the same approval goes through.
    decide("carol", ["platform-oncall"], {"decision": "approved", "decidedBy": "carol",
                                          "decidedByGroups": ["platform-oncall"]}, check=True)
    wait_for("e2e-1 resolved", lambda: _psql(
        cluster, "SELECT status, resolved_by FROM approvals WHERE id = 'e2e-1'") == "approved|carol")
    # Fail closed: a profile the webhook cannot find refuses every decision.
    lost = _pending(kube, cluster, "e2e-3", ns, "no-such-profile@sha256:00")
    out = kube("patch", "approval", lost, "-n", ns, "--type", "merge", "-p",
               json.dumps({"spec": {"decision": "approved", "decidedBy": "carol"}}), as_user="carol",
               groups=["platform-oncall"], check=False)
    assert out.returncode != 0 and "not found" in out.stderr, out.stderr
    assert "decision" not in _get(kube, lost, ns)["spec"]

    # 4. An approver, as herself, in her authenticated group: resolved in the database.
    name = _pending(kube, cluster, "e2e-2", ns, version)
    decide("carol", ["platform-oncall"], {"decision": "approved", "decidedBy": "carol",
                                          "decidedByGroups": ["platform-oncall"], "reason": "e2e says yes"},
           check=True)
    row = wait_for("approval resolved", lambda: (r := _psql(
        cluster, "SELECT status, resolved_by, reason FROM approvals WHERE id = 'e2e-2'")).startswith("approved") and r)
    assert row == "approved|carol|e2e says yes", row
    wait_for("Approved phase", lambda: _get(kube, name, ns)["status"].get("phase") == "Approved")
    # A decision is final: the CRD's rule refuses changing it, whoever asks.
    out = decide("carol", ["platform-oncall"], {"decision": "denied", "decidedBy": "carol"})
    assert out.returncode != 0 and "cannot be changed" in out.stderr, out.stderr
