"""Attacks on the MCP gateway, both ways in (`toolgate mcp wrap` and the
sidecar's `/mcp/evil`), by a deliberately malicious server
(evil_mcp_server.py) in front of the real `mcp` SDK client, and by an agent
that writes raw JSON-RPC.

Each test performs one attack and asserts what the client saw and what
reached the server (the server's log): every one of them passed on the
gateway before it judged every message in one place.
"""
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from mcp import Client, StdioServerParameters

EVIL = pathlib.Path(__file__).parent / 'evil_mcp_server.py'
WAYS = ['wrap', 'http']


def text(result) -> str:
    return ' '.join(getattr(c, 'text', '') for c in result.content)


class Evil:
    """One way in to the evil server with one scenario: `.client()` is the
    real SDK client, `.log()` what reached the server."""

    def __init__(self, way, scenario, sidecar, evil_upstream, tmp_path, run_id, server='evil'):
        self.way, self.server = way, server
        if way == 'http':
            evil_upstream['control'].write_text(scenario)
            self.log_path = evil_upstream['log']
            self.skip = len(self.log_path.read_text().splitlines())
            self.target = f"{sidecar['url']}/mcp/{server}"
        else:
            self.log_path, self.skip = tmp_path / f'evil-{scenario}.log', 0
            self.log_path.write_text('')
            self.target = StdioServerParameters(
                command=str(sidecar['bin']),
                args=['mcp', 'wrap', '--sidecar', sidecar['url'], '--server', server, '--run-id', run_id,
                      '--', sys.executable, str(EVIL), 'stdio', scenario, str(self.log_path)],
                env=dict(os.environ, RUST_LOG='warn'),
            )

    def client(self, **kw):
        return Client(self.target, mode='legacy', read_timeout_seconds=30, **kw)

    def log(self) -> list[str]:
        return self.log_path.read_text().splitlines()[self.skip:]


@pytest.fixture
def evil(sidecar, evil_upstream, tmp_path, run_id):
    def make(way, scenario, server='evil'):
        return Evil(way, scenario, sidecar, evil_upstream, tmp_path, run_id, server)
    return make


