"""toolgate.integrations.langgraph with the real langgraph 1.2.24: a compiled
StateGraph whose ToolNode LangGraph itself runs on an AIMessage carrying
tool_calls (no model)."""
import os

import pytest

import toolgate
from toolgate.integrations.langgraph import governed_tool_node, tool_call_wrappers

try:
    import langgraph.prebuilt  # noqa: F401
except ImportError:
    # CI installs tests/requirements.txt: there a missing package fails.
    if os.environ.get('CI') == 'true':
        raise
    pytest.skip('pip install langgraph==1.2.24 (tests/requirements.txt)', allow_module_level=True)
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

pytestmark = pytest.mark.asyncio


@pytest.fixture
def tools():
    calls = []

    @tool
    def lookup(q: str) -> str:
        """Looks something up."""
        calls.append(('lookup', q))
        return f"answer to {q}"

    @tool
    def transfer(amount: int, to: str) -> str:
        """Moves money (high risk)."""
        calls.append(('transfer', amount))
        if amount < 0:
            raise ValueError('negative amount')
        return f"sent {amount} to {to}"

    @tool
    def drop_table(name: str) -> str:
        """Never allowed."""
        calls.append(('drop_table', name))
        return 'dropped'

    @tool
    def publish(package: str) -> str:
        """Needs a human."""
        calls.append(('publish', package))
        return 'published'

    return calls, [lookup, transfer, drop_table, publish]


def _graph(node):
    g = StateGraph(MessagesState)
    g.add_node('tools', node)
    g.add_edge(START, 'tools')
    g.add_edge('tools', END)
    return g.compile()


def _input(*requested):
    """An AIMessage asking for `requested` ((name, args) pairs)."""
    calls = [{'name': n, 'args': a, 'id': f"call_{i}", 'type': 'tool_call'} for i, (n, a) in enumerate(requested)]
    return {'messages': [AIMessage(content='', tool_calls=calls)]}


def _results(state):
    """{tool_call_id: ToolMessage} of the graph's final state."""
    return {m.tool_call_id: m for m in state['messages'] if isinstance(m, ToolMessage)}


CALLS = [('lookup', {'q': 'weather'}), ('drop_table', {'name': 'users'}), ('publish', {'package': 'p'}),
         ('transfer', {'amount': 5, 'to': 'acct'}), ('transfer', {'amount': -1, 'to': 'acct'})]


@pytest.mark.parametrize('mode', ['sync-invoke', 'sync-client-ainvoke', 'async-client-ainvoke'])
async def test_verdicts_reach_the_model(sidecar, run_id, tools, intent_rows, mode):
    calls, funcs = tools
    client = (toolgate.AsyncClient if mode.startswith('async') else toolgate.Client)(sidecar['url'], run_id=run_id)
    # handle_tool_errors=True: a raising tool becomes an error ToolMessage.
    graph = _graph(governed_tool_node(funcs, client, handle_tool_errors=True))
    state = graph.invoke(_input(*CALLS)) if mode == 'sync-invoke' else await graph.ainvoke(_input(*CALLS))
    out = _results(state)
    # Low risk: runs, no intent.
    assert (out['call_0'].content, out['call_0'].status) == ('answer to weather', 'success')
    # Denied: never runs; the model reads why, as an error result.
    assert out['call_1'].status == 'error' and out['call_1'].name == 'drop_table'
    assert out['call_1'].content.startswith('toolgate: denied by policy: deny_rule')
    # Escalated with no waiting: not run, the approval named.
    assert out['call_2'].status == 'error'
    assert out['call_2'].content.startswith('toolgate: needs human approval ')
    # High risk: intent closed `completed`, or `error` for the tool that raised.
    assert out['call_3'].content == 'sent 5 to acct'
    assert out['call_4'].status == 'error' and 'negative amount' in out['call_4'].content
    rows = sorted(intent_rows(run_id))
    assert [r[:2] + r[3:] for r in rows] == [('transfer', 'completed', 1), ('transfer', 'error', 1)]
    assert 'negative amount' in rows[1][2]
    if isinstance(client, toolgate.Client):
        assert client.pending_intents() == []
        client.close()
    else:
        assert await client.pending_intents() == []
        await client.aclose()
    assert sorted(calls) == [('lookup', 'weather'), ('transfer', -1), ('transfer', 5)]


async def test_raising_tool_closes_intent_and_raises(sidecar, run_id, tools, intent_rows):
    """ToolNode's default error handling re-raises a tool's exception: the
    intent records it and the graph run fails."""
    calls, funcs = tools
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        graph = _graph(governed_tool_node(funcs, client))
        with pytest.raises(ValueError, match='negative amount'):
            graph.invoke(_input(('transfer', {'amount': -3, 'to': 'x'})))
    assert intent_rows(run_id) == [('transfer', 'error', 'ValueError: negative amount', 1)]


async def test_waits_for_approval(sidecar, run_id, tools, approve_later):
    calls, funcs = tools
    async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as client:
        first = await client.authorize('publish', {'package': 'lib'})
        assert first.escalated
        approve_later(first.approval_id, delay=0.5)
        state = await _graph(governed_tool_node(funcs, client, approval_timeout=20)).ainvoke(
            _input(('publish', {'package': 'lib'})))
    assert _results(state)['call_0'].content == 'published'
    assert calls == [('publish', 'lib')]


@pytest.mark.parametrize('kind', ['sync', 'async'])
async def test_fails_closed_when_sidecar_unreachable(closed_url, tools, kind):
    calls, funcs = tools
    client = (toolgate.AsyncClient if kind == 'async' else toolgate.Client)(closed_url, timeout=2)
    graph = _graph(governed_tool_node(funcs, client))
    state = await graph.ainvoke(_input(('lookup', {'q': 'x'})))
    if kind == 'sync':
        state_sync = graph.invoke(_input(('lookup', {'q': 'y'})))
        assert 'sidecar_unreachable' in _results(state_sync)['call_0'].content
        client.close()
    else:
        # An AsyncClient cannot serve a synchronous run: refused, not run.
        assert 'AsyncClient cannot decide' in _results(graph.invoke(_input(('lookup', {'q': 'y'}))))['call_0'].content
        await client.aclose()
    msg = _results(state)['call_0']
    assert calls == []
    assert msg.status == 'error' and msg.content.startswith('toolgate: sidecar refused or unreachable')
    assert 'sidecar_unreachable' in msg.content


async def test_wrappers_compose_with_a_plain_tool_node(closed_url, tools):
    """tool_call_wrappers() is the pair a hand-built ToolNode takes; one
    without the sync half would run synchronous calls ungoverned, so
    governed_tool_node refuses to be handed either."""
    calls, funcs = tools
    with toolgate.Client(closed_url, timeout=2) as client:
        wrap, awrap = tool_call_wrappers(client)
        node = ToolNode(funcs, wrap_tool_call=wrap, awrap_tool_call=awrap)
        assert 'sidecar_unreachable' in _results(_graph(node).invoke(_input(('lookup', {'q': 'z'}))))['call_0'].content
        with pytest.raises(TypeError, match='sets wrap_tool_call'):
            governed_tool_node(funcs, client, wrap_tool_call=wrap)
    assert calls == []
