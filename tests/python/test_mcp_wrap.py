"""`toolgate mcp wrap` in front of the real `@modelcontextprotocol/server-filesystem`
(npm, run by node over stdio), driven by the real `mcp` Python SDK client.

The wrapper is the only thing between the client and the server: the tools
list is filtered by the profile (conftest: `fs.*` tools), every tools/call is
decided by the real sidecar first, refused calls never reach the server (the
file system shows it), and a high-risk call's intent row is completed.
"""
import os
import pathlib
import sqlite3

import pytest
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.asyncio

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_JS = pathlib.Path(os.environ.get(
    'TOOLGATE_MCP_FS_SERVER',
    ROOT / 'tests' / 'mcp' / 'node_modules' / '@modelcontextprotocol' / 'server-filesystem' / 'dist' / 'index.js'))


@pytest.fixture(scope='module')
def server_js():
    if not SERVER_JS.exists():
        pytest.fail(f"{SERVER_JS} not found: run `npm install --prefix tests/mcp` (.ci/run does)")
    return SERVER_JS


def wrapped(sidecar, server_js, root, run_id, *extra):
    return StdioServerParameters(
        command=str(sidecar['bin']),
        args=['mcp', 'wrap', '--sidecar', sidecar['url'], '--server', 'fs', '--run-id', run_id, *extra,
              '--', 'node', str(server_js), str(root)],
        env=dict(os.environ, RUST_LOG='warn'),
    )


def text(result) -> str:
    return ' '.join(getattr(c, 'text', '') for c in result.content)


def intents(sidecar, run_id):
    with sqlite3.connect(sidecar['db']) as db:
        return db.execute('SELECT tool, status FROM intents WHERE run_id = ? ORDER BY created_at',
                          (run_id,)).fetchall()


def decisions(sidecar, run_id):
    with sqlite3.connect(sidecar['db']) as db:
        return db.execute('SELECT tool, verdict, reason FROM decisions WHERE run_id = ? ORDER BY seq',
                          (run_id,)).fetchall()


@pytest.mark.parametrize('mode', ['legacy', 'auto'])
async def test_the_gateway_filters_decides_and_records(sidecar, server_js, tmp_path, run_id, mode):
    root = tmp_path / 'root'
    root.mkdir()
    (root / 'notes.txt').write_text('hello from the workspace')
    run = f"{run_id}-{mode}"
    async with Client(wrapped(sidecar, server_js, root, run), mode=mode) as client:
        listed = sorted(t.name for t in (await client.list_tools()).tools)
        # Declared and permissible only: create_directory is deny-only,
        # list_directory's definition is not the pinned one, the server's
        # other tools are not in the profile at all.
        assert listed == ['move_file', 'read_text_file', 'write_file'], listed

        # Allowed, low risk: reaches the server.
        result = await client.call_tool('read_text_file', {'path': str(root / 'notes.txt')})
        assert not result.is_error, text(result)
        assert 'hello from the workspace' in text(result)

        # Allowed, high risk: the intent is recorded, then completed.
        result = await client.call_tool('write_file', {'path': str(root / 'out.txt'), 'content': 'written'})
        assert not result.is_error, text(result)
        assert (root / 'out.txt').read_text() == 'written'
        assert ('fs.write_file', 'completed') in intents(sidecar, run)

        # Hardline path: refused by toolgate, the server never writes it.
        result = await client.call_tool('write_file', {'path': str(root / '.env'), 'content': 'SECRET=1'})
        assert result.is_error
        assert 'hardline_path' in text(result)
        assert result.meta['toolgate.dev/verdict']['reason'] == 'hardline_path'
        assert not (root / '.env').exists()

        # Deny-only tool, called anyway: refused, the directory never appears.
        result = await client.call_tool('create_directory', {'path': str(root / 'made')})
        assert result.is_error and 'deny_rule' in text(result)
        assert not (root / 'made').exists()

        # A changed definition is refused even when called directly.
        result = await client.call_tool('list_directory', {'path': str(root)})
        assert result.is_error and 'tool_definition_changed' in text(result), text(result)

        # Arguments that do not fit the announced inputSchema never reach
        # the policy or the server.
        result = await client.call_tool('write_file', {'path': str(root / 'half.txt')})
        assert result.is_error and 'invalid_arguments' in text(result), text(result)
        assert not (root / 'half.txt').exists()

        # A tool the profile does not declare: JSON-RPC -32602.
        with pytest.raises(Exception) as err:
            await client.call_tool('directory_tree', {'path': str(root)})
        assert '-32602' in repr(err.value) or 'Unknown tool' in str(err.value)

    verdicts = [(tool, verdict) for tool, verdict, _ in decisions(sidecar, run)]
    assert ('fs.read_text_file', 'allow') in verdicts
    assert ('fs.write_file', 'deny') in verdicts and ('fs.create_directory', 'deny') in verdicts
    assert ('fs.list_directory', 'deny', 'tool_definition_changed') in decisions(sidecar, run)
    # The gateway's own refusal (arguments that do not fit) is in the log too,
    # reported by `mcp wrap` to the sidecar before the client was answered.
    assert ('fs.write_file', 'deny', 'invalid_arguments') in decisions(sidecar, run)
    # Every gateway decision records the definition the server announced.
    with sqlite3.connect(sidecar['db']) as db:
        digests = db.execute("SELECT DISTINCT definition_digest FROM decisions WHERE run_id = ? "
                             "AND tool = 'fs.read_text_file'", (run,)).fetchall()
    assert len(digests) == 1 and digests[0][0].startswith('sha256:'), digests


async def test_escalation_waits_for_a_human_then_passes_once(sidecar, server_js, tmp_path, run_id):
    root = tmp_path / 'root'
    root.mkdir()
    (root / 'a.txt').write_text('a')
    async with Client(wrapped(sidecar, server_js, root, run_id), mode='legacy') as client:
        await client.list_tools()  # a tool is called as it was listed
        move = {'source': str(root / 'a.txt'), 'destination': str(root / 'b.txt')}
        result = await client.call_tool('move_file', move)
        assert result.is_error and 'approval_required' in text(result), text(result)
        assert (root / 'a.txt').exists() and not (root / 'b.txt').exists()
        approval = result.meta['toolgate.dev/verdict']['approval_id']
        out = __import__('subprocess').run(
            [str(sidecar['bin']), 'approvals', 'approve', approval, '--database', sidecar['database'],
             '--by', 'alice', '--tenant', 'pytest'], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        # The same call, retried, passes once: the file moves.
        result = await client.call_tool('move_file', move)
        assert not result.is_error, text(result)
        assert (root / 'b.txt').exists() and not (root / 'a.txt').exists()
        assert ('fs.move_file', 'completed') in intents(sidecar, run_id)


async def test_an_unreachable_sidecar_refuses_every_call(sidecar, server_js, tmp_path, run_id):
    from .conftest import free_port
    root = tmp_path / 'root'
    root.mkdir()
    params = wrapped(sidecar, server_js, root, run_id)
    dead = f"http://127.0.0.1:{free_port()}"
    params.args[params.args.index(sidecar['url'])] = dead
    async with Client(params, mode='legacy') as client:
        # Nothing can be listed without asking the sidecar ...
        assert (await client.list_tools()).tools == []
        # ... and nothing is forwarded.
        result = await client.call_tool('write_file', {'path': str(root / 'x.txt'), 'content': 'x'})
        assert result.is_error and 'sidecar_unreachable' in text(result), text(result)
        assert not (root / 'x.txt').exists()
