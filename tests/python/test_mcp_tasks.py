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
                 'Mcp-Protocol-Version': '2026-07-28', 'X-Toolgate-Run-Id': f"{run_id}-other"})
    with urllib.request.urlopen(request, timeout=10) as r:
        answer = json.loads(r.read())
    assert answer['error']['code'] == -32602, answer
    client.proc.kill()
    client.proc.wait()
    assert 'deploy search' not in calls(deploy_server)
