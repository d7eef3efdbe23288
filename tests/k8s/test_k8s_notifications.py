"""Approval notifications on the real API server: a profile's channels
(`spec.approvals.notify`, URLs and signing secret in Secret
`toolgate-notify`) receive every approval event from the controller's
leader — verified with the real `standardwebhooks` package from PyPI —,
a receiver that fails is retried, and a controller killed in the middle of
a delivery sends it again after its restart under the same `webhook-id`:
at least once, never under two ids. The receivers listen on loopback,
which a notification reaches only through the operator's allowance
(`--notify-allow-cidr`, the chart's notifications.allowCidrs): without it
the delivery is refused before any connection."""
import base64
import json
import os
import secrets
import signal
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import standardwebhooks

from k8s_env import free_port, profile, ready, respawn, stop, wait_for

# What lets the controller reach this file's receivers.
ALLOW = ["--notify-allow-cidr", "127.0.0.0/8"]


class Receiver:
    """A webhook receiver on loopback: `/standard` verifies each message
    with the Standard Webhooks library, `/events` takes CloudEvents; each
    path can fail its first N requests with 500 or hold them for a while."""

    def __init__(self, secret: str):
        self.webhook = standardwebhooks.Webhook(secret)
        self.received: list[tuple[str, dict, dict]] = []
        self.arrived: list[tuple[str, str]] = []  # (path, approval id), as requests come in
        self.unverified: list[str] = []
        self.fail = {"/standard": 0, "/events": 0}
        self.hold = 0.0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                approval = (json.loads(body).get("data") or {}).get("approval_id")
                with receiver.lock:
                    receiver.arrived.append((self.path, approval))
                    failing = receiver.fail.get(self.path, 0) > 0
                    if failing:
                        receiver.fail[self.path] -= 1
                    hold = receiver.hold
                if hold:
                    time.sleep(hold)
                if failing:
                    self.send_response(500)
                    self.end_headers()
                    return
                if self.path in ("/standard", "/default"):
                    try:
                        self.webhook_verify(body, headers)
                    except Exception as e:  # noqa: BLE001 - recorded, then refused
                        receiver.unverified.append(f"{e}: {headers}")
                        self.send_response(400)
                        self.end_headers()
                        return
                with receiver.lock:
                    receiver.received.append((self.path, headers, json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def webhook_verify(self, body, headers):
                receiver.webhook.verify(body, headers)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, path, approval_id, kind=None):
        with self.lock:
            return [(h, b) for p, h, b in self.received if p == path
                    and (b.get("data") or {}).get("approval_id") == approval_id
                    and (kind is None or b.get("type") in (kind, f"dev.toolgate.{kind}"))]


def _psql(cluster, sql):
    out = subprocess.run(["psql", cluster["database_url"], "-v", "ON_ERROR_STOP=1", "-AtXqc", sql],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _requested(cluster, approval_id, tenant, version):
    """An approval and its `approval.requested` event, in one transaction,
    as a sidecar's request writes them."""
    now = int(time.time() * 1000)
    _psql(cluster, "BEGIN; INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest,"
                   " policy_version, decision_id, requested_by, status, created_at, expires_at, action, preview)"
                   f" VALUES ('{approval_id}', '{tenant}', 'inv-{approval_id}', 'run-1', 'bash', 'sha256:abc',"
                   f" '{version}', 'dec-{approval_id}', 'sidecar:{tenant}/agent-0', 'pending', {now},"
                   f" {now + 900_000}, 'bash', 'make deploy <!channel>');"
                   " INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at) VALUES"
                   f" ('{tenant}', 'run-1', 'approval.requested', '{approval_id}', '{{}}', {now}); COMMIT;")


def _metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def _controller(cluster, extra, allow=True):
    """Restarts controller-0 with `extra` flags and, unless `allow` is
    false, loopback allowed (neither: as `up` started it)."""
    metrics = cluster["controller"]["metrics"]["controller-0"]
    stop(cluster, "controller-0")
    argv = list(cluster["controller"]["argv"])
    argv[argv.index("--metrics-listen") + 1] = metrics.removeprefix("http://")
    respawn(cluster, "controller-0", [*argv, *(ALLOW if allow else []), *extra],
            dict(os.environ, **cluster["controller"]["env"], POD_NAME="controller-0"))
    wait_for("controller-0 ready", lambda: urllib.request.urlopen(metrics + "/readyz", timeout=2).status == 200, 60)


@pytest.fixture(scope="module", autouse=True)
def _as_started(cluster):
    """Leaves controller-0 as `up` started it (no allowance) for the other
    modules."""
    yield
    _controller(cluster, [], allow=False)


def test_loopback_receivers_are_reached_only_through_the_allowance(kube, cluster):
    """The chart's controller (no notifications.allowCidrs) refuses a
    receiver on 127.0.0.1 before connecting to it, counts and records the
    refusal like any failed delivery, and sends the same event once
    restarted with --notify-allow-cidr 127.0.0.0/8."""
    signing = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    receiver = Receiver(signing)
    ns = kube.namespace("refused")
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "toolgate-notify", "namespace": ns},
                 "stringData": {"url": f"{receiver.url}/standard", "signing": signing}})
    kube.apply(profile("refused", ns, approvals={"ttlSeconds": 900, "notify": [
        {"webhook": {"urlSecretKey": "url", "signingSecretKey": "signing"}}]}))
    version = wait_for("profile Ready", lambda: (p := kube.get("tgp", "refused", "-n", ns))
                       and ready(p.get("status")) and p["status"]["version"])
    metrics = cluster["controller"]["metrics"]["controller-0"]
    before = _metric(metrics, "toolgate_notification_failures_total")
    try:
        _requested(cluster, "refused-1", ns, version)
        error = wait_for("the refusal recorded", lambda: _psql(
            cluster, f"SELECT last_error FROM notification_deliveries WHERE channel = '{ns}/refused/standard:url'"), 30)
        assert "notify_destination_refused" in error and "loopback" in error, error
        assert _metric(metrics, "toolgate_notification_failures_total") > before
        assert not receiver.arrived, "refused before any connection"
    finally:
        _controller(cluster, [])
    got = wait_for("the event, once loopback is allowed",
                   lambda: receiver.of("/standard", "refused-1", "approval.requested"), 60)
    assert got[0][1]["data"]["namespace"] == ns, got
    assert not receiver.unverified, receiver.unverified
    receiver.server.shutdown()


