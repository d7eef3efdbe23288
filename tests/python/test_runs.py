"""Run governance through the Python client against the real sidecar:
warn-mode warnings, batches, the run heartbeat and cancellation."""
import asyncio
import warnings

import pytest

import toolgate


def test_warn_mode_allows_and_warns(sidecar, run_id):
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        with pytest.warns(toolgate.PolicyWarning, match=r"would deny \(no_matching_rule\)"):
            v = client.authorize('shout', {'text': 'rm everything'})
        assert v.allowed and v.reason == 'not_enforced' and v.enforced is False
        assert (v.would_verdict, v.would_reason) == ('deny', 'no_matching_rule')
        # What the rules allow anyway passes without a warning.
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            quiet = client.authorize('shout', {'text': 'hello world'})
        assert quiet.would_reason == 'allow_rule' and quiet.warning is None
        # guard() runs the call under warn, and still warns.
        with pytest.warns(toolgate.PolicyWarning):
            assert client.guard('shout', {'text': 'boo'}, lambda: 'ran') == 'ran'


def test_batches_are_parallel_only_when_all_read_only(sidecar, run_id):
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        reads = client.authorize_batch([
            {'tool': 'lookup', 'arguments': {'q': 'a'}},
            {'tool': 'lookup', 'arguments': {'q': 'b'}},
        ])
        assert reads.parallel and reads.reason == 'batch_parallel'
        assert [v.verdict for v in reads.verdicts] == ['allow', 'allow']
        mixed = client.authorize_batch([
            {'tool': 'lookup', 'arguments': {'q': 'a'}},
            {'tool': 'transfer', 'arguments': {'amount': 5}},
        ])
        assert (mixed.parallel, mixed.reason, mixed.call_index) == (False, 'batch_not_read_only', 1)
        assert mixed.verdicts[1].intent_required
        with pytest.raises(toolgate.InvalidRequest):
            client.authorize_batch([])


def test_a_cancelled_run_stops(sidecar, run_id, intent_rows):
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        assert client.guard('lookup', {'q': 'x'}, lambda: 1) == 1
        status = client.run_status()
        assert status.cancel_requested is False and status.open_intents == ()
        done = client.cancel_run('user pressed stop')
        assert done.newly_cancelled and done.run_id == run_id
        ran = []
        with pytest.raises(toolgate.RunCancelled) as err:
            client.guard('lookup', {'q': 'y'}, lambda: ran.append(1))
        assert ran == [] and err.value.reason == 'run_cancelled'
        assert isinstance(err.value, toolgate.Denied)
        status = client.run_status()
        assert status.cancel_requested and status.cancel_reason == 'user pressed stop'
        assert not client.cancel_run().newly_cancelled
    # Another run of the same client settings is unaffected.
    with toolgate.Client(sidecar['url'], run_id=run_id + '-other') as other:
        assert other.authorize('lookup', {'q': 'z'}).allowed


def test_a_run_has_one_spelling(sidecar, run_id):
    # Letters are case-folded: the upper-case id is the same run.
    with toolgate.Client(sidecar['url'], run_id=run_id.upper()) as loud:
        done = loud.cancel_run('stop')
        assert done.run_id == run_id.lower()
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        v = client.authorize('lookup', {'q': 'x'})
        assert (v.verdict, v.reason) == ('deny', 'run_cancelled')
    # Look-alikes are refused, never another run.
    for alike in (run_id + ' ', run_id + '.', run_id + '/', run_id + '\u200b', run_id + '\u00a0'):
        with toolgate.Client(sidecar['url'], run_id=alike) as other:
            with pytest.raises(toolgate.InvalidRequest) as err:
                other.authorize('lookup', {'q': 'x'})
            assert err.value.code == 'invalid_run_id' and err.value.status == 400
            with pytest.raises(toolgate.InvalidRequest):
                other.run_status()


def test_async_client_reads_the_heartbeat(sidecar, run_id):
    async def main():
        async with toolgate.AsyncClient(sidecar['url'], run_id=run_id) as client:
            await client.authorize('lookup', {'q': 'a'})
            status = await client.run_status()
            assert status.run_id == run_id and not status.cancel_requested
            assert set(status.budgets) == {'calls', 'high_risk_calls', 'run_seconds', 'pod_calls',
                                           'pod_high_risk_calls'}
            await client.cancel_run('done')
            v = await client.authorize('lookup', {'q': 'b'})
            assert (v.verdict, v.reason) == ('deny', 'run_cancelled')
    asyncio.run(main())


def test_a_pod_stop_holds_every_run_id(own_sidecar, run_id):
    """Issue #31: after its run is cancelled an agent can start another run
    id; stopping its pod refuses every run id, through the Python client."""
    url = own_sidecar['url']
    with toolgate.Client(url, run_id=run_id) as client:
        assert client.cancel_run('stop').newly_cancelled
    with toolgate.Client(url, run_id=run_id + '-2') as client:
        assert client.authorize('lookup', {'q': 'a'}).verdict == 'allow'
        stopped = client.cancel_pod('agent gone wrong')
        assert (stopped.scope, stopped.newly_cancelled) == ('pod pytest-agent', True)
        assert not client.cancel_pod().newly_cancelled
    for fresh in ('other-run', run_id + '-3'):
        with toolgate.Client(url, run_id=fresh) as client:
            v = client.authorize('lookup', {'q': 'b'})
            assert (v.verdict, v.reason) == ('deny', 'run_cancelled'), v
            status = client.run_status()
            assert status.cancel_requested and status.cancelled_scope == 'pod pytest-agent', status
            assert status.cancel_reason == 'agent gone wrong'
