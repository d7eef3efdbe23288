"""Traces on a real backend: a sidecar exporting over OTLP to Jaeger
(scripts/jaeger.py, built from its Go module), driven by an "agent" that
holds a span of its own, and an MCP server that records its own spans.

One agent turn makes a low-risk call, an escalation a human approves with
the CLI, a high-risk call with its intent, and an MCP call through the
gateway; Jaeger must then hold ONE trace with the agent's span at the root,
the sidecar's decision spans and their attributes, the approval wait, and
the upstream server's span as a child of the gateway's.
"""
import json
import pathlib
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from mcp import Client
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import toolgate

from .conftest import ROOT, _python_server, _started_sidecar, _stopped, free_port

sys.path.insert(0, str(ROOT / 'scripts'))
import jaeger as jaeger_backend  # noqa: E402


@pytest.fixture(scope='module')
def jaeger():
    info = jaeger_backend.up()
    yield info
    jaeger_backend.down(info['dir'])


@pytest.fixture(scope='module')
def traced(tmp_path_factory, jaeger):
    """A sidecar exporting traces, with upstream `traced` (an MCP server
    that exports its own)."""
    d = tmp_path_factory.mktemp('traced')
    port = free_port()
    upstream = _python_server(d, 'traced_mcp_server.py', port, port, jaeger['otlp'])
    try:
        proc, info, log = _started_sidecar(d, ['--mcp-upstream', f"traced=http://127.0.0.1:{port}/mcp"], env={
            'OTEL_EXPORTER_OTLP_ENDPOINT': jaeger['otlp'],
            'OTEL_BSP_SCHEDULE_DELAY': '100',
            'OTEL_RESOURCE_ATTRIBUTES': 'k8s.pod.name=pytest-agent,k8s.namespace.name=agents',
        })
        yield info
        _stopped(proc, log)
    finally:
        upstream.terminate()
        upstream.wait(timeout=10)


def trace_of(jaeger, trace_id: str, until) -> list[dict]:
    """The spans of `trace_id`, oldest first, once `until(spans)` holds
    (spans arrive in batches from three processes), each with its tags as a
    dict and its service name; fails after 30 s with what arrived."""
    spans: list[dict] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{jaeger['query']}/api/traces/{trace_id}", timeout=5) as r:
                data = json.load(r)['data']
        except urllib.error.HTTPError:
            data = []
        if data:
            processes = data[0]['processes']
            spans = [{
                'name': s['operationName'], 'id': s['spanID'], 'start': s['startTime'],
                'parent': next((ref['spanID'] for ref in s['references'] if ref['refType'] == 'CHILD_OF'), None),
                'service': processes[s['processID']]['serviceName'],
                'resource': {t['key']: t['value'] for t in processes[s['processID']].get('tags', [])},
                'tags': {t['key']: t['value'] for t in s['tags']},
            } for s in sorted(data[0]['spans'], key=lambda s: s['startTime'])]
            if until(spans):
                return spans
        time.sleep(0.5)
    pytest.fail(f"trace {trace_id} never held what was expected; got {[(s['name'], s['service']) for s in spans]}")


def named(spans, name):
    return [s for s in spans if s['name'] == name]


def ancestors(spans, span):
    by_id = {s['id']: s for s in spans}
    out, at = [], span
    while at['parent'] in by_id:
        at = by_id[at['parent']]
        out.append(at)
    return out