def test_approval_events_reach_every_channel_at_least_once(kube, cluster, tmp_path):
    signing = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    receiver = Receiver(signing)
    ns = kube.namespace("notified")
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "toolgate-notify", "namespace": ns},
                 "stringData": {"url": f"{receiver.url}/standard", "signing": signing,
                                "events-url": f"{receiver.url}/events"}})
    kube.apply(profile("notified", ns, approvals={"ttlSeconds": 900, "notify": [
        {"webhook": {"urlSecretKey": "url", "signingSecretKey": "signing"}},
        {"webhook": {"urlSecretKey": "events-url", "format": "cloudevents"}},
    ]}))
    version = wait_for("profile Ready", lambda: (p := kube.get("tgp", "notified", "-n", ns))
                       and ready(p.get("status")) and p["status"]["version"])
    metrics = cluster["controller"]["metrics"]["controller-0"]

    # 1. A receiver failing with 500 for a while is retried until it takes it.
    receiver.fail["/events"] = 2
    _requested(cluster, "note-1", ns, version)
    wait_for("the signed message", lambda: receiver.of("/standard", "note-1", "approval.requested"), 30)
    headers, body = receiver.of("/standard", "note-1")[0]
    assert body["data"]["tool"] == "bash" and body["data"]["namespace"] == ns, body
    # The command names the namespace the Approval is in: the tenant's own.
    assert body["data"]["approve_command"] == f"kubectl toolgate approve apr-note-1 -n {ns}", body
    wait_for("the CloudEvent, after two 500s", lambda: receiver.of("/events", "note-1"), 30)
    _, event = receiver.of("/events", "note-1")[0]
    assert (event["specversion"], event["type"]) == ("1.0", "dev.toolgate.approval.requested"), event
    assert event["id"] == headers["webhook-id"], "one id per event, whatever the channel"
    assert _metric(metrics, "toolgate_notification_failures_total") >= 2
    assert not receiver.unverified, receiver.unverified

    # 2. Decided: the decision and who made it.
    out = subprocess.run([cluster["toolgate"], "approvals", "approve", "note-1", "--database",
                          cluster["database_url"], "--by", "alice", "--reason", "ship it"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    decided = wait_for("the decision", lambda: receiver.of("/standard", "note-1", "approval.decided"), 30)
    assert decided[0][1]["data"]["decided_by"] == "alice", decided

    # 3. The controller killed while a receiver holds its request: after the
    #    restart the event is sent again, under the same webhook-id.
    receiver.hold = 5.0
    _requested(cluster, "note-2", ns, version)
    wait_for("the leader inside a held request", lambda: ("/standard", "note-2") in receiver.arrived
             or ("/events", "note-2") in receiver.arrived, 30)
    stop(cluster, "controller-0", signal.SIGKILL)
    receiver.hold = 0.0
    argv = list(cluster["controller"]["argv"])
    argv[argv.index("--metrics-listen") + 1] = metrics.removeprefix("http://")
    respawn(cluster, "controller-0", [*argv, *ALLOW],
            dict(os.environ, **cluster["controller"]["env"], POD_NAME="controller-0"))
    both = lambda: (len(receiver.of("/standard", "note-2")) >= 1 and receiver.of("/events", "note-2"))  # noqa: E731
    wait_for("note-2 on both channels after the restart", both, 120)
    ids = {h["webhook-id"] for h, _ in receiver.of("/standard", "note-2")}
    assert len(ids) == 1, f"one event, one id: {ids}"
    assert not receiver.unverified, receiver.unverified
    receiver.server.shutdown()




def test_profiles_without_channels_use_the_cluster_default(kube, cluster):
    """`--default-notify` (the chart's notifications.defaultChannels): a
    profile that names no channels is heard on the cluster's, whose keys
    live in Secret toolgate-notify of the controller's namespace; a profile
    with channels of its own is not."""
    signing = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    receiver = Receiver(signing)
    kube.create({"apiVersion": "v1", "kind": "Secret",
                 "metadata": {"name": "toolgate-notify", "namespace": cluster["namespace"]},
                 "stringData": {"default-url": f"{receiver.url}/default", "default-signing": signing}})
    try:
        _controller(cluster, ["--default-notify", json.dumps(
            [{"webhook": {"urlSecretKey": "default-url", "signingSecretKey": "default-signing"}}])])
        ns = kube.namespace("defaulted")
        kube.apply(profile("plain", ns))
        version = wait_for("profile Ready", lambda: (p := kube.get("tgp", "plain", "-n", ns))
                           and ready(p.get("status")) and p["status"]["version"])
        _requested(cluster, "dflt-1", ns, version)
        got = wait_for("the default channel's signed message",
                       lambda: receiver.of("/default", "dflt-1", "approval.requested"), 30)
        assert got[0][1]["data"]["namespace"] == ns, got
        assert not receiver.unverified, receiver.unverified
        # The earlier test's profile has channels of its own: none of its
        # approvals reach the default channel.
        assert not [1 for path, approval in receiver.arrived if path == "/default" and approval.startswith("note-")]
    finally:
        _controller(cluster, [])
        receiver.server.shutdown()
