"""toolgate.AsyncClient against the real sidecar: the same protocol as the
blocking client, with sync or async guarded functions."""
import asyncio

import pytest
import pytest_asyncio

import toolgate

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def aclient(sidecar, run_id):
    async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as c:
        yield c


async def test_authorize_and_guard(aclient, intent_rows):
    v = await aclient.authorize('lookup', {'q': 'x'})
    assert v.allowed and not v.intent_required

    async def effect():
        await asyncio.sleep(0)
        return 'async-result'

    assert await aclient.guard('transfer', {'amount': 3}, effect) == 'async-result'
    assert await aclient.guard('lookup', {'q': 'y'}, lambda: 'sync-result') == 'sync-result'
    assert intent_rows(aclient.run_id) == [('transfer', 'completed', None, 1)]
    assert await aclient.pending_intents() == []


async def test_guard_deny_escalate_and_error(aclient, intent_rows):
    ran = []

    async def effect():
        ran.append(1)

    with pytest.raises(toolgate.Denied) as e:
        await aclient.guard('drop_table', {'name': 'users'}, effect)
    assert e.value.reason == 'deny_rule' and e.value.decision_id
    with pytest.raises(toolgate.ApprovalRequired) as e:
        await aclient.guard('publish', {'package': 'p'}, effect)
    assert e.value.approval_id
    assert await aclient.wait_for_approval(e.value.approval_id, 0) == 'pending'
    assert (await aclient.approval(e.value.approval_id)).status == 'pending'
    assert ran == []

    async def boom():
        raise KeyError('nope')

    with pytest.raises(KeyError):
        await aclient.guard('bash', {'command': 'echo x'}, boom)
    [(tool, status, detail, _)] = intent_rows(aclient.run_id)
    assert (tool, status, detail) == ('bash', 'error', "KeyError: 'nope'")


async def test_approval_wait_then_run(aclient, approve_later):
    v = await aclient.authorize('publish', {'package': 'ok'})
    approve_later(v.approval_id, delay=0.5)
    out = await aclient.guard('publish', {'package': 'ok'}, lambda: 'published', approval_timeout=20)
    assert out == 'published'


async def test_intents_and_workspace(aclient):
    v = await aclient.authorize('transfer', {'amount': 1})
    i = await aclient.begin_intent(v, 'transfer')
    await aclient.mark_effect_sent(i.intent_id)
    [p] = await aclient.pending_intents()
    assert p.intent_id == i.intent_id and p.resume == 'uncertain'
    assert (await aclient.complete_intent(i.intent_id, 'completed')).status == 'completed'
    assert (await aclient.write('a.txt', 'hi')).bytes == 2
    assert (await aclient.read('a.txt')).content == 'hi'
    assert [e.name for e in (await aclient.list()).entries] == ['a.txt']
    assert (await aclient.stat('a.txt')).size == 2
    with pytest.raises(toolgate.WorkspaceError) as e:
        await aclient.read('/etc/passwd')
    assert e.value.code == 'workspace_invalid_path'


async def test_unreachable(closed_url):
    async with toolgate.AsyncClient(closed_url, timeout=2) as c:
        ran = []
        with pytest.raises(toolgate.SidecarUnreachable):
            await c.authorize('lookup', {})
        with pytest.raises(toolgate.SidecarUnreachable):
            await c.guard('lookup', {}, lambda: ran.append(1))
        assert ran == []
