"""PolicyProfiles against a real kube-apiserver: the controller (running as
the chart's ServiceAccount, so with exactly the chart's RBAC) publishes a
signed bundle and the status the CRD's printer columns show; the validating
webhook and the CRDs' CEL rules refuse bad objects at the API server."""
import json
import subprocess

import pytest

from k8s_env import profile, ready, wait_for


def _verify(kube, tmp_path, ns, cm):
    trust = kube.get("configmap", "toolgate-trust", "-n", ns)
    assert trust, "toolgate-trust ConfigMap in the profile namespace"
    (tmp_path / "bundle.json").write_text(cm["data"]["bundle.json"])
    (tmp_path / "trust.pem").write_text(trust["data"]["trust.pem"])
    out = subprocess.run([kube.cluster["toolgate"], "bundle", "verify", "--bundle", str(tmp_path / "bundle.json"),
                          "--trust", str(tmp_path / "trust.pem")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_profile_becomes_signed_bundle_with_status(kube, tmp_path):
    ns = kube.namespace("bundles")
    kube.apply(profile("safe-coding", ns))
    cm = wait_for("bundle ConfigMap", lambda: kube.get("configmap", "toolgate-bundle-safe-coding", "-n", ns))
    verified = _verify(kube, tmp_path, ns, cm)
    ann = cm["metadata"]["annotations"]
    assert verified["policy_version"] == ann["toolgate.dev/policy-version"]
    assert verified["sequence"] == 1 and ann["toolgate.dev/sequence"] == "1"
    assert verified["digest"] == ann["toolgate.dev/bundle-digest"]
    owner = cm["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("PolicyProfile", "safe-coding")

    # Status written through the status subresource, with real conditions.
    obj = wait_for("profile Ready", lambda: (p := kube.get("tgp", "safe-coding", "-n", ns))
                   and ready(p.get("status")) and p)
    status = obj["status"]
    assert status["version"] == verified["policy_version"]
    assert status["bundleRef"] == "toolgate-bundle-safe-coding"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Valid"]["status"] == "True", conditions
    for c in conditions.values():
        assert c["lastTransitionTime"] and c["reason"], c
    assert "toolgate.dev/cleanup" in obj["metadata"]["finalizers"]
    # Status and spec are owned by different managers (server-side apply).
    fields = kube.get("tgp", "safe-coding", "-n", ns, "--show-managed-fields")["metadata"]["managedFields"]
    managers = {(m["manager"], m.get("subresource", "")) for m in fields}
    assert ("e2e", "") in managers and any(sub == "status" for _, sub in managers), managers

    # The printer columns the real API server serves from the CRD.
    table = kube("get", "tgp", "-n", ns).stdout
    header, row = table.splitlines()[:2]
    assert "READY" in header and "VERSION" in header, table
    assert "True" in row.split() and verified["policy_version"] in row, table

    # The controller provisioned the namespace's own database credential.
    secret = wait_for("tenant database Secret", lambda: kube.get("secret", "toolgate-database", "-n", ns))
    assert "url" in secret["data"]

    # An Event on the profile, written with events.k8s.io (the chart's RBAC).
    events = kube.get("events.events.k8s.io", "-n", ns)
    assert any(e.get("regarding", {}).get("name") == "safe-coding" for e in events["items"]), events


def test_invalid_profile_refused_by_the_webhook(kube):
    ns = kube.namespace("bad-profiles")
    bad = profile("bad-glob", ns)
    bad["spec"]["rules"]["bash"]["allow"] = [""]  # the one glob fnmatch gives no meaning
    out = kube.create(bad, check=False)
    assert out.returncode != 0
    assert 'admission webhook "policyprofiles.validate.toolgate.dev" denied the request' in out.stderr, out.stderr
    assert "spec.rules.bash.allow[0]" in out.stderr and "[profile_invalid_glob]" in out.stderr, out.stderr
    assert kube.get("tgp", "bad-glob", "-n", ns) is None


GRANT = {"profile": "p", "tool": "bash", "glob": "make *", "subjects": ["*"], "expiresAt": "2099-01-01T00:00:00Z"}
REQUEST = {"approvalId": "a-1", "argsDigest": "sha256:00", "invocationId": "i-1", "policyVersion": "p@1",
           "runId": "run-1", "tenant": "cel", "tool": "bash"}


@pytest.mark.parametrize("kind,obj,message", [
    ("PolicyProfile", {"spec": {"mode": "rules", "approvals": {"ttlSeconds": 0}}},
     "approvals.ttlSeconds must be positive"),
    ("Approval", {"spec": {"request": REQUEST, "grant": GRANT}},
     "exactly one of spec.request and spec.grant must be set"),
    ("Approval", {"spec": {}}, "exactly one of spec.request and spec.grant must be set"),
    ("Approval", {"spec": {"decidedBy": "carol", "grant": GRANT}}, "spec.decidedBy needs spec.decision"),
    ("RunCancellation", {"spec": {"reason": "no run named"}}, "runId names the run of scope run"),
    ("RunCancellation", {"spec": {"scope": "namespace", "runId": "run-1"}}, "runId names the run of scope run"),
    ("RunCancellation", {"spec": {"scope": "pod"}}, "target names the pod or profile"),
    ("RunCancellation", {"spec": {"scope": "namespace", "target": "x"}}, "target names the pod or profile"),
])
def test_crd_cel_rules_refuse_at_the_api_server(kube, kind, obj, message):
    """The generated CRDs' x-kubernetes-validations, compiled by the real API
    server, refuse these before any webhook sees them."""
    ns = kube.namespace("cel")
    obj = {"apiVersion": "toolgate.dev/v1alpha1", "kind": kind,
           "metadata": {"name": f"cel-{kind.lower()}", "namespace": ns}, **obj}
    out = kube.create(obj, check=False)
    assert out.returncode != 0, out.stdout
    assert "Invalid value" in out.stderr and message in out.stderr, out.stderr


def test_crd_cel_transition_rules(kube):
    """Rules on oldSelf: a RunCancellation's spec and a decided Approval's
    decision cannot change."""
    ns = kube.namespace("cel-transitions")
    rc = {"apiVersion": "toolgate.dev/v1alpha1", "kind": "RunCancellation",
          "metadata": {"name": "stop-run-1", "namespace": ns}, "spec": {"runId": "run-1", "reason": "e2e"}}
    kube.create(rc)
    out = kube("patch", "tgrc", "stop-run-1", "-n", ns, "--type", "merge", "-p",
               json.dumps({"spec": {"runId": "run-2"}}), check=False)
    assert out.returncode != 0 and "spec is immutable: create another RunCancellation" in out.stderr, out.stderr

    # A decided standing grant keeps its decision (CEL runs before the webhook).
    # Its profile names the admin as an approver: the webhook admits a
    # decision only from an approver of a profile it can read (#46 item 2).
    kube.apply(profile("decider", ns, approvals={"ttlSeconds": 900, "approvers": ["user:envtest-admin"]}))
    grant = {"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
             "metadata": {"name": "grant-decided", "namespace": ns},
             "spec": {"grant": {**GRANT, "profile": "decider"}, "decision": "denied",
                      "decidedBy": "envtest-admin"}}
    kube.create(grant)
    out = kube("patch", "tga", "grant-decided", "-n", ns, "--type", "merge", "-p",
               json.dumps({"spec": {"decision": "approved"}}), check=False)
    assert out.returncode != 0 and "spec.decision cannot be changed once set" in out.stderr, out.stderr

    # A pending request cannot be turned into a standing grant (nor a grant
    # into a request): removing one member and adding the other is refused,
    # which `self == oldSelf` on the member alone never caught.
    request = {"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
               "metadata": {"name": "request-pending", "namespace": ns},
               "spec": {"request": {**REQUEST, "tenant": ns}}}
    # Only the controller creates requests (the webhook refuses anyone else).
    kube.create(request, as_user=kube.cluster["controller_user"])
    out = kube("patch", "tga", "request-pending", "-n", ns, "--type", "json", "-p", json.dumps([
        {"op": "remove", "path": "/spec/request"},
        {"op": "add", "path": "/spec/grant", "value": {**GRANT, "profile": "nope"}}]), check=False)
    assert out.returncode != 0 and "an Approval stays a request or a grant" in out.stderr, out.stderr
    out = kube("patch", "tga", "grant-decided", "-n", ns, "--type", "json", "-p", json.dumps([
        {"op": "remove", "path": "/spec/grant"},
        {"op": "add", "path": "/spec/request", "value": {**REQUEST, "tenant": ns}}]), check=False)
    assert out.returncode != 0 and "an Approval stays a request or a grant" in out.stderr, out.stderr


def test_standing_grant_new_version_and_deletion(kube, tmp_path):
    """A standing grant approved by an approver (impersonated) gives the
    profile a new signed version; one decided by someone RBAC allows but
    the approvers do not name is never compiled in; deleting the profile
    removes its bundle and then the finalizer."""
    ns = kube.namespace("grants")
    kube.apply(profile("safe-coding", ns))
    first = wait_for("profile Ready", lambda: (p := kube.get("tgp", "safe-coding", "-n", ns))
                     and ready(p.get("status")) and p["status"])
    kube("-n", ns, "create", "rolebinding", "approvers", "--clusterrole=toolgate-approver",
         "--group=platform-oncall", "--group=helpers")
    grant = {"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
             "metadata": {"name": "grant-make", "namespace": ns},
             "spec": {"grant": {**GRANT, "profile": "safe-coding"}}}
    kube.create(grant)
    rogue = {**grant, "metadata": {"name": "grant-everything", "namespace": ns},
             "spec": {"grant": {**GRANT, "profile": "safe-coding", "glob": "*"}}}
    kube.create(rogue)

    def decide(name, user, groups, check=True):
        return kube("patch", "approval", name, "-n", ns, "--type", "merge", "-p", json.dumps(
            {"spec": {"decision": "approved", "decidedBy": user, "decidedByGroups": groups}}),
            as_user=user, groups=groups, check=check)

    # Someone RBAC lets decide but the approvers do not name is refused at
    # admission (#46 item 2): no decision sticks on the rogue grant.
    out = decide("grant-everything", "erin", ["helpers"], check=False)
    assert out.returncode != 0 and "approver_not_allowed" in out.stderr, out.stderr
    assert "decision" not in kube.get("approval", "grant-everything", "-n", ns)["spec"]
    decide("grant-make", "carol", ["platform-oncall"])
    status = wait_for("new version with the grant", lambda: (s := kube.get("tgp", "safe-coding", "-n", ns)["status"])
                      .get("sequence") == 2 and s)
    assert status["grants"] == 1 and status["version"] != first["version"], status
    cm = kube.get("configmap", "toolgate-bundle-safe-coding", "-n", ns)
    verified = _verify(kube, tmp_path, ns, cm)
    assert (verified["sequence"], verified["policy_version"]) == (2, status["version"])

    kube("delete", "tgp", "safe-coding", "-n", ns, "--wait=false")
    wait_for("bundle ConfigMap deleted", lambda: kube.get("configmap", "toolgate-bundle-safe-coding", "-n", ns)
             is None)
    wait_for("profile gone (finalizer removed)", lambda: kube.get("tgp", "safe-coding", "-n", ns) is None)
