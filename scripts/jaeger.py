#!/usr/bin/env python3
"""A real trace backend on loopback for toolgate's tracing tests: Jaeger's
all-in-one (v2, an OpenTelemetry Collector distribution) built from the Go
module pinned in tests/jaeger, receiving OTLP/HTTP and keeping traces in
memory, with its query API on another port.

    python3 scripts/jaeger.py build     # build (or find) the binary; prints its path
    python3 scripts/jaeger.py up        # start one; last stdout line is JSON
                                        # {"otlp": URL, "query": URL, "pid": N, "dir": DIR}
    python3 scripts/jaeger.py down DIR  # stop what `up` started

The binary is built once per machine into ~/.cache/toolgate-jaeger/<key>/
(key: the pinned version and a hash of the module files). Needs go.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULE = ROOT / "tests" / "jaeger"
PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"
CACHE = pathlib.Path(os.environ.get("TOOLGATE_JAEGER_CACHE", pathlib.Path.home() / ".cache" / "toolgate-jaeger"))


def log(msg: str) -> None:
    print(f"jaeger: {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def version() -> str:
    m = re.search(r"^\s*(?:require\s+)?github\.com/jaegertracing/jaeger\s+(v\S+)", (MODULE / "go.mod").read_text(), re.M)
    if not m:
        raise RuntimeError(f"github.com/jaegertracing/jaeger is not required in {MODULE / 'go.mod'}")
    return m.group(1)


def binary_path() -> pathlib.Path:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum", "tools.go"):
        h.update((MODULE / name).read_bytes())
    return CACHE / f"jaeger-{version()}-{h.hexdigest()[:8]}" / "jaeger"


def build() -> pathlib.Path:
    """The Jaeger binary, built if missing (one build per machine at a time)."""
    out = binary_path()
    if out.exists():
        return out
    if not shutil.which("go"):
        raise RuntimeError("go is not on PATH: Jaeger is built from its Go module")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        partial = out.with_name("jaeger.partial")
        partial.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        log(f"building {PACKAGE}@{version()} into {out.parent}")
        subprocess.run(["nice", "-n", "10", "go", "build", "-mod=readonly", "-trimpath", "-ldflags=-s -w",
                        "-o", str(partial), PACKAGE], cwd=MODULE, check=True)
        partial.rename(out)
        log(f"built in {time.monotonic() - start:.0f}s")
    return out


CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def up() -> dict:
    binary = build()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="toolgate-jaeger-"))
    ports = {"query": free_port(), "query_grpc": free_port(), "otlp": free_port()}
    config = workdir / "config.yaml"
    config.write_text(CONFIG.format(**ports))
    logfile = workdir / "jaeger.log"
    with open(logfile, "w") as out:
        proc = subprocess.Popen([str(binary), "--config", f"file:{config}"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    (workdir / "pid").write_text(str(proc.pid))
    query = f"http://127.0.0.1:{ports['query']}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jaeger exited with {proc.returncode}:\n{logfile.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{query}/api/services", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            down(workdir)
            raise RuntimeError(f"jaeger did not answer in 60s:\n{logfile.read_text()[-4000:]}")
        time.sleep(0.2)
    return {"otlp": f"http://127.0.0.1:{ports['otlp']}", "query": query, "pid": proc.pid, "dir": str(workdir)}


def down(workdir) -> None:
    workdir = pathlib.Path(workdir)
    try:
        pid = int((workdir / "pid").read_text())
        os.killpg(pid, signal.SIGTERM)
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "build":
        print(build())
    elif command == "up":
        print(json.dumps(up()))
    elif command == "down" and len(sys.argv) == 3:
        down(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
