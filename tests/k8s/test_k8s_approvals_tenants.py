"""Approvals where the tenants are (issue #46 item 1), on the real API
server with the chart's RBAC and webhook: each pending approval appears in
the namespace of the agent that asked, so one RoleBinding of the approver
role scopes an approver to a team; only the controller may create request
Approvals; an object outside its tenant's namespace answers nothing; and a
cluster that used the old single queue (the release namespace) is migrated:
undecided requests move to their tenants, decisions already made there are
recorded."""
import json
import subprocess
import time

from k8s_env import profile, ready, start_controller, stop, user_kubeconfig, wait_for

OLD_QUEUE = "toolgate-system"  # the chart's queue before #46: the release namespace


def _psql(cluster, sql):
    out = subprocess.run(["psql", cluster["database_url"], "-v", "ON_ERROR_STOP=1", "-AtXqc", sql],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _row(cluster, approval_id, tenant, version, preview="make deploy"):
    """A pending approval as a sidecar of `tenant` records it."""
    now = int(time.time() * 1000)
    _psql(cluster, "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, policy_version,"
                   " decision_id, requested_by, status, created_at, expires_at, action, preview) VALUES"
                   f" ('{approval_id}', '{tenant}', 'inv-{approval_id}', 'run-1', 'bash', 'sha256:abc',"
                   f" '{version}', 'dec-{approval_id}', 'sidecar:{tenant}/agent-0', 'pending', {now},"
                   f" {now + 900_000}, 'bash', '{preview}')")
    return f"apr-{approval_id}"


def _request(approval_id, tenant, version, namespace, preview="make deploy"):
    """A request Approval as the controller mirrors the row of `_row`."""
    return {"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
            "metadata": {"name": f"apr-{approval_id}", "namespace": namespace,
                         "labels": {"toolgate.dev/approval-kind": "request"}},
            "spec": {"request": {"approvalId": approval_id, "tenant": tenant, "invocationId": f"inv-{approval_id}",
                                 "tool": "bash", "argsDigest": "sha256:abc", "action": "bash", "preview": preview,
                                 "runId": "run-1", "policyVersion": version,
                                 "profile": version.split("@")[0],
                                 "requestedBy": f"sidecar:{tenant}/agent-0"}}}


def _team(kube, name):
    """A tenant namespace with a Ready profile whose approvers are group
    `<name>-oncall`, bound to the approver role in that namespace only."""
    ns = kube.namespace(name)
    kube.apply(profile("coding", ns, approvals={"ttlSeconds": 900, "approvers": [f"group:{name}-oncall"]}))
    version = wait_for(f"{ns} profile Ready", lambda: (p := kube.get("tgp", "coding", "-n", ns))
                       and ready(p.get("status")) and p["status"]["version"])
    kube("-n", ns, "create", "rolebinding", "approvers", "--clusterrole=toolgate-approver",
         f"--group={name}-oncall")
    return ns, version


def _plugin(kube, cluster, tmp_path, user, group, *args):
    env = dict(kube.env, KUBECONFIG=str(user_kubeconfig(cluster, user, [group], tmp_path / f"{user}.kubeconfig")))
    return subprocess.run([cluster["kubectl"], "toolgate", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_each_team_sees_and_answers_only_its_own(kube, cluster, tmp_path):
    red, red_version = _team(kube, "team-red")
    blue, blue_version = _team(kube, "team-blue")
    red_name = _row(cluster, "red-1", red, red_version)
    blue_name = _row(cluster, "blue-1", blue, blue_version)
    red_obj = wait_for("red's Approval in red", lambda: kube.get("approval", red_name, "-n", red), 30)
    wait_for("blue's Approval in blue", lambda: kube.get("approval", blue_name, "-n", blue), 30)
    assert red_obj["spec"]["request"]["tenant"] == red
    assert kube.get("approval", red_name, "-n", OLD_QUEUE) is None, "nothing in the old shared queue"
    assert kube.get("approval", red_name, "-n", blue) is None

    # Rita approves for red: she lists red's, cannot list blue's nor every
    # namespace, and cannot answer blue's.
    out = kube("get", "approvals", "-n", red, "-o", "name", as_user="rita", groups=["team-red-oncall"])
    assert out.stdout.split() == [f"approval.toolgate.dev/{red_name}"], out.stdout
    for args in (["get", "approvals", "-n", blue], ["get", "approvals", "-A"]):
        out = kube(*args, as_user="rita", groups=["team-red-oncall"], check=False)
        assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr
    denied = _plugin(kube, cluster, tmp_path, "rita", "team-red-oncall", "deny", blue_name, "-n", blue,
                     "--reason", "not mine")
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied
    listed = _plugin(kube, cluster, tmp_path, "rita", "team-red-oncall", "approvals", "-n", red)
    assert listed.returncode == 0 and red_name in listed.stdout and blue_name not in listed.stdout, listed
    approved = _plugin(kube, cluster, tmp_path, "rita", "team-red-oncall", "approve", red_name, "-n", red)
    assert approved.returncode == 0, approved
    wait_for("red-1 approved by rita", lambda: _psql(
        cluster, "SELECT status, resolved_by FROM approvals WHERE id = 'red-1'") == "approved|rita", 30)
    assert _psql(cluster, "SELECT status FROM approvals WHERE id = 'blue-1'") == "pending"

    # Someone who may list everywhere finds an approval by name with -A.
    kube("create", "clusterrolebinding", "platform-approves", "--clusterrole=toolgate-approver",
         "--group=platform")
    kube.apply(profile("coding", blue, approvals={"ttlSeconds": 900,
                                                  "approvers": ["group:team-blue-oncall", "group:platform"]}))
    wait_for("blue's approvers updated", lambda: "group:platform" in json.dumps(
        kube.get("tgp", "coding", "-n", blue)["spec"]))
    listed = _plugin(kube, cluster, tmp_path, "pat", "platform", "approvals", "-A")
    assert listed.returncode == 0 and red_name in listed.stdout and blue_name in listed.stdout, listed
    denied = _plugin(kube, cluster, tmp_path, "pat", "platform", "deny", blue_name, "-A", "--reason", "no")
    assert denied.returncode == 0, denied
    wait_for("blue-1 denied by pat", lambda: _psql(
        cluster, "SELECT status, resolved_by FROM approvals WHERE id = 'blue-1'") == "denied|pat", 30)


def test_requests_come_from_the_controller_and_speak_only_at_home(kube, cluster):
    gold, version = _team(kube, "team-gold")
    decide = json.dumps({"spec": {"decision": "approved", "decidedBy": "gil", "decidedByGroups": ["team-gold-oncall"]}})

    # An administrator (every RBAC right) still may not create a request.
    out = kube.create(_request("gold-0", gold, version, gold, preview="ls"), check=False)
    assert out.returncode != 0 and "request_not_from_controller" in out.stderr, out.stderr
    # Nor a standing grant squatting a pending approval's name: an approver's
    # `kubectl toolgate approve apr-<id>` would activate it instead.
    squat = {"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
             "metadata": {"name": "apr-gold-1", "namespace": gold},
             "spec": {"grant": {"profile": "coding", "tool": "bash", "glob": "*", "subjects": ["*"],
                                "expiresAt": "2099-01-01T00:00:00Z"}}}
    out = kube.create(squat, check=False)
    assert out.returncode != 0 and "request_not_from_controller" in out.stderr, out.stderr
    kube.create({**squat, "metadata": {"name": "grant-bash", "namespace": gold}})

    # A request at home whose preview is not its row's (made as the
    # controller to get past admission, before the mirror's own copy: the
    # mirror waits up to 10 s for the escalating decision's record) is
    # refused when decided, and the row stays pending.
    _row(cluster, "gold-1", gold, version, preview="rm -rf /srv/data")
    kube.create(_request("gold-1", gold, version, gold, preview="ls"), as_user=kube.cluster["controller_user"])
    kube("patch", "approval", "apr-gold-1", "-n", gold, "--type", "merge", "-p", decide,
         as_user="gil", groups=["team-gold-oncall"])
    message = wait_for("mismatch reported", lambda: (m := (kube.get("approval", "apr-gold-1", "-n", gold)
                                                           .get("status") or {}).get("message", "")) and "differs" in m
                       and m, 30)
    assert "spec.request.preview differs" in message, message
    assert _psql(cluster, "SELECT status FROM approvals WHERE id = 'gold-1'") == "pending"

    # A faithful request outside gold's namespace resolves nothing either,
    # even decided by gold's approver.
    kube.namespace("team-lead")
    kube.create(_request("gold-1", gold, version, "team-lead", preview="rm -rf /srv/data"),
                as_user=kube.cluster["controller_user"])
    kube("-n", "team-lead", "create", "rolebinding", "gold-here", "--clusterrole=toolgate-approver",
         "--group=team-gold-oncall")
    kube("patch", "approval", "apr-gold-1", "-n", "team-lead", "--type", "merge", "-p", decide,
         as_user="gil", groups=["team-gold-oncall"])
    wait_for("ignored", lambda: "honoured only in namespace team-gold" in (
        (kube.get("approval", "apr-gold-1", "-n", "team-lead").get("status") or {}).get("message", "")), 30)
    assert _psql(cluster, "SELECT status FROM approvals WHERE id = 'gold-1'") == "pending"


def test_the_old_queue_is_migrated(kube, cluster):
    """The controller was down across the upgrade: the old queue holds one
    undecided request and one decided there. Started with per-tenant
    placement (its default migrates from the release namespace), it moves
    the undecided one home and records the decided one."""
    green, version = _team(kube, "team-green")
    kube("-n", OLD_QUEUE, "create", "rolebinding", "green-old-queue", "--clusterrole=toolgate-approver",
         "--group=team-green-oncall")
    stop(cluster, "controller-0")
    try:
        for approval_id in ("green-wait", "green-done"):
            kube.create(_request(approval_id, green, version, OLD_QUEUE), as_user=kube.cluster["controller_user"])
            _row(cluster, approval_id, green, version)
        kube("patch", "approval", "apr-green-done", "-n", OLD_QUEUE, "--type", "merge", "-p",
             json.dumps({"spec": {"decision": "approved", "decidedBy": "gwen", "decidedByGroups": ["team-green-oncall"],
                                  "reason": "before the upgrade"}}),
             as_user="gwen", groups=["team-green-oncall"])
    finally:
        start_controller(cluster)

    wait_for("the undecided request moved home", lambda: kube.get("approval", "apr-green-wait", "-n", green)
             and kube.get("approval", "apr-green-wait", "-n", OLD_QUEUE) is None, 60)
    assert _psql(cluster, "SELECT status FROM approvals WHERE id = 'green-wait'") == "pending"
    wait_for("the decision made in the old queue recorded", lambda: _psql(
        cluster, "SELECT status, resolved_by, reason FROM approvals WHERE id = 'green-done'")
        == "approved|gwen|before the upgrade", 60)
    old = kube.get("approval", "apr-green-done", "-n", OLD_QUEUE)
    assert old and old["status"]["phase"] == "Approved", old
    # Its copy at home (made while the row was still pending, or not at all)
    # never shows it pending.
    wait_for("home copy settled", lambda: (h := kube.get("approval", "apr-green-done", "-n", green)) is None
             or (h.get("status") or {}).get("phase") == "Approved", 30)
    # The moved request is answered at home.
    kube("patch", "approval", "apr-green-wait", "-n", green, "--type", "merge", "-p",
         json.dumps({"spec": {"decision": "denied", "decidedBy": "gwen", "decidedByGroups": ["team-green-oncall"]}}),
         as_user="gwen", groups=["team-green-oncall"])
    wait_for("green-wait denied at home", lambda: _psql(
        cluster, "SELECT status, resolved_by FROM approvals WHERE id = 'green-wait'") == "denied|gwen", 30)
