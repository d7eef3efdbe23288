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
    if 'text/plain' in answer['content']:
        assert response.headers['content-type'].startswith('text/plain'), response.headers
        for name, header in answer.get('headers', {}).items():
            assert response.headers.get(name) == header['schema']['const'], (name, response.headers)
        return {}
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


# ---- every error a route lists, made to happen ----

BIG = b'{"pad": "' + b'x' * (300 * 1024) + b'"}'
BAD_RUN = 'Not A Run'
# Codes a route lists that this sidecar cannot be made to answer here: a
# broken or foreign-owned database, an approval left to expire, an
# upstream that is down.
STORE_FAULTS = {'store_unavailable', 'permission_denied', 'stored_data_corrupt'}
UNREACHED = {
    ('post', '/v1/authorize'): STORE_FAULTS | {'approval_expired'},
    ('post', '/v1/authorize/batch'): STORE_FAULTS | {'approval_expired'},
    ('post', '/v1/intents'): STORE_FAULTS,
    ('post', '/v1/runs/{run_id}/cancel'): STORE_FAULTS,
    ('post', '/v1/intents/{id}/effect-sent'): STORE_FAULTS,
    ('post', '/mcp/{server}'): {'mcp_upstream_unavailable'},
    ('get', '/mcp/{server}'): set(),
    ('delete', '/mcp/{server}'): set(),
}


def _send(sidecar, method, path, body=None, *, content=None, headers=None):
    headers = {'content-type': 'application/json', **(headers or {})}
    if body is not None:
        content = json.dumps(body).encode()
    return httpx.request(method.upper(), sidecar['url'] + path, content=content, headers=headers, timeout=30)


def _intent_body(sidecar, run_id, tool='transfer', **over):
    verdict = _send(sidecar, 'post', '/v1/authorize', {'tool': tool, 'arguments': {'to': 'bob'}, 'run_id': run_id}).json()
    body = {'decision_id': verdict['decision_id'], 'run_id': run_id, 'step_id': 's1', 'tool': tool,
            'args_digest': verdict['args_digest'], 'call_digest': verdict['call_digest']}
    return {**body, **over}


