"""Escalations that do not block an MCP client (issue #36, part 3), with
real peers on both sides of the sidecar's `/mcp` gateway: the TypeScript
SDK's client driving the tasks extension of protocol 2026-07-28
(`@modelcontextprotocol/ext-tasks`, tests/mcp/tasks_client.mjs) and the
TypeScript SDK's server (tests/mcp/deploy_server.mjs), which records every
call it really runs.

The escalated call comes back as a task the client polls; a human decides
with the real `toolgate approvals` CLI; the call runs once on approval and
the client reads the server's answer from the task, or the denial.
"""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import ROOT, _started_sidecar, _stopped, free_port

MCP_DIR = ROOT / 'tests' / 'mcp'
CLIENT = MCP_DIR / 'tasks_client.mjs'
SERVER = MCP_DIR / 'deploy_server.mjs'


def _node() -> str:
    node = shutil.which('node')
    if not node or not (MCP_DIR / 'node_modules' / '@modelcontextprotocol' / 'ext-tasks').exists():
        pytest.fail('node and tests/mcp/node_modules are needed: run `npm ci --prefix tests/mcp` (.ci/run does)')
    return node


@pytest.fixture(scope='module')
def deploy_server(tmp_path_factory):
    """The TypeScript SDK server: {url, calls}."""
    d = tmp_path_factory.mktemp('deploy-server')
    port, calls = free_port(), d / 'calls.log'
    calls.write_text('')
    proc = subprocess.Popen([_node(), str(SERVER), str(port)], cwd=MCP_DIR, env=dict(os.environ, CALLS_FILE=str(calls)),
                            stdout=subprocess.PIPE, stderr=open(d / 'server.err', 'w'), text=True)
    if proc.stdout.readline().strip() != 'READY':
        proc.kill()
        pytest.fail(f"deploy_server.mjs did not start: {(d / 'server.err').read_text()[-3000:]}")
    socket.create_connection(('127.0.0.1', port), timeout=5).close()
    yield {'url': f"http://127.0.0.1:{port}/mcp", 'calls': calls}
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope='module')
def gateway(tmp_path_factory, deploy_server):
    """A sidecar whose upstream `tasks` is the TypeScript server."""
    proc, info, log = _started_sidecar(tmp_path_factory.mktemp('tasks-sidecar'),
                                       ['--mcp-upstream', f"tasks={deploy_server['url']}"])
    yield info
    _stopped(proc, log)


