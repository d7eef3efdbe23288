"""toolgate.integrations.openai_agents with the real openai-agents 0.24.0:
the SDK's own Runner executes the tool calls that its scripted test model
(agents.testing.ScriptedModel, no provider, no network) asks for."""
import os
import socket

import pytest

import toolgate
from toolgate.integrations.openai_agents import govern_tool, govern_tools

try:
    import agents
except ImportError:
    # CI installs tests/requirements.txt: there a missing package fails.
    if os.environ.get('CI') == 'true':
        raise
    pytest.skip('pip install openai-agents==0.24.0 (tests/requirements.txt)', allow_module_level=True)
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

pytestmark = pytest.mark.asyncio


@pytest.fixture
def no_network(monkeypatch):
    """Only loopback connections: the SDK must never reach a provider or
    export a trace."""
    real_connect = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in ('127.0.0.1', '::1', 'localhost'):
            raise AssertionError(f"network access attempted: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, 'connect', connect)


@pytest.fixture
def tools():
    calls = []

    @agents.function_tool
    def lookup(q: str) -> str:
        """Looks something up."""
        calls.append(('lookup', q))
        return f"answer to {q}"

    @agents.function_tool
    def transfer(amount: int, to: str) -> str:
        """Moves money (high risk)."""
        calls.append(('transfer', amount))
        if amount < 0:
            raise ValueError('negative amount')
        return f"sent {amount} to {to}"

    @agents.function_tool
    def drop_table(name: str) -> str:
        """Never allowed."""
        calls.append(('drop_table', name))
        return 'dropped'

    @agents.function_tool
    def publish(package: str) -> str:
        """Needs a human."""
        calls.append(('publish', package))
        return 'published'

    return calls, [lookup, transfer, drop_table, publish]


async def _run(tools, *requested):
    """Runs an agent whose model asks for `requested` ((name, arguments)
    pairs) in one turn, then stops: {call_id: the output the model saw}."""
    model = ScriptedModel([
        [function_call(name, args, call_id=f"call_{i}") for i, (name, args) in enumerate(requested)],
        [assistant_message('done')],
    ])
    agent = agents.Agent(name='ops', instructions='test', model=model, tools=tools)
    result = await agents.Runner.run(agent, 'go', run_config=agents.RunConfig(tracing_disabled=True))
    assert result.final_output == 'done'
    model.assert_complete()
    seen = [item for item in model.calls[1].input
            if isinstance(item, dict) and item.get('type') == 'function_call_output']
    return {item['call_id']: item['output'] for item in seen}


@pytest.mark.parametrize('client_kind', ['async', 'sync'])
async def test_verdicts_reach_the_model(sidecar, run_id, tools, no_network, intent_rows, client_kind):
    calls, funcs = tools
    client = (toolgate.AsyncClient if client_kind == 'async' else toolgate.Client)(sidecar['url'], run_id=run_id)
    out = await _run(govern_tools(funcs, client),
                     ('lookup', {'q': 'weather'}), ('drop_table', {'name': 'users'}),
                     ('publish', {'package': 'p'}), ('transfer', {'amount': 5, 'to': 'acct'}),
                     ('transfer', {'amount': -1, 'to': 'acct'}))
    # Low risk: runs, no intent.
    assert out['call_0'] == 'answer to weather'
    # Denied: never runs; the model reads why.
    assert out['call_1'].startswith('toolgate: denied by policy: deny_rule') and 'decision ' in out['call_1']
    # Escalated with no waiting: not run, the approval named.
    assert out['call_2'].startswith('toolgate: needs human approval ') and 'did not run' in out['call_2']
    # High risk: intent begun and effect-sent before, closed after; the
    # SDK's failure handler turning the exception into output closes it `error`.
    assert out['call_3'] == 'sent 5 to acct'
    assert out['call_4'] == 'An error occurred while running the tool. Please try again.'
    rows = sorted(intent_rows(run_id))
    assert [r[:2] + r[3:] for r in rows] == [('transfer', 'completed', 1), ('transfer', 'error', 1)]
    assert 'An error occurred' in rows[1][2]
    if client_kind == 'sync':
        assert client.pending_intents() == []
        client.close()
    else:
        assert await client.pending_intents() == []
        await client.aclose()
    assert sorted(calls) == [('lookup', 'weather'), ('transfer', -1), ('transfer', 5)]


async def test_raising_tool_closes_intent_and_raises(sidecar, run_id, no_network, intent_rows):
    """Without the SDK's failure handler the exception ends the run, and the
    intent records what it was."""
    @agents.function_tool(failure_error_function=None)
    def transfer(amount: int, to: str) -> str:
        """Moves money."""
        raise RuntimeError('bank offline')

    async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as client:
        with pytest.raises(Exception, match='bank offline'):
            await _run([govern_tool(transfer, client)], ('transfer', {'amount': 1, 'to': 'a'}))
    assert intent_rows(run_id) == [('transfer', 'error', 'RuntimeError: bank offline', 1)]


async def test_waits_for_approval(sidecar, run_id, tools, no_network, approve_later):
    calls, funcs = tools
    async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as client:
        first = await client.authorize('publish', {'package': 'lib'})
        assert first.escalated
        approve_later(first.approval_id, delay=0.5)
        out = await _run(govern_tools(funcs, client, approval_timeout=20), ('publish', {'package': 'lib'}))
    assert out == {'call_0': 'published'}
    assert calls == [('publish', 'lib')]


async def test_fails_closed_when_sidecar_unreachable(closed_url, tools, no_network):
    calls, funcs = tools
    with toolgate.Client(closed_url, timeout=2) as client:
        out = await _run(govern_tools(funcs, client), ('lookup', {'q': 'x'}))
    assert calls == []
    assert out['call_0'].startswith('toolgate: sidecar refused or unreachable')
    assert 'sidecar_unreachable' in out['call_0']


async def test_refuses_tools_it_cannot_govern(closed_url):
    client = toolgate.Client(closed_url)
    with pytest.raises(TypeError, match='FunctionTools only'):
        govern_tools([agents.WebSearchTool()], client)
    client.close()