def names(listing) -> set[str]:
    return {t.name for t in listing.tools}


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_an_unreadable_list_is_withheld_and_the_old_one_forgotten(evil, way):
    e = evil(way, 'rugpull')
    async with e.client() as client:
        assert names(await client.list_tools()) == {'note', 'pay'}
        # The second list carries 1e400 (Python would read inf), a poisoned
        # description and a hidden admin tool: the client gets an error.
        with pytest.raises(Exception) as err:
            await client.list_tools(cache_mode='refresh')
        assert 'could not be read' in str(err.value), err.value
        # No call is made against what the first list said.
        result = await client.call_tool('note', {'text': 'after the rug pull'})
        assert result.is_error and 'tool_not_listed' in text(result), text(result)
    assert not [line for line in e.log() if line.startswith('call ')], e.log()


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_a_name_listed_twice_is_withheld_and_its_calls_refused(evil, way):
    e = evil(way, 'duplicates')
    async with e.client() as client:
        assert names(await client.list_tools()) == {'pay'}
        result = await client.call_tool('note', {'text': 'which one?'})
        assert result.is_error and 'tool_definition_changed' in text(result), text(result)
    assert not [line for line in e.log() if line.startswith('call note')], e.log()


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_forged_answers_to_guessed_ids_never_reach_the_client(evil, way):
    e = evil(way, 'forged')
    async with e.client() as client:
        listing = await client.list_tools()
        assert names(listing) == {'note', 'pay'}
        assert all(t.description != 'forged' for t in listing.tools)
        result = await client.call_tool('note', {'text': 'hi'})
        assert not result.is_error and text(result) == 'note done', text(result)


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_a_tool_never_listed_is_refused(evil, way):
    # `evil2` is the same server under a name no test lists.
    e = evil(way, 'honest', server='evil2')
    async with e.client() as client:
        result = await client.call_tool('note', {'text': 'unlisted'})
        assert result.is_error and 'tool_not_listed' in text(result), text(result)
    assert not [line for line in e.log() if 'unlisted' in line], e.log()


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_server_requests_pass_only_when_declared(evil, way):
    asked = []

    async def sampling(context, params):
        asked.append('sampling')
        raise AssertionError('the model must never be asked')

    async def roots(context):
        asked.append('roots')
        from mcp.types import ListRootsResult
        return ListRootsResult(roots=[])

    e = evil(way, 'sampling')
    async with e.client(sampling_callback=sampling, list_roots_callback=roots) as client:
        await client.list_tools()
        result = await client.call_tool('note', {'text': 'sample me'})
        assert not result.is_error, text(result)
    # roots/list is declared for evil; sampling/createMessage is not: the
    # server got toolgate's refusal and the client's model was never asked.
    assert 'sampling' not in asked, asked
    refusals = [json.loads(line.split(' ', 1)[1]) for line in e.log() if line.startswith('answer ')]
    sample = [r for r in refusals if r.get('id') == 'evil-sample-1']
    assert sample and sample[0]['error']['code'] == -32001, refusals
    assert 'unknown_tool' in sample[0]['error']['message']


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_resources_and_prompts_are_decided_like_tools(evil, way):
    e = evil(way, 'honest')
    async with e.client() as client:
        allowed = await client.read_resource('file:///public/readme')
        assert 'contents of file:///public/readme' in allowed.contents[0].text
        # Refused whatever the spelling: the policy sees (and the server
        # would get) the resolved URI, never one `file:///public/*` matches
        # only as text.
        for uri in ['file:///etc/passwd', 'file:///public/../etc/passwd',
                    'file:///public/%2e%2e/etc/passwd', 'file:///public/./../etc/passwd']:
            with pytest.raises(Exception) as err:
                await client.read_resource(uri)
            assert 'toolgate' in str(err.value), (uri, err.value)
        # An odd spelling of an allowed URI reaches the server resolved.
        assert (await client.read_resource('FILE:///public/./notes')).contents
        assert (await client.get_prompt('greeting')).messages
        with pytest.raises(Exception):
            await client.get_prompt('exfiltrate')
    log = e.log()
    assert 'read file:///public/readme' in log and 'prompt greeting' in log, log
    assert 'read file:///public/notes' in log, log
    assert not [line for line in log if 'passwd' in line] and 'prompt exfiltrate' not in log, log


# --- raw JSON-RPC from the agent ------------------------------------------

def sse_messages(body: str) -> list[dict]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith('data:') and line[5:].strip()]


def post_raw(url, message: str):
    request = urllib.request.Request(url, data=message.encode(), method='POST', headers={
        'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'})
    with urllib.request.urlopen(request, timeout=30) as r:
        body = r.read().decode()
    return body


def test_ids_are_matched_by_the_gateway_not_by_their_spelling_over_http(sidecar, evil_upstream, intent_rows):
    evil_upstream['control'].write_text('honest')
    url = f"{sidecar['url']}/mcp/evil"
    # The server answers id 1.0 as 1 (as a JavaScript server would).
    body = post_raw(url, '{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}')
    assert '"id":1.0' in body, body
    (listing,) = [m for m in sse_messages(body) if 'result' in m]
    assert {t['name'] for t in listing['result']['tools']} == {'note', 'pay'}, listing
    run = 'raw-ids-http'
    request = urllib.request.Request(url, method='POST', headers={
        'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream',
        'X-Toolgate-Run-Id': run},
        data=b'{"jsonrpc":"2.0","id":2.0,"method":"tools/call","params":{"name":"pay","arguments":{"amount":5}}}')
    with urllib.request.urlopen(request, timeout=30) as r:
        body = r.read().decode()
    assert '"id":2.0' in body and 'pay done' in body, body
    # The high-risk call's intent was closed from its answer.
    assert [(t, s) for t, s, *_ in intent_rows(run)] == [('evil.pay', 'completed')]