def _cases(sidecar, run_id):
    """(method, document path, request path, send kwargs, the code it must answer)."""
    call = {'tool': 'lookup', 'arguments': {}, 'run_id': run_id}
    batch = {'run_id': run_id, 'calls': [{'tool': 'lookup', 'arguments': {}}]}
    begun = _intent_body(sidecar, run_id)
    assert _send(sidecar, 'post', '/v1/intents', begun).status_code == 201
    closed = _send(sidecar, 'post', '/v1/intents', _intent_body(sidecar, run_id)).json()['intent_id']
    done = _send(sidecar, 'post', f"/v1/intents/{closed}/complete", {'outcome': 'completed'})
    assert done.status_code == 200, done.text
    mcp = {'jsonrpc': '2.0', 'id': 1, 'method': 'tools/list'}
    cases = [
        ('post', '/v1/authorize', '/v1/authorize', {'body': {**call, 'surprise': 1}}, 'invalid_request'),
        ('post', '/v1/authorize', '/v1/authorize', {'body': {**call, 'run_id': BAD_RUN}}, 'invalid_run_id'),
        ('post', '/v1/authorize/batch', '/v1/authorize/batch', {'body': {**batch, 'calls': []}}, 'invalid_request'),
        ('post', '/v1/authorize/batch', '/v1/authorize/batch', {'body': {**batch, 'run_id': BAD_RUN}},
         'invalid_run_id'),
        ('post', '/v1/intents', '/v1/intents', {'body': {**begun, 'surprise': 1}}, 'invalid_request'),
        ('post', '/v1/intents', '/v1/intents', {'body': {**begun, 'run_id': BAD_RUN}}, 'invalid_run_id'),
        ('post', '/v1/intents', '/v1/intents', {'body': begun}, 'intent_exists'),
        ('post', '/v1/intents', '/v1/intents', {'body': {**begun, 'decision_id': 'no-such-decision'}},
         'decision_not_allowed'),
        ('post', '/v1/intents', '/v1/intents',
         {'body': _intent_body(sidecar, run_id, args_digest='sha256:' + '0' * 64)}, 'intent_digest_mismatch'),
        ('post', '/v1/intents', '/v1/intents', {'body': _intent_body(sidecar, run_id, tool='drop_table')},
         'decision_not_allowed'),
        ('post', '/v1/runs/{run_id}/cancel', f"/v1/runs/{run_id}/cancel", {'body': {'surprise': 1}},
         'invalid_request'),
        ('post', '/v1/runs/{run_id}/cancel', '/v1/runs/Not%20A%20Run/cancel', {'body': {}}, 'invalid_run_id'),
        ('post', '/v1/intents/{id}/effect-sent', '/v1/intents/no-such-intent/effect-sent', {'body': {}},
         'not_found'),
        ('post', '/v1/intents/{id}/effect-sent', f"/v1/intents/{closed}/effect-sent", {'body': {}}, 'conflict'),
        ('post', '/v1/intents/{id}/effect-sent', '/v1/intents/x/effect-sent', {'body': {'surprise': 1}},
         'invalid_request'),
        ('post', '/v1/intents/{id}/effect-sent', '/v1/intents/x/effect-sent', {'body': {'run_id': BAD_RUN}},
         'invalid_run_id'),
        ('post', '/mcp/{server}', '/mcp/nowhere', {'body': mcp}, 'mcp_unknown_server'),
        ('post', '/mcp/{server}', '/mcp/blocked', {'body': mcp}, 'mcp_upstream_not_allowed'),
        ('post', '/mcp/{server}', '/mcp/demo', {'body': mcp, 'headers': {'x-toolgate-run-id': BAD_RUN}},
         'invalid_run_id'),
        ('get', '/mcp/{server}', '/mcp/nowhere', {}, 'mcp_unknown_server'),
        ('delete', '/mcp/{server}', '/mcp/nowhere', {}, 'mcp_unknown_server'),
    ]
    for method, doc_path in UNREACHED:
        where = {'/v1/runs/{run_id}/cancel': f"/v1/runs/{run_id}/cancel",
                 '/v1/intents/{id}/effect-sent': '/v1/intents/x/effect-sent', '/mcp/{server}': '/mcp/demo'}
        path = where.get(doc_path, doc_path)
        # The request guard's, on every route.
        cases += [
            (method, doc_path, path, {'body': {}, 'headers': {'host': 'evil.example'}}, 'host_not_allowed'),
            (method, doc_path, path, {'body': {}, 'headers': {'origin': 'http://evil.example'}},
             'origin_not_allowed'),
        ]
        if method == 'post':
            cases += [
                (method, doc_path, path, {'body': {}, 'headers': {'content-type': 'text/plain'}},
                 'unsupported_media_type'),
                (method, doc_path, path, {'content': BIG}, 'body_too_large'),
            ]
    return cases


def test_each_error_a_route_lists_is_one_it_answers(sidecar, run_id):
    """For a few routes: every code the document lists is made to happen
    (but those in UNREACHED) and is answered under its listed status, and
    the route answers no code the document does not list."""
    answered = {key: set() for key in UNREACHED}
    for method, doc_path, path, kw, code in _cases(sidecar, run_id):
        r = _send(sidecar, method, path, **kw)
        body = _check(doc_path, method, r)
        assert body.get('error', {}).get('code') == code, (method, path, code, r.status_code, r.text[:300])
        answered[(method, doc_path)].add(code)
    for (method, doc_path), codes in answered.items():
        listed = {c for answer in DOC['paths'][doc_path][method]['responses'].values()
                  for c in answer.get('x-error-codes', ())}
        assert codes | UNREACHED[(method, doc_path)] == listed, (method, doc_path, listed ^ codes)


@pytest.mark.parametrize('method', ['get', 'delete'])
def test_the_mcp_gateway_refuses_all_but_post_as_documented(sidecar, method):
    r = _send(sidecar, method, '/mcp/demo')
    assert r.status_code == 405 and r.headers['allow'] == 'POST'
    _check('/mcp/{server}', method, r)
    assert set(DOC['paths']['/mcp/{server}'][method]['responses']) == {'403', '404', '405', '421'}


def test_readiness_answers_match_the_document(sidecar):
    r = httpx.get(sidecar['ops_url'] + '/readyz', timeout=30)
    assert _check('/readyz', 'get', r)['ready'] is True
    # Not ready is the same body under 503.
    assert set(DOC['paths']['/readyz']['get']['responses']) == {'200', '403', '421', '503'}


def test_effect_sent_takes_an_empty_body_or_an_empty_object():
    body = DOC['paths']['/v1/intents/{id}/effect-sent']['post']['requestBody']
    assert body['required'] is False
    schema = _schema(body['content']['application/json']['schema'])
    jsonschema.Draft202012Validator(schema).validate({})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate({'surprise': 1})


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
