"""Helpers of the real-Kubernetes suite (tests/k8s): kubectl with the
harness's kubeconfig, waiting, and starting or stopping the harness's processes."""
from __future__ import annotations

import base64
import json
import os
import pathlib
import signal
import subprocess
import time
import urllib.error
import urllib.request

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
    """Starts a process the way `envtest.py up` does (own session, log file,
    traces to the session's Jaeger) and records it in the state file, so
    `envtest.py down` stops it too."""
    env = dict(env, **cluster.get("trace_env", {}))
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


def start_controller(cluster: dict, extra=()) -> str:
    """Starts controller-0 again (after `stop`) as `up` did, on its own
    metrics address, with `extra` flags; returns that address once ready."""
    url = cluster["controller"]["metrics"]["controller-0"]
    argv = list(cluster["controller"]["argv"])
    argv[argv.index("--metrics-listen") + 1] = url.removeprefix("http://")
    respawn(cluster, "controller-0", [*argv, *extra],
            dict(os.environ, **cluster["controller"]["env"], POD_NAME="controller-0"))
    wait_for("controller-0 ready", lambda: urllib.request.urlopen(url + "/readyz", timeout=2).status == 200, 60)
    return url


def profile(name: str, namespace: str, **spec_overrides) -> dict:
    """examples/profiles/safe-coding.yaml under another name and namespace."""
    import yaml
    obj = yaml.safe_load((ROOT / "examples" / "profiles" / "safe-coding.yaml").read_text())
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"].update(spec_overrides)
    return obj


def ready(status: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (status or {}).get("conditions", []))


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_container(kube, pod: dict, name: str, workdir: pathlib.Path, binary: str, replace: dict):
    """What a kubelet would do for one container of an admitted pod, as a
    local process: each configMap volume written out from the ConfigMap as
    stored, emptyDirs as directories, env resolved (value, secretKeyRef,
    fieldRef), mount paths in args mapped onto those directories; the image
    is replaced by `binary` (this checkout's), and `replace` maps further
    argument values (listen addresses). Returns the Popen and its log path."""
    ns = pod["metadata"]["namespace"]
    spec = pod["spec"]
    container = next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    paths = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        local = workdir / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            cm = kube.get("configmap", volume["configMap"]["name"], "-n", ns)
            for key, value in cm["data"].items():
                (local / key).write_text(value)
        paths[mount["mountPath"]] = str(local)
    env = {"PATH": os.environ["PATH"]}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = kube.get("secret", ref["name"], "-n", ns)
            env[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        elif "fieldRef" in source:
            env[var["name"]] = {"metadata.name": pod["metadata"]["name"],
                                "metadata.namespace": ns}[source["fieldRef"]["fieldPath"]]
    args = []
    for arg in container.get("args", []):
        arg = replace.get(arg, arg)
        for mount_path, local in paths.items():
            if arg == mount_path or arg.startswith(mount_path + "/"):
                arg = local + arg[len(mount_path):]
        args.append(arg)
    logfile = workdir / f"{name}.log"
    proc = subprocess.Popen([binary, *args], env=env, stdout=open(logfile, "wb"), stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, logfile


def post_json(url: str, body: dict, timeout=30) -> tuple[int, dict]:
    """POSTs `body` as JSON: the HTTP status and the JSON answer (an error
    status is returned, not raised; an empty error body reads as {})."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def start_injected_sidecar(kube, ns: str, pod_name: str, profile: str, tmp_path: pathlib.Path,
                           env: dict | None = None):
    """Creates pod `pod_name` in `ns` on `profile` (the webhook injects the
    sidecar), runs its toolgate-sidecar container as a kubelet would
    (`run_container`, with `env` added to the container's) on free loopback
    ports, and waits until it is ready. Returns (agent API URL, ops URL,
    the process); `stop_sidecar` ends it and prints its log."""
    kube.create({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": pod_name, "namespace": ns, "annotations": {"toolgate.dev/profile": profile}},
                 "spec": {"containers": [{"name": "agent", "image": "example.invalid/agent:1"}]}})
    pod = kube.get("pod", pod_name, "-n", ns)
    sidecar = next(c for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
                   if c["name"] == "toolgate-sidecar")
    sidecar.setdefault("env", []).extend({"name": k, "value": v} for k, v in (env or {}).items())
    api, ops = free_port(), free_port()
    proc, log = run_container(kube, pod, "toolgate-sidecar", tmp_path, kube.cluster["toolgate"], {
        "127.0.0.1:15031": f"127.0.0.1:{api}", "0.0.0.0:15032": f"127.0.0.1:{ops}"})
    proc.log = log
    ops_url = f"http://127.0.0.1:{ops}"
    try:
        wait_for("sidecar ready", lambda: urllib.request.urlopen(f"{ops_url}/readyz", timeout=2).status == 200, 30)
    except BaseException:
        stop_sidecar(proc)
        raise
    return f"http://127.0.0.1:{api}", ops_url, proc


def stop_sidecar(proc, tail=4000) -> None:
    """Ends a sidecar `start_injected_sidecar` started and prints the end of
    its log (pytest shows it when the test failed)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        # Called from `finally`: never hide the test's own failure.
        proc.kill()
        proc.wait(timeout=10)
    print(proc.log.read_text(errors="replace")[-tail:])


def user_kubeconfig(cluster: dict, user: str, groups: list[str], path: pathlib.Path) -> pathlib.Path:
    """A kubeconfig authenticating as `user` in `groups` with a client
    certificate from the harness's CA (for tools that take no `--as`, such
    as the kubectl-toolgate plugin)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = pathlib.Path(cluster["dir"])
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=1)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]
                        + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "envtest", "cluster": {"server": cluster["server"],
                                                     "certificate-authority-data": b64((d / "ca.crt").read_bytes())}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(cert.public_bytes(serialization.Encoding.PEM)),
            "client-key-data": b64(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))}}],
        "contexts": [{"name": user, "context": {"cluster": "envtest", "user": user}}],
    }))
    path.chmod(0o600)
    return path
