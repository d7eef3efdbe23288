"""The URL-spelling vectors (tests/vectors/url_spellings.json) through every
way an agent reaches toolgate, with the real binary:

1. `toolgate check` on the vectors' profile, every case;
2. `POST /v1/authorize` on a real sidecar enforcing a bundle signed from
   that profile, every case;
3. `toolgate hook pre-tool-use` (plain and `mcp__SERVER__TOOL` names) in
   front of that sidecar, a representative subset;
4. the MCP gateway, both modes (the sidecar's `/mcp/net` and
   `toolgate mcp wrap`), in front of url_mcp_server.py, which logs every
   message it gets: a refused spelling never reaches it, an allowed one
   arrives exactly as sent.

The sidecars enforce the vectors' profile plus one effect, `net.fetch` (the
MCP server `net`'s tool `fetch`), declared as the vectors' `fetch` is
(NETWORK_READ, so the URL rules apply, and the same urlArgs/hostArgs).
The HTTP gateway's sidecar also leaves out the hardline CIDR 127.0.0.0/8:
its upstream listens on loopback, and an upstream in a hardline CIDR is
refused outright (`mcp_upstream_not_allowed`). Its cases are therefore ones
whose verdict does not hang on that CIDR, and their reasons are still
asserted against the vectors.
"""
import functools
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
import yaml

from .conftest import ROOT, _python_server, _started_sidecar, _stopped, _toolgate_bin, free_port

VECTORS = json.loads((ROOT / 'tests' / 'vectors' / 'url_spellings.json').read_text())
TOOL, CASES = VECTORS['tool'], VECTORS['cases']
ALLOW = 'mode_allow_all'  # the vectors' profile is allowAll: its one allow reason
SERVER, MCP_TOOL = 'net', 'fetch'  # the policy tool net.fetch
LOOPBACK_CIDR = '127.0.0.0/8'
UPSTREAM = pathlib.Path(__file__).parent / 'url_mcp_server.py'


def case_id(i: int) -> str:
    return f"{i:02d}-{json.dumps(CASES[i]['arguments'])[:70]}"


def index_of(arguments: dict) -> int:
    """The vector whose arguments these are (a vector that changed fails here)."""
    found = [i for i, c in enumerate(CASES) if c['arguments'] == arguments]
    assert len(found) == 1, f"no single vector with arguments {arguments!r}"
    return found[0]


def url_cases(*urls: str) -> list[int]:
    return [index_of({'url': u}) for u in urls]


ALL = list(range(len(CASES)))
# The hook: the brief's spellings, arrays, other reasons and two allows.
HOOK = url_cases(
    'http://api.example.com\\@169.254.169.254/', 'http://0/', 'http://[64:ff9b::a9fe:a9fe]/',
    'http://[64:ff9b::169.254.169.254]/', 'http://ok.example./', 'gopher://ok.example/',
    'http://user:pass@api.example.com/', 'http://0x7f.1/', 'http://[::ffff:169.254.169.254]/',
    'http://127.0.0.1/', 'file:///etc/passwd', 'http://evil.io/', 'not-a-url', 'http://ok.example\u200b/',
    'http://api.example.com/x', 'http://ok.example/@169.254.169.254',
) + [index_of({'urls': ['http://ok.example/', 'http://169.254.169.254/']}),
     index_of({'hosts': ['ok.example', 'ok.example.']}),
     index_of({'uri': 'http://0/'})]
# The MCP gateway (a tool taking {"url"}): refused spellings whose verdict
# does not depend on 127.0.0.0/8 ...
MCP_REFUSED = url_cases(
    'http://api.example.com\\@169.254.169.254/', 'http:\\\\169.254.169.254\\',
    'http://api.example.com@169.254.169.254/', 'http://0/', 'http://0x7f.1/', 'http://2130706433/',
    'http://ok.example./', 'http://%6fk.example/', 'http://ok.example\t/', 'http://ok.example\u200b/',
    'http://\u0430pi.example.com/', 'http://169.254.169.254/latest/meta-data/',
    'http://[64:ff9b::a9fe:a9fe]/', 'http://[::ffff:169.254.169.254]/', 'http://[2002:a9fe:a9fe::1]/',
    'http://[fd00::1]/', 'gopher://ok.example/', 'file:///etc/passwd', 'http://evil.io/',
)
# ... and allowed ones that only look like they lead elsewhere.
MCP_ALLOWED = url_cases('http://ok.example/@169.254.169.254', 'http://api.example.com#@169.254.169.254/',
                        'HtTpS://api.example.com:8443/v1?q=1#f')


def params(indices):
    return pytest.mark.parametrize('i', indices, ids=[case_id(i) for i in indices])


def expected(i: int) -> tuple[str, str]:
    reason = CASES[i]['reason']
    return ('allow' if reason == ALLOW else 'deny'), reason


