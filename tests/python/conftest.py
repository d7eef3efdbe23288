"""Fixtures for the Python client tests: a REAL `toolgate sidecar` process
on a temporary SQLite database, enforcing a bundle that the real CLI built
and signed from the test profile below.

Needs the built CLI: $TOOLGATE_BIN (default target/debug/toolgate, from
`cargo build -p toolgate`). The client is imported from clients/python/src,
so the tests exercise the working tree, installed or not.
"""
import os
import pathlib
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'clients' / 'python' / 'src'))

TENANT = 'pytest'

# Low-risk, high-risk, deny and escalate rules, plus the workspace tools.
PROFILE = """\
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: python-client, namespace: agents}
spec:
  mode: rules
  aliases: {Bash: bash}
  rules:
    bash: {deny: ["rm *"], allow: ["echo *", "git status"], escalate: ["deploy *", "cargo *"]}
    lookup: {allow: ["*"]}
    transfer: {allow: ["*"]}
    drop_table: {deny: ["*"]}
    publish: {escalate: ["*"]}
    workspace.read: {allow: ["*"]}
    workspace.list: {allow: ["*"]}
    workspace.stat: {allow: ["*"]}
    workspace.write: {allow: ["*"]}
    fs.read_text_file: {allow: ["*"]}
    fs.list_directory: {allow: ["*"]}
    fs.write_file: {allow: ["*"]}
    fs.move_file: {escalate: ["*"]}
    fs.create_directory: {deny: ["*"]}
    demo.echo: {allow: ["*"]}
    demo.pay: {allow: ["*"]}
    demo.wipe: {deny: ["*prod*"], allow: ["*"]}
    traced.echo: {allow: ["*"]}
    shout: {allow: ["hello *"]}
    # The malicious MCP server of test_mcp_attacks.py (`evil`, and `evil2`,
    # which no test lists before calling).
    evil.note: {allow: ["*"]}
    evil.pay: {allow: ["*"]}
    evil.resources/read: {allow: ["file:///public/*"]}
    evil.prompts/get: {allow: ["greeting"]}
    evil.roots/list: {allow: ["*"]}
    evil2.note: {allow: ["*"]}
    # The TypeScript SDK server of test_mcp_tasks.py.
    tasks.deploy: {escalate: ["*"]}
  hardline:
    paths: ["**/.env"]
    cidrs: ["169.254.0.0/16"]
  effects:
    bash:       {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}
    lookup:     {sideEffect: NONE, risk: low, readOnly: true, allowParallel: true}
    transfer:   {sideEffect: EXTERNAL_WRITE, risk: high}
    drop_table: {sideEffect: EXTERNAL_WRITE, risk: high}
    publish:    {sideEffect: EXTERNAL_WRITE, risk: high}
    workspace.read:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
    workspace.list:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
    workspace.stat:  {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
    workspace.write: {sideEffect: WORKSPACE_WRITE, risk: write}
    fs.read_text_file:   {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [path]}
    # Pinned to a definition the server no longer announces: the reviewed
    # tool was changed (a "rug pull"), so it is neither listed nor allowed.
    fs.list_directory:   {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [path],
                          definitionDigest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"}
    fs.write_file:       {sideEffect: WORKSPACE_WRITE, risk: high, matchArgs: [path]}
    fs.move_file:        {sideEffect: WORKSPACE_WRITE, risk: high, matchArgs: [source, destination],
                          pathArgs: [source, destination]}
    fs.create_directory: {sideEffect: WORKSPACE_WRITE, risk: write, matchArgs: [path]}
    demo.echo: {sideEffect: NONE, risk: low, readOnly: true}
    demo.pay:  {sideEffect: EXTERNAL_WRITE, risk: high}
    demo.wipe: {sideEffect: EXTERNAL_WRITE, risk: high, matchArgs: [target]}
    traced.echo: {sideEffect: NONE, risk: low, readOnly: true}
    # On trial: allowed whatever the rules say, with a warning when they
    # would not have allowed it.
    shout: {sideEffect: NONE, risk: low, matchArgs: [text], enforcement: warn}
    evil.note: {sideEffect: NONE, risk: low, matchArgs: [text]}
    evil.pay:  {sideEffect: EXTERNAL_WRITE, risk: high}
    evil.resources/read: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [uri]}
    evil.prompts/get: {sideEffect: NONE, risk: low, matchArgs: [name]}
    evil.roots/list: {sideEffect: NONE, risk: low}
    evil2.note: {sideEffect: NONE, risk: low, matchArgs: [text]}
    tasks.deploy: {sideEffect: EXTERNAL_WRITE, risk: high, matchArgs: [service]}
  approvals: {ttlSeconds: 300}
"""


