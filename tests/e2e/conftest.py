"""Fixtures for the controller end-to-end test.

Needs: python3 with `pytest`, `kmock`, `jsonpatch` (a kmock dependency),
the real `kubectl` on PATH (or $KUBECTL), and the built binaries:

* $TOOLGATE_BIN (default $CARGO_TARGET_DIR or target, then debug/toolgate): runs `toolgate controller`
* $KUBECTL_TOOLGATE_BIN    (default …/debug/kubectl-toolgate)

Build them with `cargo build -p toolgate-controller --bins`, then run
`python3 -m pytest tests/e2e -q` from the repository root.
"""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys

import pytest

from e2e_support import ROOT, wait_for

HERE = pathlib.Path(__file__).resolve().parent


def _bin(env: str, name: str) -> pathlib.Path:
    target = pathlib.Path(os.environ.get('CARGO_TARGET_DIR') or ROOT / 'target')
    path = pathlib.Path(os.environ.get(env, target / 'debug' / name))
    if not path.exists():
        msg = f"{path} not found: build with `cargo build -p toolgate-controller --bins` or set ${env}"
        if os.environ.get('CI') == 'true':
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='session')
def binaries():
    kubectl = os.environ.get('KUBECTL') or shutil.which('kubectl')
    if not kubectl:
        pytest.skip('kubectl not found')
    return {
        'toolgate': _bin('TOOLGATE_BIN', 'toolgate'),
        'plugin': _bin('KUBECTL_TOOLGATE_BIN', 'kubectl-toolgate'),
        'kubectl': pathlib.Path(kubectl),
    }


@pytest.fixture(scope='session')
def apiserver(tmp_path_factory):
    """The kmock emulator in a subprocess; yields its URL."""
    log = tmp_path_factory.mktemp('kmock') / 'kmock.log'
    proc = subprocess.Popen([sys.executable, str(HERE / 'kmock_server.py')],
                            stdout=subprocess.PIPE, stderr=open(log, 'w'), text=True)
    line = proc.stdout.readline()
    if not line.startswith('PORT '):
        proc.kill()
        raise RuntimeError(f"emulator did not start: {line!r}; see {log}")
    yield f"http://127.0.0.1:{line.split()[1]}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope='session')
def kube(apiserver, binaries, tmp_path_factory):
    """Environment (KUBECONFIG, PATH with the plugin) and a kubectl runner."""
    d = tmp_path_factory.mktemp('kube')
    kubeconfig = d / 'config'
    kubeconfig.write_text(json.dumps({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'kmock',
        'clusters': [{'name': 'kmock', 'cluster': {'server': apiserver}}],
        'users': [{'name': 'tester', 'user': {'token': 'e2e'}}],
        'contexts': [{'name': 'kmock', 'context': {'cluster': 'kmock', 'user': 'tester', 'namespace': 'agents'}}],
    }))
    plugin_dir = d / 'bin'
    plugin_dir.mkdir()
    (plugin_dir / 'kubectl-toolgate').symlink_to(binaries['plugin'])
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), PATH=f"{plugin_dir}:{os.environ['PATH']}",
               KUBECACHEDIR=str(d / 'cache'))

    def kubectl(*args, check=True, input=None):
        out = subprocess.run([str(binaries['kubectl']), *args], env=env, capture_output=True, text=True,
                             input=input, timeout=60)
        if check and out.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def get_json(*args):
        out = kubectl('get', *args, '-o', 'json', check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    return {'env': env, 'kubectl': kubectl, 'get': get_json, 'dir': d}


@pytest.fixture(scope='session')
def controller(kube, binaries, tmp_path_factory):
    """The real controller process against the emulator, with a SQLite file."""
    d = tmp_path_factory.mktemp('controller')
    db = d / 'toolgate.db'
    metrics_port = _free_port()
    log = open(d / 'controller.log', 'w')
    env = dict(kube['env'], RUST_LOG='info,kube=warn', POD_NAME='controller-0')
    proc = subprocess.Popen([
        str(binaries['toolgate']), 'controller',
        '--database', f"sqlite://{db}?mode=rwc",
        '--namespace', 'toolgate-system',
        '--approvals-namespace', 'agents',
        '--metrics-listen', f"127.0.0.1:{metrics_port}",
        '--bundle-validity', '24h',
        '--approval-sync-interval', '1s',
    ], env=env, stdout=log, stderr=subprocess.STDOUT)
    info = {'db': db, 'metrics': f"http://127.0.0.1:{metrics_port}", 'log': d / 'controller.log', 'proc': proc}
    import urllib.request
    try:
        wait_for('controller /readyz', lambda: urllib.request.urlopen(info['metrics'] + '/readyz').status == 200)
        # Leader, signing key and trust published in the controller namespace.
        wait_for('signing key secret', lambda: kube['get']('secret', 'toolgate-signing-key', '-n', 'toolgate-system'))
    except AssertionError:
        print((d / 'controller.log').read_text())
        raise
    yield info
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    print('--- controller log ---')
    print((d / 'controller.log').read_text()[-20000:])
