#!/usr/bin/env python3
"""A real Kubernetes control plane on loopback for toolgate's tests and for
developers: etcd and kube-apiserver built from Go modules, the CRDs, the
chart's RBAC and webhook configurations, and a `toolgate webhook` and
`toolgate controller` from this checkout against a PostgreSQL database.

    python3 scripts/envtest.py build        # build (or find) the Go binaries only
    python3 scripts/envtest.py up           # start everything; last stdout line is JSON
    python3 scripts/envtest.py down [DIR]   # stop what `up` started, remove its files

No kubelet, scheduler or controller-manager runs: pods are admitted (every
admission plugin and webhook judges them) and then stay Pending; namespaces
stay Terminating once deleted and ownerReferences are not garbage collected.

Binaries are built once per machine into ~/.cache/toolgate-envtest/<key>/
(key: the pinned versions and a hash of the wrapper modules), from
tests/envtest/kube (kube-apiserver and kubectl of the same release) and
tests/envtest/etcd. Needs go, python3 with `cryptography`, `pyyaml` and
`helm-python-sdk` (tests/requirements.txt), and PostgreSQL's server binaries
when no --database-url is given (Debian: /usr/lib/postgresql/*/bin).
"""
from __future__ import annotations

import argparse
import base64
import datetime
import fcntl
import hashlib
import ipaddress
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENVTEST = ROOT / "tests" / "envtest"
CACHE = pathlib.Path(os.environ.get("TOOLGATE_ENVTEST_CACHE", pathlib.Path.home() / ".cache" / "toolgate-envtest"))
CONTROLLER_NS = "toolgate-system"
RELEASE = "toolgate"
LAST_UP = CACHE / "last-up"


