"""Held MCP tasks survive a sidecar killed with SIGKILL (issue #46 item 6):
the task is kept in the store, a restarted sidecar on the same database
answers `tasks/get` and makes the call once its approval is granted, and a
call that was in flight when the sidecar died is never sent again; its task
fails with its outcome unknown. The upstream is the TypeScript SDK's
server (tests/mcp/deploy_server.mjs), which records every call it runs.
"""
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from .conftest import _started_sidecar, _stopped, free_port
from .test_mcp_tasks import MCP_DIR, SERVER, TASKS_META, _node, decide

PROTOCOL = '2026-07-28'


@pytest.fixture(scope='module')
def upstream(tmp_path_factory):
    """deploy_server.mjs, stalling on `deploy stall`: {url, calls}."""
    d = tmp_path_factory.mktemp('restart-upstream')
    port, calls = free_port(), d / 'calls.log'
    calls.write_text('')
    proc = subprocess.Popen([_node(), str(SERVER), str(port)], cwd=MCP_DIR,
                            env=dict(os.environ, CALLS_FILE=str(calls), STALL_SERVICE='stall'),
                            stdout=subprocess.PIPE, stderr=open(d / 'server.err', 'w'), text=True)
    if proc.stdout.readline().strip() != 'READY':
        proc.kill()
        pytest.fail(f"deploy_server.mjs did not start: {(d / 'server.err').read_text()[-3000:]}")
    socket.create_connection(('127.0.0.1', port), timeout=5).close()
    yield {'url': f"http://127.0.0.1:{port}/mcp", 'calls': calls}
    proc.kill()
    proc.wait(timeout=10)


def calls(upstream) -> list[str]:
    return upstream['calls'].read_text().splitlines()


def post(sidecar, run_id, message, extra=None) -> dict:
    """One message to the sidecar's gateway, its answer read (JSON or SSE)."""
    headers = {'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream',
               'Mcp-Protocol-Version': PROTOCOL, 'X-Toolgate-Run-Id': run_id, 'Mcp-Method': message['method']}
    headers.update(extra or {})
    request = urllib.request.Request(f"{sidecar['url']}/mcp/tasks", method='POST',
                                     data=json.dumps(message).encode(), headers=headers)
    try:
        r = urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as e:
        pytest.fail(f"{message['method']}: HTTP {e.code}: {e.read().decode()[:2000]}")
    with r:
        body = r.read().decode()
        if 'text/event-stream' in r.headers.get('Content-Type', ''):
            data = [line[5:].strip() for line in body.splitlines() if line.startswith('data:')]
            answers = [json.loads(d) for d in data if d]
            return next(a for a in answers if a.get('id') == message['id'])
        return json.loads(body)


