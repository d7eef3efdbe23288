"""docs/agent-api.openapi.json is a valid OpenAPI 3.1 document, and what a
real sidecar answers matches it: each body validates against the schema the
document gives its route and status, an error's code is one the document
lists for that status, and an authorize answer has no member the schema
lacks. (A Rust test keeps the file equal to the types it is generated
from; this one holds the running sidecar to the file.)"""
import json

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate as validate_spec

from .conftest import ROOT

DOC = json.loads((ROOT / 'docs' / 'agent-api.openapi.json').read_text())


def test_the_document_is_valid_openapi_3_1():
    assert DOC['openapi'].startswith('3.1.')
    validate_spec(DOC)  # raises on any violation of the 3.1 schema
    assert DOC['components']['schemas']['ErrorDetail']['properties']['code']['$ref'] \
        == '#/components/schemas/ErrorCode'


def _schema(ref_or_schema: dict) -> dict:
    """A standalone JSON Schema: the route's schema, the components beside it."""
    return {**ref_or_schema, 'components': DOC['components']}


def _check(path: str, method: str, response: httpx.Response) -> dict:
    """Validates `response` against the document; returns its JSON body."""
    answers = DOC['paths'][path][method]['responses']
    status = str(response.status_code)
    assert status in answers, f"{method} {path} answered {status}, which the document does not list"
    answer = answers[status]
    body = response.json()
    schema = answer['content']['application/json']['schema']
    jsonschema.Draft202012Validator(_schema(schema)).validate(body)
    if 'error' in body:
        assert body['error']['code'] in answer['x-error-codes'], (status, body)
    return body


def _post(sidecar, path, body):
    return httpx.post(sidecar['url'] + path, json=body, timeout=30)


def _members(name: str) -> set[str]:
    return set(DOC['components']['schemas'][name]['properties'])


@pytest.mark.parametrize('tool,args,verdict,reason', [
    ('lookup', {'q': 'x'}, 'allow', 'allow_rule'),
    ('drop_table', {'t': 'users'}, 'deny', 'deny_rule'),
    ('publish', {'channel': 'news'}, 'escalate', 'escalate_rule'),
    ('no_such_tool', {}, 'deny', 'unknown_tool'),
])
def test_authorize_answers_match_the_document(sidecar, run_id, tool, args, verdict, reason):
    r = _post(sidecar, '/v1/authorize', {'tool': tool, 'arguments': args, 'run_id': run_id})
    body = _check('/v1/authorize', 'post', r)
    assert (r.status_code, body['verdict'], body['reason']) == (200, verdict, reason)
    assert set(body) <= _members('AuthorizeResponse'), set(body) - _members('AuthorizeResponse')
    assert (body.get('approval_id') is not None) == (verdict == 'escalate')


def test_a_batch_answer_matches_the_document(sidecar, run_id):
    calls = [{'tool': 'lookup', 'arguments': {'q': str(i)}} for i in range(2)]
    r = _post(sidecar, '/v1/authorize/batch', {'run_id': run_id, 'calls': calls})
    body = _check('/v1/authorize/batch', 'post', r)
    assert body['parallel'] is True and [v['verdict'] for v in body['verdicts']] == ['allow', 'allow']


def test_refusals_match_the_document(sidecar, run_id):
    # A member the endpoint does not take.
    r = _post(sidecar, '/v1/authorize', {'tool': 'lookup', 'arguments': {}, 'run_id': run_id, 'surprise': 1})
    body = _check('/v1/authorize', 'post', r)
    assert (r.status_code, body['error']['code']) == (400, 'invalid_request')
    assert set(body) <= _members('ErrorBody')
    r = httpx.get(sidecar['url'] + '/v1/approvals/no-such-approval', timeout=30)
    assert _check('/v1/approvals/{id}', 'get', r)['error']['code'] == 'not_found'
    r = httpx.get(sidecar['url'] + '/v1/runs/Not%20A%20Run', timeout=30)
    assert _check('/v1/runs/{run_id}', 'get', r)['error']['code'] == 'invalid_run_id'
    r = httpx.post(sidecar['url'] + '/v1/authorize', content=b'{}', timeout=30,
                   headers={'content-type': 'text/plain'})
    assert _check('/v1/authorize', 'post', r)['error']['code'] == 'unsupported_media_type'


