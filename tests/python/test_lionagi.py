"""toolgate.integrations.lionagi.govern with the real lionagi 0.36.0: tools
invoked through the Branch's action machinery (`branch.act`), no model."""
import os
import socket

import pytest

import toolgate
from toolgate.integrations.lionagi import govern

try:
    import lionagi
except ImportError:
    # CI installs tests/requirements.txt: there a missing package fails.
    if os.environ.get('CI') == 'true':
        raise
    pytest.skip('pip install lionagi==0.36.0 (tests/requirements.txt)', allow_module_level=True)

pytestmark = pytest.mark.asyncio


@pytest.fixture
def no_network(monkeypatch):
    """Only loopback connections: lionagi must never reach a provider."""
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

    def lookup(q: str) -> str:
        """Looks something up."""
        calls.append(('lookup', q))
        return f"answer to {q}"

    def transfer(amount: int, to: str) -> str:
        """Moves money (high risk)."""
        calls.append(('transfer', amount))
        if amount < 0:
            raise ValueError('negative amount')
        return f"sent {amount} to {to}"

    def drop_table(name: str) -> str:
        """Never allowed."""
        calls.append(('drop_table', name))
        return 'dropped'

    def publish(package: str) -> str:
        """Needs a human."""
        calls.append(('publish', package))
        return 'published'

    return calls, [lookup, transfer, drop_table, publish]


def _branch(tools, tmp_path):
    from lionagi import Branch

    return Branch(tools=tools, log_config={'persist_dir': str(tmp_path / 'logs'), 'auto_save_on_exit': False})


async def _act(branch, function, **arguments):
    [response] = await branch.act({'function': function, 'arguments': arguments})
    return response.output


@pytest.mark.parametrize('client_kind', ['async', 'sync'])
async def test_govern_maps_verdicts_onto_hooks(sidecar, run_id, tools, tmp_path, no_network, intent_rows,
                                              client_kind):
    calls, funcs = tools
    client = (toolgate.AsyncClient if client_kind == 'async' else toolgate.Client)(sidecar['url'], run_id=run_id)
    branch = _branch(funcs, tmp_path)
    govern(branch, client)

    # Low risk: runs, no intent.
    assert await _act(branch, 'lookup', q='weather') == 'answer to weather'
    # Denied: the function never runs; the reason is the tool's reported output.
    out = await _act(branch, 'drop_table', name='users')
    assert ('drop_table', 'users') not in calls
    assert 'toolgate: denied by policy: deny_rule' in out['error'] and 'decision ' in out['error']
    # Escalated with no waiting: denied (never "ask"), naming the approval.
    out = await _act(branch, 'publish', package='p')
    assert not any(c[0] == 'publish' for c in calls)
    assert 'needs human approval' in out['error']
    # High risk: intent begun and effect-sent by the pre-hook, completed by the post-hook.
    assert await _act(branch, 'transfer', amount=5, to='acct') == 'sent 5 to acct'
    assert intent_rows(run_id) == [('transfer', 'completed', None, 1)]
    # A raising tool closes its intent as an error.
    await _act(branch, 'transfer', amount=-1, to='acct')
    assert intent_rows(run_id)[-1] == ('transfer', 'error', 'ValueError: negative amount', 1)
    if client_kind == 'sync':
        assert client.pending_intents() == []
        client.close()
    else:
        assert await client.pending_intents() == []
        await client.aclose()
    assert calls == [('lookup', 'weather'), ('transfer', 5), ('transfer', -1)]


async def test_govern_concurrent_calls_pair_intents(sidecar, run_id, tools, tmp_path, no_network, intent_rows):
    calls, funcs = tools
    async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as client:
        branch = _branch(funcs, tmp_path)
        govern(branch, client)
        responses = await branch.act([
            {'function': 'transfer', 'arguments': {'amount': 1, 'to': 'a'}},
            {'function': 'transfer', 'arguments': {'amount': -2, 'to': 'b'}},
            {'function': 'drop_table', 'arguments': {'name': 't'}},
        ])
        assert responses[0].output == 'sent 1 to a'
        assert 'deny_rule' in responses[2].output['error']
        assert sorted(r[1] for r in intent_rows(run_id)) == ['completed', 'error']
        assert await client.pending_intents() == []
        assert not any(c[0] == 'drop_table' for c in calls)


async def test_govern_waits_for_approval(sidecar, run_id, tools, tmp_path, no_network, approve_later):
    calls, funcs = tools
    async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as client:
        first = await client.authorize('publish', {'package': 'lib'})
        approve_later(first.approval_id, delay=0.5)
        branch = _branch(funcs, tmp_path)
        govern(branch, client, approval_timeout=20)
        assert await _act(branch, 'publish', package='lib') == 'published'
        assert ('publish', 'lib') in calls


async def test_govern_fails_closed_when_sidecar_unreachable(closed_url, tools, tmp_path, no_network):
    calls, funcs = tools
    async with toolgate.AsyncClient(closed_url, timeout=2) as client:
        branch = _branch(funcs, tmp_path)
        govern(branch, client)
        out = await _act(branch, 'lookup', q='x')
        assert calls == [] and 'sidecar_unreachable' in out['error']