class Client:
    """A client of the tasks extension speaking raw HTTP, so it can go on
    with the sidecar that replaces a killed one."""

    def __init__(self, sidecar, run_id):
        self.sidecar, self.run_id, self.next_id = sidecar, run_id, 0

    def request(self, method, params, extra=None) -> dict:
        self.next_id += 1
        params = dict(params, _meta={'io.modelcontextprotocol/protocolVersion': PROTOCOL,
                                     'io.modelcontextprotocol/clientInfo': {'name': 'pytest', 'version': '1'},
                                     **TASKS_META})
        return post(self.sidecar, self.run_id, {'jsonrpc': '2.0', 'id': self.next_id, 'method': method,
                                                'params': params}, extra)

    def deploy(self, service) -> dict:
        """server/discover, tools/list, then the escalated call: its task."""
        assert 'result' in self.request('server/discover', {})
        tools = self.request('tools/list', {})['result']['tools']
        assert [t['name'] for t in tools] == ['deploy'], tools
        created = self.request('tools/call', {'name': 'deploy', 'arguments': {'service': service}},
                               {'Mcp-Name': 'deploy', 'Mcp-Param-Service': service})
        assert created['result']['resultType'] == 'task', created
        return created['result']

    def task(self, task_id) -> dict:
        answer = self.request('tasks/get', {'taskId': task_id}, {'Mcp-Name': task_id})
        assert 'result' in answer, answer
        return answer['result']

    def ended(self, task_id, timeout=30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            task = self.task(task_id)
            if task['status'] != 'working':
                return task
            time.sleep(0.1)
        pytest.fail(f"task {task_id} still working: {task}")


def approval_of(task) -> str:
    found = re.search(r'waiting for approval (\S+):', task['statusMessage'])
    assert found, task
    return found.group(1)


def killed(proc, log):
    proc.kill()
    proc.wait()
    log.close()


def test_a_held_task_survives_a_killed_sidecar_and_runs_once_when_approved(tmp_path, upstream, run_id):
    first, second = tmp_path / 'first', tmp_path / 'second'
    first.mkdir()
    second.mkdir()
    proc, sidecar, log = _started_sidecar(first, ['--mcp-upstream', f"tasks={upstream['url']}"])
    client = Client(sidecar, run_id)
    task = client.deploy('restart')
    approval = approval_of(client.task(task['taskId']))
    killed(proc, log)

    proc, restarted, log = _started_sidecar(second, ['--mcp-upstream', f"tasks={upstream['url']}"],
                                            database=sidecar['database'], bundle_of=first)
    try:
        client.sidecar = restarted
        waiting = client.task(task['taskId'])
        assert waiting['status'] == 'working' and approval in waiting['statusMessage'], waiting
        assert 'deploy restart' not in calls(upstream)
        decide(restarted, approval, 'approve')
        done = client.ended(task['taskId'])
        assert done['status'] == 'completed', done
        assert done['result']['content'] == [{'type': 'text', 'text': 'deployed restart'}], done
        time.sleep(0.5)
        assert calls(upstream).count('deploy restart') == 1, calls(upstream)
        # Read from the store by a sidecar that never held it in memory too.
        other = Client(restarted, f"{run_id}-other")
        refused = other.request('tasks/get', {'taskId': task['taskId']}, {'Mcp-Name': task['taskId']})
        assert refused['error']['code'] == -32602, refused
    finally:
        _stopped(proc, log)

    (tmp_path / 'third').mkdir()
    proc, third, log = _started_sidecar(tmp_path / 'third', ['--mcp-upstream', f"tasks={upstream['url']}"],
                                        database=sidecar['database'], bundle_of=first)
    try:
        client.sidecar = third
        again = client.task(task['taskId'])
        assert again['status'] == 'completed', again
        assert again['result']['content'] == [{'type': 'text', 'text': 'deployed restart'}], again
        assert calls(upstream).count('deploy restart') == 1, calls(upstream)
    finally:
        _stopped(proc, log)


def test_a_call_in_flight_when_the_sidecar_dies_is_never_sent_again(tmp_path, upstream, run_id):
    first, second = tmp_path / 'first', tmp_path / 'second'
    first.mkdir()
    second.mkdir()
    proc, sidecar, log = _started_sidecar(first, ['--mcp-upstream', f"tasks={upstream['url']}"])
    client = Client(sidecar, run_id)
    task = client.deploy('stall')
    decide(sidecar, approval_of(client.task(task['taskId'])), 'approve')
    # The upstream received the call and never answers: killed mid-forward.
    deadline = time.monotonic() + 30
    while 'deploy stall' not in calls(upstream) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert calls(upstream).count('deploy stall') == 1, calls(upstream)
    assert client.task(task['taskId'])['status'] == 'working'
    killed(proc, log)

    proc, restarted, log = _started_sidecar(second, ['--mcp-upstream', f"tasks={upstream['url']}"],
                                            database=sidecar['database'], bundle_of=first)
    try:
        client.sidecar = restarted
        failed = client.ended(task['taskId'])
        assert failed['status'] == 'failed', failed
        assert 'outcome unknown: the sidecar stopped while forwarding' in failed['error']['message'], failed
        time.sleep(2)
        assert calls(upstream).count('deploy stall') == 1, calls(upstream)
    finally:
        _stopped(proc, log)