def _toolgate_bin() -> pathlib.Path:
    target = pathlib.Path(os.environ.get('CARGO_TARGET_DIR') or ROOT / 'target')
    path = pathlib.Path(os.environ.get('TOOLGATE_BIN', target / 'debug' / 'toolgate'))
    if not path.exists():
        pytest.fail(f"{path} not found: build it with `cargo build -p toolgate` (or set $TOOLGATE_BIN)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _run(*args, **kw):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60, **kw)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def _ready(ops_url: str) -> bool:
    try:
        with urllib.request.urlopen(ops_url + '/readyz', timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def _python_server(d: pathlib.Path, script: str, port: int, *args) -> subprocess.Popen:
    """Starts `script` (beside this file) listening on loopback `port`;
    fails the test run with its stderr when it does not come up."""
    proc = subprocess.Popen([sys.executable, str(pathlib.Path(__file__).parent / script), *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=open(d / 'server.err', 'w'))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail(f"{script} did not start: {(d / 'server.err').read_text()[-3000:]}")


@pytest.fixture(scope='session')
def mcp_upstream(tmp_path_factory):
    """A real MCP server over streamable HTTP: {url, log}."""
    d = tmp_path_factory.mktemp('mcp-upstream')
    port, log = free_port(), d / 'calls.log'
    log.write_text('')
    proc = _python_server(d, 'mcp_http_server.py', port, port, log)
    yield {'url': f"http://127.0.0.1:{port}/mcp", 'log': log}
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope='session')
def evil_upstream(tmp_path_factory):
    """The malicious MCP server over streamable HTTP: {url, log, control};
    write a scenario name into `control` to choose how it attacks."""
    d = tmp_path_factory.mktemp('evil-upstream')
    port, log, control = free_port(), d / 'evil.log', d / 'scenario'
    log.write_text('')
    control.write_text('honest')
    proc = _python_server(d, 'evil_mcp_server.py', port, 'http', port, log, control)
    yield {'url': f"http://127.0.0.1:{port}/mcp", 'log': log, 'control': control}
    proc.terminate()
    proc.wait(timeout=10)


def _started_sidecar(d: pathlib.Path, extra_args: list[str], env: dict | None = None,
                     profile: str = PROFILE, database: str | None = None, pod: str = 'pytest-agent',
                     bundle_of: pathlib.Path | None = None):
    """Starts `toolgate sidecar` on `profile` (the pytest profile) in
    directory `d`, on `database` (a SQLite file of its own): (process, info
    dict, log file). Fails the test if it never gets ready. `bundle_of`: the
    directory of a sidecar whose signed bundle this one enforces too (a
    second bundle of the same sequence would be refused as a rollback)."""
    toolgate = _toolgate_bin()
    if bundle_of:
        shutil.copytree(bundle_of / 'keys', d / 'keys')
        shutil.copy(bundle_of / 'bundle.json', d / 'bundle.json')
    else:
        _run(toolgate, 'keygen', '--out', d / 'keys')
        (d / 'profile.yaml').write_text(profile)
        _run(toolgate, 'bundle', 'build', '--profile', d / 'profile.yaml', '--key', d / 'keys' / 'signing.key',
             '--sequence', '1', '--valid-for', '1h', '--out', d / 'bundle.json')
    db = d / 'toolgate.db'
    database = database or f"sqlite://{db}?mode=rwc"
    log_path = d / 'sidecar.log'
    for _attempt in range(3):  # a free port can be taken between probe and bind
        port, ops_port = free_port(), free_port()
        log = open(log_path, 'w')
        proc = subprocess.Popen([
            str(toolgate), 'sidecar',
            '--bundle', str(d / 'bundle.json'), '--trust', str(d / 'keys' / 'signing.pub'),
            '--database', database,
            '--listen', f"127.0.0.1:{port}", '--ops-listen', f"127.0.0.1:{ops_port}",
            '--workspace-base', str(d / 'workspaces'), '--tenant', TENANT,
            '--pod-name', pod, '--pod-namespace', 'agents', *extra_args,
        ], stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG='warn', **(env or {})))
        ops_url = f"http://127.0.0.1:{ops_port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and not _ready(ops_url):
            time.sleep(0.05)
        if proc.poll() is None and _ready(ops_url):
            break
        proc.kill()
        proc.wait()
        log.close()
    else:
        pytest.fail(f"sidecar did not become ready:\n{log_path.read_text()[-5000:]}")
    info = {
        'url': f"http://127.0.0.1:{port}", 'ops_url': ops_url, 'db': db, 'database': database,
        'bin': toolgate, 'dir': d, 'log': log_path, 'workspaces': d / 'workspaces' / TENANT,
        'pid': proc.pid, 'pod': pod,
    }
    return proc, info, log


def _stopped(proc, log):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope='session')
def sidecar(tmp_path_factory, mcp_upstream, evil_upstream):
    """A running sidecar: {url, ops_url, db, database, bin, dir, log}, with
    MCP upstreams `demo` (the test server) and `blocked` (a hardline CIDR)."""
    proc, info, log = _started_sidecar(tmp_path_factory.mktemp('sidecar'), [
        '--mcp-upstream', f"demo={mcp_upstream['url']}",
        '--mcp-upstream', 'blocked=http://169.254.169.254/mcp',
        '--mcp-upstream', f"evil={evil_upstream['url']}",
        '--mcp-upstream', f"evil2={evil_upstream['url']}",
    ])
    yield info
    _stopped(proc, log)