@pytest.mark.asyncio
async def test_one_agent_turn_is_one_trace_through_sidecar_gateway_and_server(traced, jaeger, run_id):
    provider = TracerProvider(resource=Resource.create({'service.name': 'pytest-agent'}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{jaeger['otlp']}/v1/traces")))
    tracer = provider.get_tracer('pytest-agent')
    client = toolgate.Client(traced['url'], run_id=run_id)
    with tracer.start_as_current_span('agent turn') as turn:
        trace_id = format(turn.get_span_context().trace_id, '032x')
        assert client.authorize('lookup', {'q': 'weather'}).verdict == 'allow'

        asked = client.authorize('publish', {'package': 'x'})
        assert asked.verdict == 'escalate', asked
        approver = threading.Thread(target=lambda: (time.sleep(0.5), subprocess.run([
            str(traced['bin']), 'approvals', 'approve', asked.approval_id, '--database', traced['database'],
            '--by', 'alice', '--reason', 'traced'], check=True, capture_output=True)))
        approver.start()
        assert client.wait_for_approval(asked.approval_id, timeout=20) == 'approved'
        approver.join()
        assert client.authorize('publish', {'package': 'x'}).verdict == 'allow'

        assert client.guard('bash', {'command': 'git status'}, lambda: 'clean') == 'clean'

        async with Client(f"{traced['url']}/mcp/traced") as mcp:
            assert [t.name for t in (await mcp.list_tools()).tools] == ['echo']
            result = await mcp.call_tool('echo', {'text': 'traced hello'})
            assert 'traced hello' in ' '.join(getattr(c, 'text', '') for c in result.content)
    provider.force_flush()

    def complete(spans):
        names = {s['name'] for s in spans}
        return {'agent turn', 'execute_tool traced.echo', 'echo body', 'toolgate.intent.complete',
                'toolgate.approval.wait'} <= names
    spans = trace_of(jaeger, trace_id, complete)
    root = named(spans, 'agent turn')[0]
    assert root['service'] == 'pytest-agent' and root['parent'] is None

    # The sidecar's spans continue the agent's trace, from its traceparent.
    sidecar_spans = [s for s in spans if s['service'] == 'toolgate-sidecar']
    assert sidecar_spans and all(root in ancestors(spans, s) for s in sidecar_spans)
    assert sidecar_spans[0]['resource'].get('k8s.pod.name') == 'pytest-agent'
    lookup = named(spans, 'execute_tool lookup')[0]
    assert lookup['tags']['gen_ai.operation.name'] == 'execute_tool'
    assert lookup['tags']['gen_ai.tool.name'] == 'lookup'
    assert lookup['tags']['toolgate.verdict'] == 'allow'
    assert lookup['tags']['toolgate.run_id'] == run_id
    assert lookup['tags']['toolgate.tenant'] == 'pytest'
    assert lookup['tags']['toolgate.policy_version'].startswith('python-client@')
    assert 'POST /v1/authorize' in [a['name'] for a in ancestors(spans, lookup)]

    # The escalation: the approval asked for, the wait and who decided.
    publish = named(spans, 'execute_tool publish')
    assert [p['tags']['toolgate.verdict'] for p in publish] == ['escalate', 'allow']
    assert publish[0]['tags']['toolgate.approval_id'] == asked.approval_id
    assert named(spans, 'toolgate.approval.request')[0]['parent'] == publish[0]['id']
    wait = named(spans, 'toolgate.approval.wait')[-1]
    assert wait['tags']['toolgate.approval_id'] == asked.approval_id
    assert wait['tags']['toolgate.approval.status'] == 'approved'
    assert wait['tags']['toolgate.approval.decided_by'] == 'alice'

    # The high-risk call: recorded durably, then its intent's whole life.
    bash = named(spans, 'execute_tool bash')[0]
    assert bash['tags']['toolgate.risk'] == 'high'
    append = named(spans, 'toolgate.decision.append')
    assert any(a['parent'] == bash['id'] for a in append), 'the durable append is a child of the call'
    for phase in ('begin', 'effect_sent', 'complete'):
        step = named(spans, f'toolgate.intent.{phase}')[0]
        assert step['tags']['toolgate.decision_id'] == bash['tags']['toolgate.decision_id']
    assert named(spans, 'toolgate.intent.complete')[0]['tags']['toolgate.intent.status'] == 'completed'

    # The MCP hop: the gateway's span, the decision under it, and the
    # upstream server's own spans under the gateway's.
    gateway = [s for s in named(spans, 'tools/call echo') if s['service'] == 'toolgate-sidecar'][0]
    assert gateway['tags']['mcp.method.name'] == 'tools/call'
    assert gateway['tags']['gen_ai.tool.name'] == 'echo'
    assert 'jsonrpc.request.id' in gateway['tags']
    assert gateway in ancestors(spans, named(spans, 'execute_tool traced.echo')[0])
    server_spans = [s for s in spans if s['service'] == 'traced-mcp-server']
    # Each message the server handled (initialize, tools/list, the call) is
    # under the gateway's span of that message.
    for s in server_spans:
        assert any(a['service'] == 'toolgate-sidecar' and a['name'].split()[0] == s['name'].split()[0]
                   for a in ancestors(spans, s)) or s['name'] == 'echo body', (s['name'], s['parent'])
    call = [s for s in server_spans if s['name'] == 'tools/call echo']
    assert call and call[0]['parent'] == gateway['id'], 'the server span is a child of the gateway\'s'
    assert gateway in ancestors(spans, named(spans, 'echo body')[0])

    # Arguments are not recorded unless the sidecar opts in.
    assert not any('gen_ai.tool.call.arguments' in s['tags'] for s in sidecar_spans)
    assert not any('weather' in json.dumps(s['tags']) for s in sidecar_spans)


def test_the_hook_joins_the_trace_its_environment_names(traced, jaeger):
    """`toolgate hook pre-tool-use` passes on TRACEPARENT: the sidecar's
    spans of the hook's call are children of the span it names."""
    trace_id, parent = '5f0c2a9d8e7b6a5f4e3d2c1b0a998877', '1122334455667788'
    hook_input = json.dumps({
        'session_id': 'traced-session', 'transcript_path': '/tmp/t.jsonl', 'cwd': '/workspace',
        'hook_event_name': 'PreToolUse', 'tool_name': 'Bash',
        'tool_input': {'command': 'echo traced'}, 'tool_use_id': 'toolu_traced',
    })
    out = subprocess.run([str(traced['bin']), 'hook', 'pre-tool-use'], input=hook_input, capture_output=True,
                         text=True, timeout=60, env={'PATH': '/usr/bin:/bin', 'TOOLGATE_URL': traced['url'],
                                                     'TRACEPARENT': f"00-{trace_id}-{parent}-01"})
    assert json.loads(out.stdout)['hookSpecificOutput']['permissionDecision'] == 'allow', out
    spans = trace_of(jaeger, trace_id, lambda spans: any(s['name'] == 'execute_tool Bash' for s in spans))
    server = named(spans, 'POST /v1/hooks/{format}')[0]
    assert server['parent'] == parent, 'the hook\'s request continues the trace it was handed'
    assert named(spans, 'execute_tool Bash')[0]['parent'] == server['id']


@pytest.mark.asyncio
async def test_mcp_wrap_carries_the_messages_trace_context_to_the_sidecar(traced, jaeger, tmp_path, run_id):
    """`toolgate mcp wrap` exports nothing itself, but passes the
    `traceparent` an MCP client put in a message's `params._meta` on to the
    sidecar, so the decision joins the agent's trace."""
    from .test_mcp_wrap import SERVER_JS, text, wrapped

    if not SERVER_JS.exists():
        pytest.fail(f"{SERVER_JS} not found: run `npm install --prefix tests/mcp` (.ci/run does)")
    root = tmp_path / 'root'
    root.mkdir()
    (root / 'notes.txt').write_text('traced notes')
    provider = TracerProvider(resource=Resource.create({'service.name': 'pytest-agent'}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{jaeger['otlp']}/v1/traces")))
    with provider.get_tracer('pytest-agent').start_as_current_span('agent turn via wrap') as turn:
        trace_id = format(turn.get_span_context().trace_id, '032x')
        async with Client(wrapped(traced, SERVER_JS, root, run_id)) as mcp:
            await mcp.list_tools()
            result = await mcp.call_tool('read_text_file', {'path': str(root / 'notes.txt')})
            assert 'traced notes' in text(result)
    provider.force_flush()
    # The agent's span and the sidecar's reach Jaeger separately: wait for both.
    spans = trace_of(jaeger, trace_id, lambda spans: {'execute_tool fs.read_text_file', 'agent turn via wrap'}
                     <= {s['name'] for s in spans})
    call = named(spans, 'execute_tool fs.read_text_file')[0]
    assert call['tags']['toolgate.run_id'] == run_id
    assert named(spans, 'agent turn via wrap')[0] in ancestors(spans, call)