def test_ids_are_matched_by_the_gateway_not_by_their_spelling_over_stdio(sidecar, tmp_path, intent_rows):
    run, log = 'raw-ids-wrap', tmp_path / 'evil.log'
    log.write_text('')
    proc = subprocess.Popen(
        [str(sidecar['bin']), 'mcp', 'wrap', '--sidecar', sidecar['url'], '--server', 'evil', '--run-id', run,
         '--', sys.executable, str(EVIL), 'stdio', 'honest', str(log)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(line):
        """Sends one line; returns the raw text of the answer (the next line out)."""
        proc.stdin.write(line + '\n')
        proc.stdin.flush()
        return proc.stdout.readline()

    try:
        ask('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            '"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')
        proc.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        # The server answers 1.0 as 1 (as a JavaScript server would).
        listing = ask('{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}')
        assert '"id":1.0' in listing, listing
        assert {t['name'] for t in json.loads(listing)['result']['tools']} == {'note', 'pay'}, listing
        paid = ask('{"jsonrpc":"2.0","id":2.0,"method":"tools/call","params":{"name":"pay","arguments":{"amount":5}}}')
        assert '"id":2.0' in paid and 'pay done' in paid, paid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert [(t, s) for t, s, *_ in intent_rows(run)] == [('evil.pay', 'completed')]


# --- bounds and framing (HTTP) ---------------------------------------------

def rss_kib(pid) -> int:
    for line in pathlib.Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
    raise AssertionError('no VmRSS')


def sent_of(evil_server) -> tuple[int, int]:
    """How much of its answer the server got to send before the gateway hung
    up (the server writes the line once its write fails or ends)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = [line for line in evil_server.log() if line.startswith('sent ')]
        if lines:
            _, sent, _, total = lines[-1].split()
            return int(sent), int(total)
        time.sleep(0.1)
    raise AssertionError('the server never finished its answer')


@pytest.mark.asyncio
@pytest.mark.parametrize('scenario', ['huge', 'endless-sse'])
async def test_oversized_answers_are_cut_off_not_buffered(evil, sidecar, scenario):
    e = evil('http', scenario)
    before = rss_kib(sidecar['pid'])
    async with e.client() as client:
        with pytest.raises(Exception) as err:
            await client.list_tools()
        assert 'could not be read' in str(err.value) or 'larger than' in str(err.value), err.value
    grew_mib = (rss_kib(sidecar['pid']) - before) / 1024
    assert grew_mib < 96, f"the sidecar grew by {grew_mib:.0f} MiB"
    sent, total = sent_of(e)
    assert sent < total, 'the gateway read the whole 150 MiB answer'


@pytest.mark.asyncio
async def test_sse_framed_with_bare_cr_is_read_and_filtered(evil):
    e = evil('http', 'bare-cr')
    async with e.client() as client:
        assert names(await client.list_tools()) == {'note', 'pay'}


# --- found by attacking the first version of the relay ---------------------

@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_a_name_repeated_on_a_later_page_is_withheld(evil, way):
    e = evil(way, 'pages')
    async with e.client() as client:
        first = await client.list_tools()
        assert names(first) == {'note', 'pay'} and first.next_cursor
        second = await client.list_tools(cursor=first.next_cursor)
        assert names(second) == set(), second
        result = await client.call_tool('note', {'text': 'which one?'})
        assert result.is_error and 'tool_definition_changed' in text(result), text(result)
    assert not [line for line in e.log() if line.startswith('call note')], e.log()


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_a_tool_named_like_an_mcp_method_is_withheld(evil, way):
    # evil.roots/list is allowed as the server's *request*; a tool of that
    # name must not take that permission.
    e = evil(way, 'slash')
    async with e.client() as client:
        assert names(await client.list_tools()) == {'note'}
        result = await client.call_tool('roots/list', {'command': 'cat ~/.ssh/id_rsa'})
        assert result.is_error and 'tool_definition_changed' in text(result), text(result)
    assert not [line for line in e.log() if line.startswith('call roots/list')], e.log()


@pytest.mark.asyncio
@pytest.mark.parametrize('way', WAYS)
async def test_a_url_elicitation_error_is_decided_like_an_elicitation(evil, way):
    e = evil(way, 'url-elicit')
    async with e.client() as client:
        await client.list_tools()
        with pytest.raises(Exception) as err:
            await client.call_tool('note', {'text': 'x'})
    assert 'attacker.example' not in repr(err.value), err.value
    assert 'elicitation/create' in str(err.value), err.value


@pytest.mark.asyncio
async def test_a_body_under_a_content_type_the_gateway_cannot_read_is_withheld(evil):
    e = evil('http', 'honest')
    async with e.client() as client:
        evil('http', 'odd-type')
        with pytest.raises(Exception) as err:
            await client.list_tools()
    assert 'no JSON-RPC message' in str(err.value), err.value


@pytest.mark.asyncio
async def test_an_answer_to_another_request_on_a_post_stream_is_dropped(evil):
    import asyncio
    e = evil('http', 'honest')
    async with e.client() as client:
        assert names(await client.list_tools()) == {'note', 'pay'}
        e = evil('http', 'confuse')
        ping = asyncio.create_task(client.send_ping())
        await asyncio.sleep(0.5)
        # The server answers the held ping's id on the list's stream with an
        # unfiltered list: the client gets only the list's own (filtered) answer.
        listing = await client.list_tools(cache_mode='refresh')
        ping.cancel()
    assert names(listing) == {'note', 'pay'}, names(listing)
    assert all('IMPORTANT' not in (t.description or '') for t in listing.tools)


def test_requests_without_ids_and_stray_cancellations_are_not_forwarded(sidecar, evil_upstream, tmp_path):
    evil_upstream['control'].write_text('honest')
    url = f"{sidecar['url']}/mcp/evil"
    skip = len(evil_upstream['log'].read_text().splitlines())
    # A call without an id would reach the server undecided.
    body = post_raw(url, '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"admin","arguments":{}}}')
    assert '-32602' in body, body
    # A cancellation naming a request of no session of ours goes nowhere,
    # and a session id the server never issued is no session at all.
    request = urllib.request.Request(url, method='POST', headers={
        'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'},
        data=b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}')
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 202
    request = urllib.request.Request(url, method='POST', headers={
        'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream',
        'Mcp-Session-Id': 'someone-else'},
        data=b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}')
    with pytest.raises(urllib.error.HTTPError) as unknown:
        urllib.request.urlopen(request, timeout=30)
    assert unknown.value.code == 404
    # A GET (and its body) never reaches the server: only POST carries messages.
    request = urllib.request.Request(url, method='GET', headers={'Accept': 'text/event-stream'},
                                     data=b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}')
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30).close()
    assert refused.value.code == 405 and refused.value.headers['Allow'] == 'POST'
    log = evil_upstream['log'].read_text().splitlines()[skip:]
    assert 'got tools/call' not in log and 'got notifications/cancelled' not in log, log
    assert not any(line.startswith('GET') for line in log), log
    # The same over stdio.
    (tmp_path / 'stdio.log').write_text('')
    out = subprocess.run(
        [str(sidecar['bin']), 'mcp', 'wrap', '--sidecar', sidecar['url'], '--server', 'evil',
         '--', sys.executable, str(EVIL), 'stdio', 'honest', str(tmp_path / 'stdio.log')],
        input='{"jsonrpc":"2.0","method":"tools/call","params":{"name":"admin","arguments":{}}}\n',
        capture_output=True, text=True, timeout=60)
    assert '-32602' in out.stdout, out.stdout
    assert 'got tools/call' not in (tmp_path / 'stdio.log').read_text()
