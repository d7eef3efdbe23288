"""Operations against the real API server: `kubectl toolgate status` green
on the harness's install and red while the webhook is down (pods are then
refused: failurePolicy Fail, while matchConditions keep metadata-only writes
working), and leader election through a real Lease with
two controller replicas (kill the leader, the other takes over).

Runs last (file order): it stops and restarts the harness's processes."""
import json
import os
import pathlib
import signal
import socket
import urllib.request

from k8s_env import profile, respawn, stop, wait_for

NS = "toolgate-system"


def _status(kube):
    return kube("toolgate", "status", "--controller-namespace", NS, check=False)


def _lease(kube):
    return (kube.get("lease", "toolgate-controller-leader", "-n", NS) or {}).get("spec", {})


def test_status_green_then_red_when_the_webhook_is_down(kube, cluster):
    healthy = wait_for("status passes", lambda: (r := _status(kube)).returncode == 0 and r, 60)
    out = healthy.stdout
    assert "toolgate is healthy" in out, out
    for expected in ("CRD policyprofiles.toolgate.dev", "CRD approvals.toolgate.dev", "controller leader",
                     "webhook CA"):
        assert any(line.startswith("ok") and expected in line for line in out.splitlines()), (expected, out)
    webhook_line = next(line for line in out.splitlines() if line.split()[1] == "webhook" and "CA" not in line)
    assert webhook_line.startswith("ok") and cluster["webhook"]["url"] in webhook_line, out

    ns = kube.namespace("webhook-down", {"toolgate.dev/inject": "true"})
    kube.apply(profile("safe-coding", ns))
    kube.create(_pod("before", ns))
    stop(cluster, "webhook")
    try:
        down = _status(kube)
        assert down.returncode != 0, down.stdout
        assert any(line.startswith("FAIL") and line.split()[1] == "webhook" for line in down.stdout.splitlines()), \
            down.stdout
        # failurePolicy: Fail: while the webhook is down, no agent pod is
        # admitted, no profile spec changes and no injected pod's spec changes ...
        refused = kube.create(_pod("after", ns), check=False)
        assert refused.returncode != 0 and "failed calling webhook" in refused.stderr, refused.stderr
        out = kube("patch", "tgp", "safe-coding", "-n", ns, "--type", "merge", "-p",
                   json.dumps({"spec": {"egress": {"allowHosts": ["example.com"]}}}), check=False)
        assert out.returncode != 0 and "failed calling webhook" in out.stderr, out.stderr
        out = kube("patch", "pod", "before", "-n", ns, "--type", "merge", "-p",
                   json.dumps({"spec": {"activeDeadlineSeconds": 600}}), check=False)
        assert out.returncode != 0 and "failed calling webhook" in out.stderr, out.stderr
        # ... but the matchConditions keep metadata-only writes (labels, the
        # controller's finalizer patches) off the webhook, so they still work.
        kube("label", "pod", "before", "-n", ns, "still=works")
        kube("label", "tgp", "safe-coding", "-n", ns, "still=works")
    finally:
        respawn(cluster, "webhook", cluster["webhook"]["argv"],
                dict(os.environ, **{**cluster["webhook"]["env"], "RUST_LOG": "info"}))
    wait_for("status green again", lambda: _status(kube).returncode == 0, 60)


def _pod(name, ns):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": {"toolgate.dev/profile": "safe-coding"}},
            "spec": {"containers": [{"name": "a", "image": "example.invalid/a:1"}]}}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return next((line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")), None)


def test_leader_election_through_a_real_lease(kube, cluster):
    lease = wait_for("Lease held", lambda: (s := _lease(kube)).get("holderIdentity") and s)
    assert lease["holderIdentity"] == "controller-0", lease
    first = cluster["controller"]["metrics"]["controller-0"]
    assert _metric(first, "toolgate_controller_leader") == "1"

    # A second replica, as the chart's Deployment would run it.
    port = _free_port()
    argv = list(cluster["controller"]["argv"])
    argv[argv.index("--metrics-listen") + 1] = f"127.0.0.1:{port}"
    env = dict(os.environ, **cluster["controller"]["env"], POD_NAME="controller-1")
    respawn(cluster, "controller-1", argv, env)
    second = f"http://127.0.0.1:{port}"
    wait_for("controller-1 serving", lambda: _metric(second, "toolgate_controller_leader") == "0", 60)
    assert _lease(kube)["holderIdentity"] == "controller-0"

    # Kill the leader without letting it release the Lease.
    stop(cluster, "controller-0", signal.SIGKILL)
    taken = wait_for("controller-1 takes the Lease", lambda: (s := _lease(kube)).get("holderIdentity")
                     == "controller-1" and s, 90)
    assert int(taken.get("leaseTransitions", 0)) >= 1, taken
    wait_for("controller-1 leads", lambda: _metric(second, "toolgate_controller_leader") == "1", 30)

    # The new leader reconciles: a new profile gets its bundle.
    ns = kube.namespace("after-failover")
    kube.apply(profile("safe-coding", ns))
    cm = wait_for("bundle ConfigMap from the new leader",
                  lambda: kube.get("configmap", "toolgate-bundle-safe-coding", "-n", ns), 60)
    assert json.loads(cm["data"]["bundle.json"])


def test_controller_never_refused_by_rbac(cluster):
    """Every call the controllers made during this session (as the chart's
    ServiceAccount) was granted: a refused one would log `forbidden`."""
    logs = pathlib.Path(cluster["logs"])
    text = "".join(p.read_text(errors="replace") for p in sorted(logs.glob("controller-*.log")))
    assert "reconcile" in text, "controller logs"
    assert "forbidden" not in text.lower(), [line for line in text.splitlines() if "forbidden" in line.lower()][:5]
