"""Fixtures of the real-Kubernetes end-to-end suite: one local control plane
per test session, started by `scripts/envtest.py up` (etcd and kube-apiserver
built from Go modules, the CRDs, the chart's RBAC and webhook configurations,
a `toolgate webhook` and a `toolgate controller` from this checkout against
a PostgreSQL database of its own) and stopped by `envtest.py down`.

Needs go (the first run builds the servers into ~/.cache/toolgate-envtest/,
which takes a while; `python3 scripts/envtest.py build` does it ahead),
PostgreSQL's server binaries, and the built `toolgate` and `kubectl-toolgate`
(`cargo build -p toolgate -p toolgate-controller --bins`). Under CI=true a
missing prerequisite fails the suite; elsewhere it skips it.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from k8s_env import Kube

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENVTEST = ROOT / "scripts" / "envtest.py"
CI = os.environ.get("CI") == "true"


def _missing(msg: str):
    if CI:
        pytest.fail(msg)
    pytest.skip(msg)


def _built() -> bool:
    """Whether `envtest.py build` has its binaries cached already."""
    out = subprocess.run([sys.executable, "-c", "import envtest, sys; d = envtest.cache_dir(); "
                          "sys.exit(0 if all((d / n).exists() for n in ('etcd', 'kube-apiserver', 'kubectl')) else 1)"],
                         cwd=ENVTEST.parent, capture_output=True)
    return out.returncode == 0


@pytest.fixture(scope="session")
def jaeger():
    """A Jaeger (scripts/jaeger.py) the cluster's webhook and controller
    export their traces to: {otlp, query, …}."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import jaeger as backend

    try:
        info = backend.up()
    except Exception as e:  # noqa: BLE001 - reported as a missing prerequisite
        _missing(f"Jaeger could not start (python3 scripts/jaeger.py build): {e}")
    yield info
    backend.down(info["dir"])


@pytest.fixture(scope="session")
def cluster(jaeger):
    """The JSON object `envtest.py up` printed (kubeconfig, database_url, …);
    the webhook and the controller export traces to `jaeger`."""
    if not shutil.which("go") and not _built():
        _missing("go is not on PATH: the real-Kubernetes suite builds kube-apiserver and etcd from Go modules")
    if not list(pathlib.Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        _missing("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
    traced = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=jaeger["otlp"], OTEL_BSP_SCHEDULE_DELAY="200")
    out = subprocess.run([sys.executable, str(ENVTEST), "up"], capture_output=True, text=True, timeout=3600,
                         env=traced)
    if out.returncode != 0:
        pytest.fail(f"envtest.py up failed ({out.returncode}):\n{out.stderr[-8000:]}")
    info = json.loads(out.stdout.strip().splitlines()[-1])
    info["trace_env"] = {k: traced[k] for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_BSP_SCHEDULE_DELAY")}
    print(f"envtest up in {info['seconds']}: {info['dir']}")
    yield info
    logs = pathlib.Path(info["logs"])
    for name in sorted(logs.glob("controller-*.log")) + [logs / "webhook.log"]:
        if name.exists():
            print(f"--- {name.name} (tail) ---\n{name.read_text(errors='replace')[-6000:]}")
    subprocess.run([sys.executable, str(ENVTEST), "down", info["dir"]], timeout=120)


@pytest.fixture(scope="session")
def kube(cluster, tmp_path_factory) -> Kube:
    bindir = tmp_path_factory.mktemp("kube") / "bin"
    bindir.mkdir()
    (bindir / "kubectl-toolgate").symlink_to(cluster["kubectl_toolgate"])
    return Kube(cluster, bindir)