class TasksClient:
    """One run of tasks_client.mjs, read event by event."""

    def __init__(self, gateway, run_id, service):
        self.proc = subprocess.Popen(
            [_node(), str(CLIENT), f"{gateway['url']}/mcp/tasks", 'deploy', json.dumps({'service': service})],
            cwd=MCP_DIR, env=dict(os.environ, RUN_ID=run_id, POLL_MS='100', TIMEOUT_MS='60000'),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events = []

    def next_event(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            pytest.fail(f"the client ended early ({self.proc.returncode}): {self.events}\n{self.proc.stderr.read()}")
        event = json.loads(line)
        self.events.append(event)
        return event

    def waiting_approval(self) -> str:
        """Reads events until the task says which approval it waits on."""
        while True:
            event = self.next_event()
            assert event['event'] in ('tools', 'status'), self.events
            if event['event'] == 'status':
                assert event['status'] == 'working', self.events
                found = re.search(r'waiting for approval (\S+):', event['statusMessage'] or '')
                if found:
                    return found.group(1)

    def outcome(self) -> dict:
        while True:
            event = self.next_event()
            if event['event'] != 'status':
                self.proc.wait(timeout=30)
                return event


def decide(gateway, approval, verb):
    out = subprocess.run([str(gateway['bin']), 'approvals', verb, approval, '--database', gateway['database'],
                          '--by', 'alice', '--reason', 'pytest'], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out


def calls(deploy_server) -> list[str]:
    return deploy_server['calls'].read_text().splitlines()


def test_an_approved_task_runs_the_call_once_and_completes_with_its_answer(gateway, deploy_server, run_id):
    client = TasksClient(gateway, run_id, 'api')
    approval = client.waiting_approval()
    assert client.events[0] == {'event': 'tools', 'era': 'modern', 'protocolVersion': '2026-07-28',
                                'tools': ['deploy']}, client.events
    # The client keeps polling a working task; nothing ran yet.
    time.sleep(0.5)
    assert 'deploy api' not in calls(deploy_server)
    decide(gateway, approval, 'approve')
    result = client.outcome()
    assert result['event'] == 'result' and result['execution'] == 'task', client.events
    assert result['content'] == [{'type': 'text', 'text': 'deployed api'}], result
    assert client.proc.returncode == 0
    assert calls(deploy_server).count('deploy api') == 1, calls(deploy_server)


def test_a_denied_task_fails_with_the_denial_and_never_runs(gateway, deploy_server, run_id):
    client = TasksClient(gateway, run_id, 'billing')
    approval = client.waiting_approval()
    decide(gateway, approval, 'deny')
    failed = client.outcome()
    assert failed['event'] == 'failed', client.events
    assert failed['error']['code'] == -32001, failed
    assert 'approval_denied' in failed['error']['message'], failed
    assert client.proc.returncode == 1
    assert 'deploy billing' not in calls(deploy_server)


def test_a_task_is_no_one_elses(gateway, deploy_server, run_id):
    """Another run asking for the task by its id learns nothing of it."""
    client = TasksClient(gateway, run_id, 'search')
    client.waiting_approval()
    task = client.events[-1]['taskId']
    request = urllib.request.Request(
        f"{gateway['url']}/mcp/tasks", method='POST',
        data=json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'tasks/get', 'params': {'taskId': task}}).encode(),
        headers={'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream',
                 'Mcp-Protocol-Version': '2026-07-28', 'X-Toolgate-Run-Id': f"{run_id}-other",
                 'Mcp-Method': 'tasks/get', 'Mcp-Name': task})
    with urllib.request.urlopen(request, timeout=10) as r:
        answer = json.loads(r.read())
    assert answer['error']['code'] == -32602, answer
    client.proc.kill()
    client.proc.wait()
    assert 'deploy search' not in calls(deploy_server)


TASKS_META = {'io.modelcontextprotocol/clientCapabilities': {'extensions': {'io.modelcontextprotocol/tasks': {}}}}


class Wrapped:
    """`toolgate mcp wrap` around modern_stdio_server.py, spoken to line by
    line."""

    def __init__(self, sidecar, run_id, log):
        server = pathlib.Path(__file__).parent / 'modern_stdio_server.py'
        self.proc = subprocess.Popen(
            [str(sidecar['bin']), 'mcp', 'wrap', '--sidecar', sidecar['url'], '--server', 'tasks',
             '--run-id', run_id, '--', sys.executable, str(server), str(log)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ, RUST_LOG='warn'))
        self.next_id = 0

    def request(self, method, params) -> dict:
        self.next_id += 1
        self.proc.stdin.write(json.dumps({'jsonrpc': '2.0', 'id': self.next_id, 'method': method,
                                          'params': params}) + '\n')
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer['id'] == self.next_id, answer
        return answer

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def test_mcp_wrap_holds_an_escalated_call_as_a_task_too(sidecar, run_id, tmp_path):
    log = tmp_path / 'calls.log'
    log.write_text('')
    wrapped = Wrapped(sidecar, run_id, log)
    try:
        discovered = wrapped.request('server/discover', {})
        assert discovered['result']['capabilities']['extensions'] == {'io.modelcontextprotocol/tasks': {}}
        assert [t['name'] for t in wrapped.request('tools/list', {})['result']['tools']] == ['deploy']

        created = wrapped.request('tools/call', {'name': 'deploy', 'arguments': {'service': 'stdio'},
                                                 '_meta': TASKS_META})['result']
        assert created['resultType'] == 'task' and created['status'] == 'working', created
        approval = created['_meta']['toolgate.dev/verdict']['approval_id']
        task = created['taskId']
        assert wrapped.request('tasks/get', {'taskId': task})['result']['status'] == 'working'
        assert log.read_text() == ''
        decide(sidecar, approval, 'approve')
        deadline = time.monotonic() + 30
        while (got := wrapped.request('tasks/get', {'taskId': task})['result'])['status'] == 'working':
            assert time.monotonic() < deadline, got
            time.sleep(0.1)
        assert got['status'] == 'completed', got
        assert got['result']['content'] == [{'type': 'text', 'text': 'deployed stdio'}], got
        ran = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(ran) == 1 and ran[0]['service'] == 'stdio', ran
        # The server answers the approved call itself: it is not offered a task.
        assert 'io.modelcontextprotocol/tasks' not in json.dumps(ran[0]['meta']), ran

        # Without the declaration, the same escalation is refused as before.
        refused = wrapped.request('tools/call', {'name': 'deploy', 'arguments': {'service': 'plain'}})['result']
        assert refused['isError'] and 'approval_required' in refused['content'][0]['text'], refused
        assert 'taskId' not in refused
    finally:
        wrapped.close()