def test_an_approval_and_a_run_status_match_the_document(sidecar, run_id):
    r = _post(sidecar, '/v1/authorize', {'tool': 'publish', 'arguments': {'x': 1}, 'run_id': run_id})
    approval_id = _check('/v1/authorize', 'post', r)['approval_id']
    r = httpx.get(f"{sidecar['url']}/v1/approvals/{approval_id}", timeout=30)
    approval = _check('/v1/approvals/{id}', 'get', r)
    assert approval['status'] == 'pending' and approval['approval_id'] == approval_id
    assert set(approval) == _members('ApprovalView'), set(approval) ^ _members('ApprovalView')
    r = httpx.get(f"{sidecar['url']}/v1/runs/{run_id}", timeout=30)
    status = _check('/v1/runs/{run_id}', 'get', r)
    assert status['run_id'] == run_id and status['cancel_requested'] is False
    assert set(status) <= _members('RunStatus')


def test_an_intent_s_life_and_a_cancellation_match_the_document(sidecar, run_id):
    r = _post(sidecar, '/v1/authorize', {'tool': 'transfer', 'arguments': {'to': 'bob'}, 'run_id': run_id})
    verdict = _check('/v1/authorize', 'post', r)
    assert verdict['intent_required'] is True
    begun = _check('/v1/intents', 'post', _post(sidecar, '/v1/intents', {
        'decision_id': verdict['decision_id'], 'run_id': run_id, 'step_id': 's1', 'tool': 'transfer',
        'args_digest': verdict['args_digest'], 'call_digest': verdict['call_digest']}))
    intent_id = begun['intent_id']
    r = httpx.get(sidecar['url'] + '/v1/intents', params={'run_id': run_id, 'status': 'pending'}, timeout=30)
    listed = _check('/v1/intents', 'get', r)['intents']
    assert [i['intent_id'] for i in listed] == [intent_id]
    assert set(listed[0]) == _members('OpenIntent'), set(listed[0]) ^ _members('OpenIntent')
    sent = _check('/v1/intents/{id}/effect-sent', 'post',
                  _post(sidecar, f"/v1/intents/{intent_id}/effect-sent", {}))
    assert sent['effect_sent_at'] is not None
    done = _check('/v1/intents/{id}/complete', 'post',
                  _post(sidecar, f"/v1/intents/{intent_id}/complete", {'outcome': 'completed'}))
    assert done['status'] == 'completed' and set(done) == _members('IntentView')
    unknown = _post(sidecar, "/v1/intents/no-such-intent/complete", {'outcome': 'completed'})
    assert _check('/v1/intents/{id}/complete', 'post', unknown)['error']['code'] == 'not_found'
    r = _post(sidecar, f"/v1/runs/{run_id}/cancel", {'reason': 'openapi test'})
    cancelled = _check('/v1/runs/{run_id}/cancel', 'post', r)
    assert cancelled['newly_cancelled'] is True and set(cancelled) == _members('CancelResponse')
    status = _check('/v1/runs/{run_id}', 'get', httpx.get(f"{sidecar['url']}/v1/runs/{run_id}", timeout=30))
    assert status['cancel_requested'] is True and status['cancel_reason'] == 'openapi test'


