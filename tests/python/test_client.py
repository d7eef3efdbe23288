"""toolgate.Client against a real sidecar process (see conftest.py)."""
import sqlite3

import pytest

import toolgate
from toolgate.types import parse


@pytest.fixture
def client(sidecar, run_id):
    with toolgate.Client(sidecar['url'], run_id=run_id) as c:
        yield c


def test_url_and_run_id_defaults(sidecar, monkeypatch):
    monkeypatch.setenv('TOOLGATE_URL', sidecar['url'])
    with toolgate.Client() as a, toolgate.Client() as b:
        assert a.url == sidecar['url'] and a.run_id and a.run_id != b.run_id
        assert a.authorize('lookup', {'q': 'x'}).allowed
    monkeypatch.delenv('TOOLGATE_URL')
    with pytest.raises(ValueError, match='TOOLGATE_URL'):
        toolgate.Client()


def test_authorize_verdicts(client):
    low = client.authorize('lookup', {'q': 'weather'}, step_id='s1')
    assert (low.verdict, low.reason, low.risk, low.intent_required) == ('allow', 'allow_rule', 'low', False)
    assert low.decision_id and low.policy_version.startswith('python-client@')
    assert low.args_digest.startswith('sha256:') and low.call_digest.startswith('sha256:')
    assert low.matched_rule == 'allow:lookup:*' and low.approval_id is None

    # An alias resolves to its canonical tool; bash is high risk.
    high = client.authorize('Bash', {'command': 'echo hi'})
    assert high.allowed and high.risk == 'high' and high.intent_required

    deny = client.authorize('bash', {'command': 'rm -rf /'})
    assert deny.denied and deny.reason == 'deny_rule' and deny.matched_rule == 'deny:bash:rm *'

    esc = client.authorize('publish', {'package': 'x'}, action='release')
    assert esc.escalated and esc.reason == 'escalate_rule' and esc.approval_id

    unknown = client.authorize('format_disk', {})
    assert unknown.denied and unknown.reason == 'unknown_tool'


def test_verdict_parsing_keeps_extras_and_requires_fields():
    base = {'decision_id': 'd', 'verdict': 'allow', 'reason': 'allow_rule', 'policy_version': 'p@x',
            'risk': 'low', 'intent_required': False, 'args_digest': 'sha256:a', 'call_digest': 'sha256:c',
            'matched_rule': None}
    v = parse(toolgate.Verdict, {**base, 'shiny_new_field': 7})
    assert v.allowed and v.extra == {'shiny_new_field': 7}
    with pytest.raises(toolgate.ProtocolError, match='call_digest'):
        parse(toolgate.Verdict, {k: x for k, x in base.items() if k != 'call_digest'})
    with pytest.raises(AttributeError):
        v.verdict = 'deny'  # frozen


def test_guard_low_risk_allow_runs_fn_without_intent(client, intent_rows):
    assert client.guard('lookup', {'q': 'x'}, lambda: 'result') == 'result'
    assert intent_rows(client.run_id) == []


def test_guard_high_risk_records_and_completes_intent(client, intent_rows):
    seen = []

    def effect():
        # By the time the effect runs its intent is durable and effect-sent.
        seen.extend(intent_rows(client.run_id))
        return 'moved'

    assert client.guard('transfer', {'amount': 5, 'to': 'acct-1'}, effect, step_id='s1') == 'moved'
    assert seen == [('transfer', 'pending', None, 1)]
    assert intent_rows(client.run_id) == [('transfer', 'completed', None, 1)]
    assert client.pending_intents() == []


def test_guard_fn_error_closes_intent_as_error_and_reraises(client, intent_rows):
    def boom():
        raise RuntimeError('disk on fire')

    with pytest.raises(RuntimeError, match='disk on fire'):
        client.guard('bash', {'command': 'echo deploying'}, boom)
    [(tool, status, detail, sent)] = intent_rows(client.run_id)
    assert (tool, status, sent) == ('bash', 'error', 1)
    assert detail == 'RuntimeError: disk on fire'
    assert client.pending_intents() == []

    # The detail is bounded.
    def long_boom():
        raise ValueError('x' * 5000)

    with pytest.raises(ValueError):
        client.guard('transfer', {'amount': 1}, long_boom)
    assert len(intent_rows(client.run_id)[-1][2]) == 1000


def test_guard_deny_never_runs_fn(client, intent_rows):
    ran = []
    with pytest.raises(toolgate.Denied) as e:
        client.guard('bash', {'command': 'rm -rf /'}, lambda: ran.append(1))
    assert ran == []
    assert e.value.reason == 'deny_rule' and e.value.decision_id
    assert e.value.verdict.matched_rule == 'deny:bash:rm *' and e.value.code == 'policy_denied'
    assert isinstance(e.value, toolgate.ToolgateError)
    assert intent_rows(client.run_id) == []


def test_guard_escalate_raises_approval_required(client):
    ran = []
    with pytest.raises(toolgate.ApprovalRequired) as e:
        client.guard('publish', {'package': 'toolgate'}, lambda: ran.append(1))
    assert ran == [] and e.value.approval_id and e.value.code == 'approval_required'
    assert client.approval(e.value.approval_id).status == 'pending'
    assert client.wait_for_approval(e.value.approval_id, 0) == 'pending'