def profile(drop_cidrs=()) -> str:
    """The vectors' profile with `net.fetch` declared as its `fetch` is
    (NETWORK_READ, the same urlArgs/hostArgs), and `drop_cidrs` out of the hardline."""
    spec = yaml.safe_load(VECTORS['profile'])
    effects = spec['spec']['effects']
    assert f"{SERVER}.{MCP_TOOL}" not in effects and effects[TOOL]['sideEffect'] == 'NETWORK_READ', effects
    effects[f"{SERVER}.{MCP_TOOL}"] = dict(effects[TOOL])
    cidrs = spec['spec']['hardline']['cidrs']
    for cidr in drop_cidrs:
        cidrs.remove(cidr)
    return yaml.safe_dump(spec, sort_keys=False)


# --- 1. toolgate check -----------------------------------------------------

@pytest.fixture(scope='module')
def profile_file(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp('url-profile') / 'url-spellings.yaml'
    path.write_text(VECTORS['profile'])  # exactly as the vectors spell it
    return path


@functools.cache
def checked(profile_path: pathlib.Path, i: int) -> dict:
    out = subprocess.run([str(_toolgate_bin()), 'check', '--profile', str(profile_path), '--tool', TOOL,
                          '--args', json.dumps(CASES[i]['arguments'])], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"check exited {out.returncode}: {out.stdout}{out.stderr}"
    return json.loads(out.stdout)


@params(ALL)
def test_check_cli(profile_file, i):
    verdict = checked(profile_file, i)
    assert (verdict['verdict'], verdict['reason']) == expected(i), verdict
    assert verdict['enforced'] is True, verdict


# --- 2. POST /v1/authorize -------------------------------------------------

@pytest.fixture(scope='module')
def vectors_sidecar(tmp_path_factory):
    """A sidecar on the vectors' profile (plus `net.fetch`), no MCP upstreams."""
    proc, info, log = _started_sidecar(tmp_path_factory.mktemp('url-sidecar'), [], profile=profile())
    yield info
    _stopped(proc, log)


def post_json(url: str, body: dict, headers: dict | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method='POST', headers={
        'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream', **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.headers.get('content-type', ''), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get('content-type', ''), e.read().decode()


@params(ALL)
def test_authorize(vectors_sidecar, profile_file, i):
    status, _, body = post_json(f"{vectors_sidecar['url']}/v1/authorize", {
        'tool': TOOL, 'arguments': CASES[i]['arguments'], 'run_id': f"url-authorize-{i}"})
    assert status == 200, body
    verdict = json.loads(body)
    assert (verdict['verdict'], verdict['reason']) == expected(i), verdict
    assert verdict['decision_id'], verdict
    # The sidecar judged the very arguments the CLI did.
    assert verdict['args_digest'] == checked(profile_file, i)['args_digest'], verdict


# --- 3. the pre-tool-use hook ------------------------------------------------

@params(HOOK)
@pytest.mark.parametrize('tool_name', [TOOL, f"mcp__{SERVER}__{MCP_TOOL}"])
def test_hook(vectors_sidecar, i, tool_name):
    hook_input = {'session_id': f"url-hook-{i}", 'hook_event_name': 'PreToolUse', 'cwd': '/workspace',
                  'tool_name': tool_name, 'tool_input': CASES[i]['arguments'], 'tool_use_id': f"toolu_{i}"}
    out = subprocess.run([str(vectors_sidecar['bin']), 'hook', 'pre-tool-use'], input=json.dumps(hook_input),
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, TOOLGATE_URL=vectors_sidecar['url']))
    decision = json.loads(out.stdout)['hookSpecificOutput']
    said = decision['permissionDecisionReason']
    verdict, reason = expected(i)
    if verdict == 'allow':
        assert (out.returncode, decision['permissionDecision']) == (0, 'allow'), (said, out.stderr)
        assert said.startswith(f"toolgate: allow ({ALLOW},"), said
    else:
        assert (out.returncode, decision['permissionDecision']) == (2, 'deny'), (said, out.stderr)
        prefix = f"toolgate: deny ({reason}"
        assert said.startswith(prefix) and said[len(prefix)] in ',:', said
        assert prefix in out.stderr, out.stderr


# --- 4. the MCP gateway, both modes ----------------------------------------

@pytest.fixture(scope='module')
def gateway(tmp_path_factory):
    """The HTTP gateway: url_mcp_server.py over HTTP as upstream `net` of a
    sidecar of its own: {url, log}."""
    d = tmp_path_factory.mktemp('url-gateway')
    port, log = free_port(), d / 'upstream.log'
    log.write_text('')
    server = _python_server(d, 'url_mcp_server.py', port, 'http', port, log)
    proc, info, sidecar_log = _started_sidecar(
        d, ['--mcp-upstream', f"{SERVER}=http://127.0.0.1:{port}/mcp"], profile=profile([LOOPBACK_CIDR]))
    yield {'url': f"{info['url']}/mcp/{SERVER}", 'log': log}
    _stopped(proc, sidecar_log)
    server.terminate()
    server.wait(timeout=10)


class HttpSession:
    """Raw JSON-RPC to the sidecar's `/mcp/net`, as an MCP client writes it."""

    def __init__(self, url: str, run: str):
        self.url, self.run, self.next_id = url, run, 0

    def notify(self, method: str):
        status, _, body = post_json(self.url, {'jsonrpc': '2.0', 'method': method},
                                    {'X-Toolgate-Run-Id': self.run})
        assert status in (200, 202), (status, body)

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        message = {'jsonrpc': '2.0', 'id': self.next_id, 'method': method, 'params': params or {}}
        status, content_type, body = post_json(self.url, message, {'X-Toolgate-Run-Id': self.run})
        assert status == 200, (status, body)
        if content_type.startswith('text/event-stream'):
            messages = [json.loads(line[5:]) for line in body.splitlines()
                        if line.startswith('data:') and line[5:].strip()]
        else:
            messages = [json.loads(body)]
        answers = [m for m in messages if m.get('id') == self.next_id and 'method' not in m]
        assert len(answers) == 1, body
        return answers[0]

    def close(self):
        pass


class StdioSession:
    """Raw JSON-RPC lines to `toolgate mcp wrap` in front of url_mcp_server.py."""

    def __init__(self, sidecar: dict, run: str, log: pathlib.Path):
        self.err = log.with_suffix('.err')
        self.proc = subprocess.Popen(
            [str(sidecar['bin']), 'mcp', 'wrap', '--sidecar', sidecar['url'], '--server', SERVER,
             '--run-id', run, '--', sys.executable, str(UPSTREAM), 'stdio', str(log)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err.open('w'), text=True,
            env=dict(os.environ, RUST_LOG='warn'))
        self.lines, self.next_id = queue.Queue(), 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def notify(self, method: str):
        self._send({'jsonrpc': '2.0', 'method': method})

    def _send(self, message: dict):
        self.proc.stdin.write(json.dumps(message) + '\n')
        self.proc.stdin.flush()

    def request(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        self._send({'jsonrpc': '2.0', 'id': self.next_id, 'method': method, 'params': params or {}})
        while True:
            try:
                line = self.lines.get(timeout=30)
            except queue.Empty:
                raise AssertionError(f"no answer to {method} within 30 s") from None
            assert line is not None, f"mcp wrap ended: {self.err.read_text()}"
            message = json.loads(line)
            if message.get('id') == self.next_id and 'method' not in message:
                return message

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def mcp_session(request, gateway, vectors_sidecar, tmp_path):
    """Opens an initialized, listed MCP session one way in: (session, calls),
    `calls()` being the tools/calls the upstream got since."""
    sessions = []

    def open_session(way: str, run: str):
        if way == 'http':
            log = gateway['log']
            session = HttpSession(gateway['url'], run)
        else:
            log = tmp_path / 'upstream.log'
            log.write_text('')
            session = StdioSession(vectors_sidecar, run, log)
        sessions.append(session)
        skip = len(log.read_text().splitlines())

        def calls():
            got = [json.loads(line) for line in log.read_text().splitlines()[skip:]]
            assert {'method': 'tools/list'} in got, got  # this session reached the upstream
            return [(g['name'], g['arguments']) for g in got if g['method'] == 'tools/call']

        init = session.request('initialize', {'protocolVersion': '2025-06-18', 'capabilities': {},
                                              'clientInfo': {'name': 'url-spellings', 'version': '1'}})
        assert 'result' in init, init
        session.notify('notifications/initialized')
        listing = session.request('tools/list')
        assert [t['name'] for t in listing['result']['tools']] == [MCP_TOOL], listing
        return session, calls

    yield open_session
    for session in sessions:
        session.close()


def result_text(result: dict) -> str:
    return ' '.join(c.get('text', '') for c in result.get('content', []))


WAYS = pytest.mark.parametrize('way', ['http', 'wrap'])


@WAYS
@params(MCP_REFUSED)
def test_mcp_gateway_refuses_and_never_forwards(mcp_session, way, i):
    verdict, reason = expected(i)
    assert verdict == 'deny'
    arguments = CASES[i]['arguments']
    session, calls = mcp_session(way, f"url-mcp-{way}-{i}")
    result = session.request('tools/call', {'name': MCP_TOOL, 'arguments': arguments})['result']
    assert result['isError'] is True, result
    assert result['_meta']['toolgate.dev/verdict']['reason'] == reason, result
    assert reason in result_text(result), result
    # An allowed call after it reaches the upstream, alone: the refused one
    # never got there (the server reads the session's messages in order).
    marker = {'url': f"https://api.example.com/after-{way}-{i}"}
    after = session.request('tools/call', {'name': MCP_TOOL, 'arguments': marker})['result']
    assert after['isError'] is False, after
    assert calls() == [(MCP_TOOL, marker)]


@WAYS
@params(MCP_ALLOWED)
def test_mcp_gateway_forwards_allowed_spellings_as_sent(mcp_session, way, i):
    assert expected(i) == ('allow', ALLOW)
    arguments = CASES[i]['arguments']
    session, calls = mcp_session(way, f"url-mcp-{way}-{i}")
    result = session.request('tools/call', {'name': MCP_TOOL, 'arguments': arguments})['result']
    assert result['isError'] is False, result
    assert result_text(result) == f"fetched {arguments['url']}", result
    assert calls() == [(MCP_TOOL, arguments)]
