"""The sidecar's streamable-HTTP MCP gateway (`/mcp/demo`) in front of a real
MCP server (tests/python/mcp_http_server.py, the `mcp` SDK's MCPServer),
driven by the real `mcp` SDK client in both protocol modes.

The upstream logs every call that reaches it, so each test can see that a
refused call never got there.
"""
import sqlite3
import urllib.error
import urllib.request

import pytest
from mcp import Client


def text(result) -> str:
    return ' '.join(getattr(c, 'text', '') for c in result.content)


def reached(upstream) -> list[str]:
    return upstream['log'].read_text().splitlines()


@pytest.mark.asyncio
@pytest.mark.parametrize('mode', ['legacy', 'auto'])
async def test_the_http_gateway_filters_decides_and_records(sidecar, mcp_upstream, mode):
    async with Client(f"{sidecar['url']}/mcp/demo", mode=mode) as client:
        listed = sorted(t.name for t in (await client.list_tools()).tools)
        # secret_admin is not in the profile: never offered.
        assert listed == ['echo', 'pay', 'wipe'], listed

        result = await client.call_tool('echo', {'text': f'hello-{mode}'})
        assert not result.is_error, text(result)
        assert f'echo hello-{mode}' in reached(mcp_upstream)

        # High risk: the intent is committed before the upstream runs it and
        # completed from its answer.
        result = await client.call_tool('pay', {'amount': 7, 'to': f'bob-{mode}'})
        assert not result.is_error and 'paid 7' in text(result), text(result)
        assert f'pay 7 bob-{mode}' in reached(mcp_upstream)
        with sqlite3.connect(sidecar['db']) as db:
            rows = db.execute("SELECT status FROM intents WHERE tool = 'demo.pay'").fetchall()
        assert ('completed',) in rows, rows

        # An argument-level deny rule: refused here, never reaches the server.
        result = await client.call_tool('wipe', {'target': f'prod-db-{mode}'})
        assert result.is_error and 'deny_rule' in text(result), text(result)
        assert result.meta['toolgate.dev/verdict']['reason'] == 'deny_rule'
        assert f'wipe prod-db-{mode}' not in reached(mcp_upstream)

        # Arguments that do not fit the announced schema never get there.
        result = await client.call_tool('pay', {'amount': 'lots', 'to': 'eve'})
        assert result.is_error and 'invalid_arguments' in text(result), text(result)
        assert 'pay lots eve' not in reached(mcp_upstream)

        # A tool outside the profile, called anyway.
        with pytest.raises(Exception) as err:
            await client.call_tool('secret_admin', {'command': 'rm -rf /'})
        assert '-32602' in repr(err.value) or 'Unknown tool' in str(err.value)
        assert not [line for line in reached(mcp_upstream) if line.startswith('secret_admin')]

    # The forwarding latency of the calls that went through is measured.
    with urllib.request.urlopen(sidecar['ops_url'] + '/metrics', timeout=5) as r:
        metrics = r.read().decode()
    count = [line for line in metrics.splitlines()
             if line.startswith('toolgate_mcp_forward_duration_seconds_count{server="demo"}')]
    assert count and float(count[0].split()[-1]) >= 3, count
    assert 'toolgate_mcp_upstream_errors_total{server="blocked"} 0' in metrics


def post(url, body, headers=None):
    request = urllib.request.Request(url, data=body.encode(), method='POST', headers={
        'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream', **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_upstreams_outside_the_egress_rules_and_unknown_servers_are_refused(sidecar):
    ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    status, body = post(f"{sidecar['url']}/mcp/blocked", ping)
    assert status == 403 and 'mcp_upstream_not_allowed' in body and 'hardline_cidr' in body, body
    status, body = post(f"{sidecar['url']}/mcp/nope", ping)
    assert status == 404 and 'mcp_unknown_server' in body, body


def test_headers_that_contradict_the_body_are_refused(sidecar, mcp_upstream):
    call = '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"wipe","arguments":{"target":"x"}}}'
    # The transport answers a header that contradicts the body with HTTP 400.
    status, body = post(f"{sidecar['url']}/mcp/demo", call, {'Mcp-Method': 'tools/list'})
    assert status == 400 and '-32020' in body, body
    status, body = post(f"{sidecar['url']}/mcp/demo", call,
                        {'Mcp-Method': 'tools/call', 'Mcp-Name': 'echo'})
    assert status == 400 and '-32020' in body, body
    assert 'wipe x' not in reached(mcp_upstream)
