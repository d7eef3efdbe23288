"""Issue #31, item 8, through the sidecar's HTTP MCP gateway: after a run is
cancelled, an `X-Toolgate-Run-Id` that only looks like it (another case, a
trailing space, dot or slash, an NBSP, a zero-width space) is refused as a
run id or is the cancelled run itself; the call never reaches the server."""
import asyncio
import json

import toolgate
from mcp import Client

from .test_mcp_http import post, reached


def test_look_alike_run_headers_are_refused_or_the_cancelled_run(sidecar, mcp_upstream, run_id):
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        assert client.cancel_run('stop').newly_cancelled
    # A tool is called as it was listed: list the server's tools first (the
    # SDK server answers only inside an initialized session).
    async def listed():
        async with Client(f"{sidecar['url']}/mcp/demo", mode='legacy') as mcp_client:
            return {t.name for t in (await mcp_client.list_tools()).tools}
    assert 'echo' in asyncio.run(listed())
    for i, alike in enumerate((run_id.upper(), run_id + ' ', run_id + '.', run_id + '/',
                               run_id + '\u00a0', run_id + '\u200b')):
        call = json.dumps({'jsonrpc': '2.0', 'id': i, 'method': 'tools/call',
                           'params': {'name': 'echo', 'arguments': {'text': f'alike-{i}'}}})
        status, body = post(f"{sidecar['url']}/mcp/demo", call,
                            {'X-Toolgate-Run-Id': alike.encode('utf-8')})
        assert (status == 400 and 'invalid_run_id' in body) or 'run_cancelled' in body, (alike, status, body)
        assert f'echo alike-{i}' not in reached(mcp_upstream)
