"""Helpers of the real-Kubernetes suite (tests/k8s): kubectl with the
harness's kubeconfig, waiting, and starting or stopping the harness's processes."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

def wait_for(what, fn, timeout=60.0, interval=0.25):
    """Polls `fn` until it returns a truthy value; fails with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


class Kube:
    """kubectl (the one built with the API server) with the admin kubeconfig
    and the kubectl-toolgate plugin on PATH."""

    def __init__(self, cluster: dict, bindir: pathlib.Path):
        self.cluster = cluster
        self.env = dict(os.environ, KUBECONFIG=cluster["kubeconfig"],
                        PATH=f"{bindir}:{pathlib.Path(cluster['kubectl']).parent}:{os.environ['PATH']}",
                        KUBECACHEDIR=str(bindir.parent / "kube-cache"))
        self.bin = cluster["kubectl"]
        self.dir = bindir.parent

    def __call__(self, *args, check=True, input=None, as_user=None, groups=(), timeout=90):
        argv = [self.bin, *args]
        if as_user:
            argv += ["--as", as_user, *[f"--as-group={g}" for g in groups]]
        out = subprocess.run(argv, env=self.env, capture_output=True, text=True, input=input, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def get(self, *args):
        out = self("get", *args, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def apply(self, obj: dict, *extra, check=True):
        return self("apply", "--server-side", "--field-manager", "e2e", "-f", "-", *extra, input=json.dumps(obj),
                    check=check)

    def create(self, obj: dict, *extra, check=True, **kw):
        return self("create", "-f", "-", *extra, input=json.dumps(obj), check=check, **kw)

    def namespace(self, name: str, labels: dict | None = None) -> str:
        """A namespace with its `default` ServiceAccount (no controller-manager
        runs to create it, and the ServiceAccount admission plugin needs it)."""
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
        self.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}})
        return name


def respawn(cluster: dict, name: str, argv: list[str], env: dict) -> subprocess.Popen:
    """Starts a process the way `envtest.py up` does (own session, log file)
    and records it in the state file, so `envtest.py down` stops it too."""
    d = pathlib.Path(cluster["dir"])
    logfile = open(d / "logs" / f"{name}.log", "ab")
    proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    state = json.loads((d / "state.json").read_text())
    state["pids"][name] = proc.pid
    (d / "state.json").write_text(json.dumps(state, indent=1))
    return proc


def stop(cluster: dict, name: str, sig=signal.SIGTERM) -> None:
    """Stops a process `up` (or `respawn`) started, by the pid it recorded."""
    state = json.loads((pathlib.Path(cluster["dir"]) / "state.json").read_text())
    pid = state["pids"][name]
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    wait_for(f"{name} to exit", lambda: not pathlib.Path(f"/proc/{pid}").exists()
             or "zombie" in pathlib.Path(f"/proc/{pid}/status").read_text(), 20)


def profile(name: str, namespace: str, **spec_overrides) -> dict:
    """examples/profiles/safe-coding.yaml under another name and namespace."""
    import yaml
    obj = yaml.safe_load((ROOT / "examples" / "profiles" / "safe-coding.yaml").read_text())
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"].update(spec_overrides)
    return obj


def ready(status: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (status or {}).get("conditions", []))
