"""The controller's archive schedule on the real API server and the
harness's PostgreSQL database: the leader (controller-0, restarted with
`--archive-after 2s --archive-interval 1s --archive-dir DIR`, the flags the
chart renders from `controller.archive`) moves the rows of an injected
sidecar's stream, written with the tenant's own database role, into DIR
once they are older than two seconds; the archive verifies offline against
the controller's published trust set, the rows are gone from the live
table but the live chain (and the stored checkpoints) still verify, and the
metrics count what moved. controller-0 is restarted with its own flags
afterwards, so the later files see the harness as it was.

The pass archives every tenant's old rows in the shared database, not only
this test's: what earlier files wrote is archived too and must verify."""
import json
import os
import pathlib
import subprocess
import urllib.request

from k8s_env import free_port, post_json, profile, respawn, run_container, stop, wait_for

NS = "toolgate-system"


def _psql(cluster, sql):
    out = subprocess.run(["psql", cluster["database_url"], "-AtXqc", sql], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _toolgate(cluster, *args):
    out = subprocess.run([cluster["toolgate"], *args], capture_output=True, text=True, timeout=60)
    try:
        return out.returncode, json.loads(out.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"toolgate {' '.join(args)}: {out.returncode}\n{out.stdout}\n{out.stderr}") from None


def _metrics(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return {line.split()[0]: float(line.split()[-1]) for line in text.splitlines()
            if line and not line.startswith("#") and " " in line}


def _controller(cluster, extra):
    """Restarts controller-0 (the leader: it renews its own Lease at once)
    with `extra` flags; returns its metrics URL once it is ready."""
    stop(cluster, "controller-0")
    url = cluster["controller"]["metrics"]["controller-0"]
    argv = list(cluster["controller"]["argv"]) + extra
    argv[argv.index("--metrics-listen") + 1] = url.removeprefix("http://")
    env = dict(os.environ, **cluster["controller"]["env"], POD_NAME="controller-0")
    respawn(cluster, "controller-0", argv, env)
    wait_for("controller-0 leads", lambda: _metrics(url).get("toolgate_controller_leader") == 1.0, 60)
    return url


def _archived_rows(archive: pathlib.Path, tenant: str) -> int:
    rows = 0
    for manifest in archive.glob("manifest-*.json"):
        rows += sum(s["rows"] for s in json.loads(manifest.read_text())["segments"] if s["tenant"] == tenant)
    return rows


def test_the_leader_archives_on_a_schedule(kube, cluster, tmp_path):
    archive = tmp_path / "archive"
    trust = tmp_path / "trust.pem"
    trust.write_text(kube.get("configmap", "toolgate-trust", "-n", NS)["data"]["trust.pem"])
    metrics = _controller(cluster, ["--archive-after", "2s", "--archive-interval", "1s",
                                    "--archive-dir", str(archive)])
    proc = None
    try:
        # Decisions from an injected sidecar, as a kubelet would run it.
        ns = kube.namespace("archive-e2e", {"toolgate.dev/inject": "true"})
        kube.apply(profile("archive-coding", ns))
        wait_for("bundle and tenant Secret", lambda: kube.get("configmap", "toolgate-bundle-archive-coding", "-n", ns)
                 and kube.get("secret", "toolgate-database", "-n", ns))
        kube.create({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "agent-0", "namespace": ns,
                                  "annotations": {"toolgate.dev/profile": "archive-coding"}},
                     "spec": {"containers": [{"name": "agent", "image": "example.invalid/agent:1"}]}})
        pod = kube.get("pod", "agent-0", "-n", ns)
        api, ops = free_port(), free_port()
        proc, log = run_container(kube, pod, "toolgate-sidecar", tmp_path / "pod", cluster["toolgate"], {
            "127.0.0.1:15031": f"127.0.0.1:{api}", "0.0.0.0:15032": f"127.0.0.1:{ops}"})
        wait_for("sidecar ready", lambda: urllib.request.urlopen(f"http://127.0.0.1:{ops}/readyz").status == 200, 30)
        for i in range(4):
            call = {"tool": "bash", "arguments": {"command": "git status"}, "run_id": "run-1", "step_id": f"s{i}"}
            status, allowed = post_json(f"http://127.0.0.1:{api}/v1/authorize", call)
            assert (status, allowed["verdict"]) == (200, "allow"), allowed
        assert _psql(cluster, f"SELECT count(*) FROM decisions WHERE tenant = '{ns}'") == "4"

        # Every row but the stream's head goes, once two seconds old.
        wait_for("the tenant's rows archived", lambda: _archived_rows(archive, ns) == 3
                 and _psql(cluster, f"SELECT count(*) FROM decisions WHERE tenant = '{ns}'") == "1", 30)
        assert _psql(cluster, f"SELECT seq FROM decisions WHERE tenant = '{ns}'") == "4"
        # The four calls can straddle a pass (one a second), which then
        # archives the first rows only and the next pass the rest: what
        # holds either way is where the archive ends.
        assert _psql(cluster, f"SELECT max(seq) FROM decision_archives WHERE tenant = '{ns}'") == "3"

        # The archive verifies offline with the controller's trust set ...
        code, offline = _toolgate(cluster, "audit", "verify", "--archive", str(archive), "--trust", str(trust))
        assert code == 0 and offline["ok"], offline
        ours = [s for s in offline["streams"] if s["tenant"] == ns]
        assert [(s["records"], s["last_seq"]) for s in ours] == [(3, 3)], offline
        # ... and the live chain from its archive position, with the
        # checkpoints the archive stored (signed by the same key).
        code, live = _toolgate(cluster, "audit", "verify", "--database", cluster["database_url"])
        assert code == 0 and live["ok"], live
        code, signed = _toolgate(cluster, "audit", "verify", "--database", cluster["database_url"], "--tenant", ns,
                                 "--checkpoints", "--trust", str(trust))
        assert code == 0 and signed["ok"], signed
        assert signed["records"] == 1, signed

        # A later row is archived by a later pass into the same directory,
        # continuing the stream's archive.
        status, allowed = post_json(f"http://127.0.0.1:{api}/v1/authorize",
                                {"tool": "bash", "arguments": {"command": "git status"}, "run_id": "run-1"})
        assert allowed["verdict"] == "allow", allowed
        wait_for("the next pass", lambda: _archived_rows(archive, ns) == 4, 30)
        code, offline = _toolgate(cluster, "audit", "verify", "--archive", str(archive), "--trust", str(trust))
        ours = [(s["segments"], s["last_seq"]) for s in offline["streams"] if s["tenant"] == ns]
        assert code == 0 and len(ours) == 1 and ours[0][0] >= 2 and ours[0][1] == 4, offline

        seen = _metrics(metrics)
        assert seen["toolgate_archive_rows_total"] >= 4, seen
        assert seen["toolgate_archive_last_success_timestamp_seconds"] > 0, seen
        text = (pathlib.Path(cluster["logs"]) / "controller-0.log").read_text(errors="replace")
        assert "decision log archived" in text
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=10)
        _controller(cluster, [])