def log(msg: str) -> None:
    print(f"envtest: {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, fn, timeout: float, proc: subprocess.Popen | None = None, logfile=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = pathlib.Path(logfile).read_text(errors="replace")[-4000:] if logfile else ""
            raise RuntimeError(f"{what}: process exited with {proc.returncode}\n{tail}")
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


# ------------------------------------------------------------------ build


def _pinned(module_dir: pathlib.Path, module: str) -> str:
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", (module_dir / "go.mod").read_text(), re.M)
    if not m:
        raise RuntimeError(f"{module} is not required in {module_dir / 'go.mod'}")
    return m.group(1)


def versions() -> dict[str, str]:
    return {
        "kubernetes": _pinned(ENVTEST / "kube", "k8s.io/kubernetes"),
        "etcd": _pinned(ENVTEST / "etcd", "go.etcd.io/etcd/server/v3"),
    }


def cache_dir() -> pathlib.Path:
    v = versions()
    h = hashlib.sha256()
    for sub in ("kube", "etcd"):
        for name in ("go.mod", "go.sum", "tools.go"):
            h.update((ENVTEST / sub / name).read_bytes())
    return CACHE / f"k8s-{v['kubernetes']}-etcd-{v['etcd']}-{h.hexdigest()[:8]}"


def build(force: bool = False) -> pathlib.Path:
    """The directory holding etcd, kube-apiserver and kubectl, built if missing."""
    out = cache_dir()
    names = ("etcd", "kube-apiserver", "kubectl")
    if not force and all((out / n).exists() for n in names):
        return out
    if not shutil.which("go"):
        raise RuntimeError("go is not on PATH: the envtest binaries are built from Go modules")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per machine at a time
        if not force and all((out / n).exists() for n in names):
            return out
        v = versions()
        partial = out.with_name(out.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        major, minor = v["kubernetes"].lstrip("v").split(".")[:2]
        stamp = " ".join(f"-X {pkg}.gitVersion={v['kubernetes']} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"
                         for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"))
        jobs = [("etcd", ENVTEST / "etcd", "go.etcd.io/etcd/server/v3", ""),
                ("kube-apiserver", ENVTEST / "kube", "k8s.io/kubernetes/cmd/kube-apiserver", stamp),
                ("kubectl", ENVTEST / "kube", "k8s.io/kubernetes/cmd/kubectl", stamp)]
        for name, cwd, pkg, ldflags in jobs:
            if (partial / name).exists() and not force:
                continue
            start = time.monotonic()
            log(f"building {name} ({pkg}) into {partial}")
            subprocess.run(["nice", "-n", "10", "go", "build", "-mod=readonly", "-trimpath",
                            f"-ldflags=-s -w {ldflags}", "-o", str(partial / name), pkg],
                           cwd=cwd, check=True)
            log(f"built {name} in {time.monotonic() - start:.0f}s")
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    return out


def toolgate_binaries() -> dict[str, pathlib.Path]:
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug"
    bins = {"toolgate": pathlib.Path(os.environ.get("TOOLGATE_BIN", target / "toolgate")),
            "plugin": pathlib.Path(os.environ.get("KUBECTL_TOOLGATE_BIN", target / "kubectl-toolgate"))}
    if not all(p.exists() for p in bins.values()):
        log("building toolgate and kubectl-toolgate (cargo build -p toolgate -p toolgate-controller --bins)")
        subprocess.run(["cargo", "build", "-q", "-p", "toolgate", "-p", "toolgate-controller", "--bins"],
                       cwd=ROOT, check=True)
    return bins


# ------------------------------------------------------------------ PKI


def _pki(d: pathlib.Path) -> dict[str, pathlib.Path]:
    """CA, API server and webhook serving pairs, admin client pair, SA keys."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    later = now + datetime.timedelta(days=30)
    paths: dict[str, pathlib.Path] = {}

    def write_key(name, key):
        p = d / f"{name}.key"
        p.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
        p.chmod(0o600)
        paths[f"{name}_key"] = p

    def write_cert(name, cert):
        p = d / f"{name}.crt"
        p.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        paths[f"{name}_crt"] = p

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toolgate-envtest-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    write_key("ca", ca_key)
    write_cert("ca", ca)

    def leaf(name, cn, orgs=(), dns=(), ips=(), server=True):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        b = (x509.CertificateBuilder().subject_name(x509.Name(subject)).issuer_name(ca_name)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now).not_valid_after(later)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(
                 [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if dns or ips:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
                critical=False)
        write_key(name, key)
        write_cert(name, b.sign(ca_key, hashes.SHA256()))

    local = dict(dns=("localhost",), ips=("127.0.0.1",))
    leaf("apiserver", "kube-apiserver", dns=("localhost", "kubernetes", "kubernetes.default",
                                             "kubernetes.default.svc"), ips=("127.0.0.1", "10.0.0.1"))
    leaf("webhook", "toolgate-webhook", **local)
    leaf("admin", "envtest-admin", orgs=("system:masters",), server=False)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key("sa", sa)
    (d / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
    paths["sa_pub"] = d / "sa.pub"
    return paths


def _kubeconfig(path: pathlib.Path, server: str, ca: pathlib.Path, user: dict, namespace: str = "default") -> None:
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "envtest",
        "clusters": [{"name": "envtest", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": "envtest", "user": {k: (b64(v) if isinstance(v, pathlib.Path) else v)
                                               for k, v in user.items()}}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest",
                                                     "namespace": namespace}}],
    }, indent=1))
    path.chmod(0o600)


# ------------------------------------------------------------------ processes


class Stack:
    """What `up` started, saved to DIR/state.json as it goes so `down` (or a
    failed `up`) stops exactly that."""

    def __init__(self, d: pathlib.Path):
        self.dir = d
        self.state: dict = {"dir": str(d), "pids": {}, "pg": None, "external_db": None}

    def save(self) -> None:
        (self.dir / "state.json").write_text(json.dumps(self.state, indent=1))

    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> tuple[subprocess.Popen, pathlib.Path]:
        logfile = self.dir / "logs" / f"{name}.log"
        logfile.parent.mkdir(exist_ok=True)
        out = open(logfile, "ab")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env or os.environ.copy(), start_new_session=True)
        self.state["pids"][name] = proc.pid
        self.save()
        return proc, logfile


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _pg_bindir() -> pathlib.Path:
    dirs = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not dirs:
        raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
                           "(apt-get install postgresql), or pass --database-url")
    return dirs[-1]


def _start_postgres(stack: Stack) -> str:
    """A private server: initdb into DIR/pg with trust auth, a free loopback port."""
    bindir = _pg_bindir()
    pg = stack.dir / "pg"
    pg.mkdir()
    if os.geteuid() == 0:
        shutil.chown(pg, "postgres", "postgres")
    port = free_port()
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(pg / "data"), "-U", "postgres", "--auth=trust"]),
                   check=True, stdout=subprocess.DEVNULL)
    with open(pg / "data" / "postgresql.conf", "a") as conf:
        conf.write(f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{pg}'\n"
                   "max_connections = 200\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
    stack.state["pg"] = {"bindir": str(bindir), "data": str(pg / "data")}
    stack.save()
    subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(pg / "data"), "-l", str(pg / "server.log"),
                                 "-w", "start"]), check=True, stdout=subprocess.DEVNULL)
    return f"postgres://postgres@127.0.0.1:{port}"


def _psql(server_url: str, sql: str) -> None:
    subprocess.run(["psql", f"{server_url}/postgres", "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True,
                   stdout=subprocess.DEVNULL)


# ------------------------------------------------------------------ chart


def render_chart(values: dict) -> list[dict]:
    import helm_python as helm
    import yaml
    with helm.Chart.load(ROOT / "charts" / RELEASE) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=CONTROLLER_NS, is_install=True)
    return [doc for path, text in sorted(manifests.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def local_webhooks(objects: list[dict], webhook_url: str, ca_pem: bytes) -> list[dict]:
    """The chart's objects with every webhook's clientConfig pointed at the
    local webhook (`url`, our CA as caBundle), as envtest does."""
    bundle = base64.b64encode(ca_pem).decode()
    for obj in objects:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": webhook_url + path, "caBundle": bundle}
    return objects


def container_args(objects: list[dict], name: str) -> list[str]:
    dep = next(o for o in objects if o["kind"] == "Deployment")
    return list(next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == name)["args"])


def _replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    i = args.index(flag)
    return args[:i + 1] + [value] + args[i + 2:]


# ------------------------------------------------------------------ up / down


def up(args) -> dict:
    t0 = time.monotonic()
    for var in ("NO_PROXY", "no_proxy"):  # everything here is on loopback
        os.environ[var] = ",".join(filter(None, [os.environ.get(var), "127.0.0.1,localhost"]))
    bindir = build()
    bins = toolgate_binaries()
    t_build = time.monotonic() - t0
    d = pathlib.Path(args.dir) if args.dir else pathlib.Path(tempfile.mkdtemp(prefix="toolgate-envtest."))
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o711)
    stack = Stack(d)
    stack.save()
    CACHE.mkdir(parents=True, exist_ok=True)
    LAST_UP.write_text(str(d))
    try:
        return _up(args, stack, bindir, bins, t0, t_build)
    except BaseException:
        log(f"up failed; logs in {d / 'logs'}; stopping what was started")
        if not args.keep_on_failure:
            down_dir(d)
        raise


def _up(args, stack: Stack, bindir: pathlib.Path, bins: dict, t0: float, t_build: float) -> dict:
    d = stack.dir
    pki = _pki(d)
    kubectl = str(bindir / "kubectl")

    # PostgreSQL: a database of our own, on a server of our own unless given one.
    if args.database_url:
        server = args.database_url.rstrip("/")
        db = f"toolgate_envtest_{os.getpid()}_{int(time.time())}"
        stack.state["external_db"] = {"server": server, "name": db}
        stack.save()
    else:
        server = _start_postgres(stack)
        db = "toolgate"
    _psql(server, f"CREATE DATABASE {db}")
    database_url = f"{server}/{db}"

    # etcd
    etcd_port, peer_port = free_port(), free_port()
    etcd, etcd_log = stack.spawn("etcd", [
        str(bindir / "etcd"), "--name", "envtest", "--data-dir", str(d / "etcd"),
        "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
        "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
        "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
        "--initial-cluster", f"envtest=http://127.0.0.1:{peer_port}",
        "--unsafe-no-fsync", "--log-level", "warn"])
    wait_for("etcd /health", lambda: b'"health":"true"' in urllib.request.urlopen(
        f"http://127.0.0.1:{etcd_port}/health", timeout=2).read(), 60, etcd, etcd_log)

    # kube-apiserver
    api_port = free_port()
    server_url = f"https://127.0.0.1:{api_port}"
    api, api_log = stack.spawn("kube-apiserver", [
        str(bindir / "kube-apiserver"),
        "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(api_port),
        "--cert-dir", str(d / "apiserver-certs"),
        "--tls-cert-file", str(pki["apiserver_crt"]), "--tls-private-key-file", str(pki["apiserver_key"]),
        "--client-ca-file", str(pki["ca_crt"]),
        "--service-account-issuer", server_url,
        "--service-account-key-file", str(pki["sa_pub"]),
        "--service-account-signing-key-file", str(pki["sa_key"]),
        "--service-cluster-ip-range", "10.0.0.0/24",
        "--authorization-mode", "RBAC",
        "--allow-privileged=true",
        "--profiling=false", "--v", "1"])
    ctx = ssl.create_default_context(cafile=str(pki["ca_crt"]))
    ctx.load_cert_chain(str(pki["admin_crt"]), str(pki["admin_key"]))
    wait_for("kube-apiserver /readyz", lambda: urllib.request.urlopen(
        f"{server_url}/readyz", context=ctx, timeout=5).status == 200, 120, api, api_log)
    kubeconfig = d / "kubeconfig"
    _kubeconfig(kubeconfig, server_url, pki["ca_crt"],
                {"client-certificate-data": pki["admin_crt"], "client-key-data": pki["admin_key"]})
    kenv = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(d / "kube-cache"))

    def k(*argv, input=None):
        out = subprocess.run([kubectl, *argv], env=kenv, input=input, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(argv)}: {out.stderr.strip()}")
        return out.stdout

    t_api = time.monotonic() - t0

    # CRDs (the generated ones), established before anything uses them.
    k("apply", "--server-side", "--field-manager", "envtest", "-f", str(ROOT / "crds"))
    k("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")

    # The webhook, serving TLS with a certificate from the cluster's CA.
    objects = render_chart({"database": {"url": database_url}})
    webhook_port, webhook_metrics = free_port(), free_port()
    wargs = container_args(objects, "webhook")
    for flag, value in (("--listen", f"127.0.0.1:{webhook_port}"), ("--tls-cert", str(pki["webhook_crt"])),
                        ("--tls-key", str(pki["webhook_key"])), ("--metrics-listen", f"127.0.0.1:{webhook_metrics}")):
        wargs = _replace_flag(wargs, flag, value)
    log_env = {"RUST_LOG": os.environ.get("RUST_LOG", "info")}
    webhook_url = f"https://127.0.0.1:{webhook_port}"

    # The chart, webhooks pointed at the local webhook, applied server-side.
    k("create", "namespace", CONTROLLER_NS)
    objects = local_webhooks(objects, webhook_url, pki["ca_crt"].read_bytes())
    chart_file = d / "chart.json"
    chart_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=1))
    k("apply", "--server-side", "--field-manager", "helm", "-f", str(chart_file))

    # The controller, as the chart's ServiceAccount (its RBAC, a bound token).
    sa = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    token = k("create", "token", sa, "-n", CONTROLLER_NS, "--duration", "48h").strip()
    controller_kubeconfig = d / "controller.kubeconfig"
    _kubeconfig(controller_kubeconfig, server_url, pki["ca_crt"], {"token": token}, CONTROLLER_NS)
    # The webhook runs as the chart's ServiceAccount too (it shares the
    # controller's pod): it reads PolicyProfiles to judge who may decide.
    # Started after the chart so the token exists; nothing the chart
    # creates goes through it.
    webhook_env = {"KUBECONFIG": str(controller_kubeconfig), **log_env}
    webhook, webhook_log = stack.spawn("webhook", [str(bins["toolgate"]), *wargs], dict(os.environ, **webhook_env))
    wctx = ssl.create_default_context(cafile=str(pki["ca_crt"]))
    wait_for("webhook /healthz", lambda: urllib.request.urlopen(f"{webhook_url}/healthz", context=wctx,
                                                                timeout=2).status == 200, 60, webhook, webhook_log)
    cargs = container_args(objects, "controller")
    cargs = _replace_flag(cargs, "--database", database_url)
    cargs = _replace_flag(cargs, "--namespace", CONTROLLER_NS)
    controller_env = {"KUBECONFIG": str(controller_kubeconfig), "POD_NAMESPACE": CONTROLLER_NS,
                      "RUST_LOG": os.environ.get("RUST_LOG", "info,kube=warn")}
    metrics = {}
    for i in range(args.controllers):
        port = free_port()
        argv = [str(bins["toolgate"]), *_replace_flag(cargs, "--metrics-listen", f"127.0.0.1:{port}")]
        proc, plog = stack.spawn(f"controller-{i}", argv, dict(os.environ, POD_NAME=f"controller-{i}",
                                                               **controller_env))
        metrics[f"controller-{i}"] = f"http://127.0.0.1:{port}"
        if i == 0:
            wait_for("controller-0 /readyz", lambda: urllib.request.urlopen(
                f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200, 90, proc, plog)
    wait_for("signing key Secret", lambda: subprocess.run(
        [kubectl, "get", "secret", "toolgate-signing-key", "-n", CONTROLLER_NS], env=kenv,
        capture_output=True).returncode == 0, 60)

    env_sh = d / "env.sh"
    env_sh.write_text(f"export KUBECONFIG={kubeconfig}\n"
                      f"export PATH={bindir}:{pathlib.Path(bins['plugin']).parent}:$PATH\n")
    return {
        "kubeconfig": str(kubeconfig),
        "env": str(env_sh),
        "database_url": database_url,
        "server": server_url,
        "dir": str(d),
        "kubectl": kubectl,
        "toolgate": str(bins["toolgate"]),
        "kubectl_toolgate": str(bins["plugin"]),
        "ca": str(pki["ca_crt"]),
        "namespace": CONTROLLER_NS,
        # Who the controller is to the API server: the only creator of
        # request Approvals the webhook admits.
        "controller_user": f"system:serviceaccount:{CONTROLLER_NS}:{sa}",
        "webhook": {"url": webhook_url, "metrics": f"http://127.0.0.1:{webhook_metrics}",
                    "pid": webhook.pid, "argv": [str(bins["toolgate"]), *wargs], "env": webhook_env},
        "controller": {"metrics": metrics, "kubeconfig": str(controller_kubeconfig),
                       "argv": [str(bins["toolgate"]), *cargs], "env": controller_env},
        "pids": stack.state["pids"],
        "logs": str(d / "logs"),
        "versions": versions(),
        "seconds": {"build_check": round(t_build, 1), "apiserver_ready": round(t_api, 1),
                    "total": round(time.monotonic() - t0, 1)},
    }


def _stop(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def down_dir(d: pathlib.Path) -> None:
    state_file = d / "state.json"
    if not state_file.exists():
        raise RuntimeError(f"{state_file} not found: not a directory `envtest.py up` made")
    state = json.loads(state_file.read_text())
    # Everything was started in a session of its own: its pid is its process group.
    for name, pid in reversed(list(state["pids"].items())):
        _stop(pid)
    if state.get("pg"):
        pg = state["pg"]
        subprocess.run(_as_postgres([f"{pg['bindir']}/pg_ctl", "-D", pg["data"], "-m", "immediate", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if state.get("external_db"):
        ext = state["external_db"]
        try:
            _psql(ext["server"], f"DROP DATABASE IF EXISTS {ext['name']} WITH (FORCE)")
        except subprocess.CalledProcessError as e:
            log(f"could not drop database {ext['name']}: {e}")
    shutil.rmtree(d, ignore_errors=True)
    if LAST_UP.exists() and LAST_UP.read_text().strip() == str(d):
        LAST_UP.unlink()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or find) etcd, kube-apiserver and kubectl; print their directory")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    u = sub.add_parser("up", help="start the cluster; the last stdout line is a JSON object")
    u.add_argument("--dir", help="state directory (default: a new one under $TMPDIR)")
    u.add_argument("--database-url", default=os.environ.get("TOOLGATE_ENVTEST_DATABASE_URL"),
                   help="PostgreSQL server URL (postgres://user@host:port, CREATEDB and CREATEROLE) to create "
                        "the database on; default: a private server in the state directory")
    u.add_argument("--controllers", type=int, default=1, help="controller replicas (leader election)")
    u.add_argument("--keep-on-failure", action="store_true", help="leave processes and files for debugging")
    dn = sub.add_parser("down", help="stop what `up` started and remove its directory")
    dn.add_argument("dir", nargs="?", help=f"the `dir` of `up` (default: the last one, from {LAST_UP})")
    args = p.parse_args()
    try:
        if args.cmd == "build":
            start = time.monotonic()
            out = build(force=args.force)
            print(json.dumps({"bin": str(out), "versions": versions(), "seconds": round(time.monotonic() - start, 1)}))
        elif args.cmd == "up":
            info = up(args)
            log(f"ready in {info['seconds']['total']}s; stop with: python3 scripts/envtest.py down {info['dir']}")
            log(f"kubectl {versions()['kubernetes']} and kubectl-toolgate on PATH, KUBECONFIG set: source {info['env']}")
            print(json.dumps(info), flush=True)
        else:
            d = args.dir or (LAST_UP.read_text().strip() if LAST_UP.exists() else None)
            if not d:
                raise RuntimeError("which cluster? pass the `dir` printed by `up`")
            down_dir(pathlib.Path(d))
            log(f"stopped and removed {d}")
    except (RuntimeError, subprocess.CalledProcessError) as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