def test_workspace_answers_match_the_document(sidecar, run_id):
    def call(op, **body):
        path = f"/v1/workspace/{op}"
        answer = _check(path, 'post', _post(sidecar, path, {'run_id': run_id, **body}))
        if 'error' not in answer:
            schema = DOC['paths'][path]['post']['responses']['200']['content']['application/json']['schema']
            name = schema['$ref'].rsplit('/', 1)[1]
            assert set(answer) == _members(name), set(answer) ^ _members(name)
        return answer

    assert call('write', path='notes/a.txt', content='hello')['bytes'] == 5
    assert call('read', path='notes/a.txt')['content'] == 'hello'
    assert [e['name'] for e in call('list', path='notes')['entries']] == ['a.txt']
    assert call('stat', path='notes/a.txt')['kind'] == 'file'
    assert call('read', path='notes/missing.txt')['error']['code'] == 'workspace_not_found'
    # The policy refuses a climbing path: the refusal carries its verdict.
    refused = call('read', path='../escape')
    assert refused['error']['code'] == 'policy_denied', refused
    assert refused['verdict']['verdict'] == 'deny' and set(refused['verdict']) <= _members('AuthorizeResponse')


# ---- the Python client against the document (no sidecar needed) ----

# Answered before `error_class` is consulted: the verdict in the body
# becomes Denied / ApprovalRequired (see toolgate._ops).
_VERDICT_CODES = {'policy_denied', 'approval_required'}
# Deny reasons the client maps as it maps codes (a verdict's reason, not an
# error code; the document's Reason enum lists them).
_REASONS = {'no_bundle', 'bundle_expired', 'audit_unavailable'}


def test_the_python_client_knows_every_error_code_of_the_document():
    from toolgate import errors
    codes = DOC['components']['schemas']['ErrorCode']['enum']
    assert len(codes) > 30 and 'body_too_large' in codes
    unknown = [c for c in codes if c not in _VERDICT_CODES and errors.error_class(c) is errors.ToolgateError]
    assert not unknown, f"codes the client maps to nothing specific: {unknown}"
    reasons = {r['const'] for r in DOC['components']['schemas']['Reason']['oneOf']}
    assert _REASONS <= reasons
    stale = set(errors._BY_CODE) - set(codes) - _REASONS
    assert not stale, f"codes the client knows that the sidecar does not send: {stale}"


def _required(name: str) -> set[str]:
    return set(DOC['components']['schemas'][name].get('required', ()))


@pytest.mark.parametrize('client_type,schema', [
    ('Verdict', 'AuthorizeResponse'),
    ('Batch', 'BatchResponse'),
    ('Cancellation', 'CancelResponse'),
    ('PodCancellation', 'PodCancelResponse'),
    ('RunStatus', 'RunStatus'),
    ('FlowLabel', 'FlowLabel'),
    ('FileContent', 'FileRead'),
    ('Written', 'FileWritten'),
    ('Listing', 'Listing'),
    ('Entry', 'Entry'),
    ('FileStat', 'Stat'),
])
def test_the_python_client_reads_every_member_of_an_answer(client_type, schema):
    """The client's answer type has a field for every member the document
    gives the answer and none it lacks; a field it requires is one the
    sidecar always writes."""
    import dataclasses

    from toolgate import types
    fields = {f.name: f for f in dataclasses.fields(getattr(types, client_type)) if f.name != 'extra'}
    assert set(fields) == _members(schema), (
        f"missing in the client: {_members(schema) - set(fields)}, "
        f"not in the document: {set(fields) - _members(schema)}")
    must = {n for n, f in fields.items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert must <= _required(schema), must - _required(schema)


@pytest.mark.parametrize('client_type,schema', [('Intent', 'OpenIntent'), ('Approval', 'ApprovalView')])
def test_the_python_client_reads_only_members_of_a_row(client_type, schema):
    """Rows are read in part, but never a member the sidecar does not write."""
    import dataclasses

    from toolgate import types
    fields = {f.name for f in dataclasses.fields(getattr(types, client_type))} - {'extra'}
    assert fields <= _members(schema), fields - _members(schema)