@pytest.fixture
def own_sidecar(tmp_path):
    """A sidecar of this test's own (no MCP upstreams), for tests that stop
    it as a whole, as a pod cancellation does."""
    proc, info, log = _started_sidecar(tmp_path, [])
    yield info
    _stopped(proc, log)


@pytest.fixture
def run_id(request):
    """A run of its own for each test, so approvals and intents never mix."""
    return f"py-{request.node.name[:40]}-{time.monotonic_ns()}".replace('[', '-').replace(']', '')


@pytest.fixture
def intent_rows(sidecar):
    """The `intents` rows of a run, read straight from the SQLite database."""
    def rows(run_id):
        with sqlite3.connect(sidecar['db']) as db:
            return db.execute('SELECT tool, status, detail, effect_sent_at IS NOT NULL FROM intents '
                              'WHERE run_id = ? ORDER BY created_at', (run_id,)).fetchall()
    return rows


@pytest.fixture
def approve_later(sidecar):
    """Starts a thread that approves (or denies) an approval with the real
    `toolgate approvals` CLI after `delay` seconds; returns the thread."""
    threads = []

    def start(approval_id, delay=0.5, verb='approve'):
        result = {}

        def work():
            time.sleep(delay)
            result['out'] = subprocess.run([
                str(sidecar['bin']), 'approvals', verb, approval_id,
                '--database', sidecar['database'], '--by', 'alice', '--reason', 'pytest',
            ], capture_output=True, text=True, timeout=60)

        t = threading.Thread(target=work, daemon=True)
        t.result = result
        t.start()
        threads.append(t)
        return t

    yield start
    for t in threads:
        t.join(timeout=30)
        out = t.result.get('out')
        assert out is not None and out.returncode == 0, out


@pytest.fixture
def closed_url():
    """A loopback URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}"
