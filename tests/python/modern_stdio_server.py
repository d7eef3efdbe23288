"""A stdio MCP server of protocol 2026-07-28, scripted line by line (the
Python SDK has no tasks support to test with): it answers
`server/discover`, lists one tool `deploy`, and runs every `tools/call` it
gets by appending a line to the log file given as its argument, so a test
counts what really ran. It declares no tasks support of its own, and
records the `_meta` of each call it receives.
"""
import json
import sys

log = open(sys.argv[1], 'a', buffering=1)
COMPLETE = {'resultType': 'complete'}

for line in sys.stdin:
    message = json.loads(line)
    method, params = message.get('method'), message.get('params') or {}
    if 'id' not in message or method is None:
        continue
    if method == 'server/discover':
        result = {**COMPLETE, 'supportedVersions': ['2026-07-28'], 'capabilities': {'tools': {}},
                  'serverInfo': {'name': 'modern-stdio', 'version': '1'}}
    elif method == 'tools/list':
        result = {**COMPLETE, 'ttlMs': 0, 'cacheScope': 'private', 'tools': [{
            'name': 'deploy', 'inputSchema': {'type': 'object', 'properties': {'service': {'type': 'string'}}}}]}
    elif method == 'tools/call':
        service = params.get('arguments', {}).get('service')
        log.write(json.dumps({'service': service, 'meta': params.get('_meta', {})}) + '\n')
        result = {**COMPLETE, 'content': [{'type': 'text', 'text': f'deployed {service}'}]}
    else:
        print(json.dumps({'jsonrpc': '2.0', 'id': message['id'],
                          'error': {'code': -32601, 'message': f'no {method}'}}), flush=True)
        continue
    print(json.dumps({'jsonrpc': '2.0', 'id': message['id'], 'result': result}), flush=True)