def test_guard_waits_for_a_human_approval_then_runs(client, approve_later, intent_rows):
    first = client.authorize('bash', {'command': 'deploy prod'}, step_id='s9')
    assert first.escalated
    approve_later(first.approval_id, delay=0.5)
    ran = []
    out = client.guard('bash', {'command': 'deploy prod'}, lambda: ran.append(1) or 'deployed', step_id='s9',
                       approval_timeout=20)
    assert out == 'deployed' and ran == [1]
    assert client.approval(first.approval_id).status == 'approved'
    # The approved call was high risk: its intent is closed.
    assert intent_rows(client.run_id) == [('bash', 'completed', None, 1)]
    # One approval, one use: the same call asks again.
    assert client.authorize('bash', {'command': 'deploy prod'}, step_id='s9').escalated


def test_guard_denied_approval_raises_denied(client, approve_later):
    first = client.authorize('publish', {'package': 'evil'})
    approve_later(first.approval_id, delay=0.3, verb='deny')
    ran = []
    with pytest.raises(toolgate.Denied) as e:
        client.guard('publish', {'package': 'evil'}, lambda: ran.append(1), approval_timeout=20)
    assert ran == [] and e.value.reason == 'approval_denied'


def test_wait_for_approval_long_polls(client, approve_later):
    v = client.authorize('publish', {'package': 'wait'})
    approve_later(v.approval_id, delay=0.5)
    assert client.wait_for_approval(v.approval_id, 20) == 'approved'
    a = client.approval(v.approval_id)
    assert a.resolved_by == 'alice' and a.tool == 'publish' and a.run_id == client.run_id


def test_intent_calls_and_resume(client, sidecar):
    v = client.authorize('transfer', {'amount': 10}, step_id='s1')
    intent = client.begin_intent(v, 'transfer', step_id='s1')
    assert intent.status == 'pending' and intent.intent_id
    [p] = client.pending_intents()
    assert (p.intent_id, p.resume, p.tool) == (intent.intent_id, 'safe_to_retry', 'transfer')
    sent = client.mark_effect_sent(intent.intent_id)
    assert sent.intent_id == intent.intent_id and sent.effect_sent_at
    [p] = client.pending_intents(run_id=client.run_id)
    assert p.resume == 'uncertain'
    done = client.complete_intent(intent.intent_id, 'not_completed', 'cancelled by user')
    assert (done.status, done.detail) == ('not_completed', 'cancelled by user')
    assert client.pending_intents() == []
    with sqlite3.connect(sidecar['db']) as db:
        assert db.execute('SELECT status FROM intents WHERE id = ?', (intent.intent_id,)).fetchone() == \
            ('not_completed',)
    # One intent per decision.
    with pytest.raises(toolgate.Conflict) as e:
        client.begin_intent(v, 'transfer', step_id='s1')
    assert e.value.code == 'intent_exists' and e.value.status == 409


def test_workspace_round_trip(client):
    w = client.write('notes/plan.md', '# plan\n')
    assert (w.path, w.bytes, w.provenance) == ('notes/plan.md', 7, 'INTERNAL_TOOL') and w.decision_id
    r = client.read('notes/plan.md')
    assert (r.content, r.provenance) == ('# plan\n', 'INTERNAL_TOOL')
    listing = client.list('')
    assert [(e.name, e.kind) for e in listing.entries] == [('notes', 'dir')]
    assert not listing.truncated
    assert [e.name for e in client.list('notes').entries] == ['plan.md']
    s = client.stat('notes/plan.md')
    assert (s.kind, s.size) == ('file', 7)


def test_sidecar_errors_are_typed(client):
    with pytest.raises(toolgate.WorkspaceError) as e:
        client.read('a//b')
    assert (e.value.code, e.value.status) == ('workspace_invalid_path', 400)
    # A path that climbs out of its root is denied by the policy itself.
    with pytest.raises(toolgate.Denied) as e:
        client.read('../../etc/passwd')
    assert (e.value.status, e.value.reason) == (403, 'path_escapes')
    with pytest.raises(toolgate.WorkspaceError) as e:
        client.stat('missing.txt')
    assert (e.value.code, e.value.status) == ('workspace_not_found', 404)
    with pytest.raises(toolgate.NotFound) as e:
        client.wait_for_approval('no-such-approval', 1)
    assert (e.value.code, e.value.status) == ('not_found', 404)
    with pytest.raises(toolgate.NotFound):
        client.complete_intent('no-such-intent', 'completed')
    with pytest.raises(toolgate.InvalidRequest) as e:
        client.authorize('lookup', {}, step_id='bad\nstep')
    assert (e.value.code, e.value.status) == ('invalid_request', 400)
    # A decision that did not allow cannot get an intent.
    deny = client.authorize('drop_table', {'name': 'users'})
    with pytest.raises(toolgate.Forbidden) as e:
        client.begin_intent(deny, 'drop_table')
    assert e.value.code == 'decision_not_allowed' and e.value.status == 403
    # The workspace API is policy-governed: a hardline path is a Denied with its verdict.
    with pytest.raises(toolgate.Denied) as e:
        client.write('.env', 'TOKEN=x')
    assert e.value.status == 403 and e.value.reason == 'hardline_path' and e.value.decision_id


def test_unreachable_sidecar_fails_closed(closed_url):
    with toolgate.Client(closed_url, timeout=2) as c:
        with pytest.raises(toolgate.SidecarUnreachable) as e:
            c.authorize('lookup', {})
        assert e.value.code == 'sidecar_unreachable' and isinstance(e.value, toolgate.ToolgateError)
        ran = []
        with pytest.raises(toolgate.SidecarUnreachable):
            c.guard('lookup', {}, lambda: ran.append(1))
        with pytest.raises(toolgate.SidecarUnreachable):
            c.guard('publish', {}, lambda: ran.append(1), approval_timeout=5)
        assert ran == []
