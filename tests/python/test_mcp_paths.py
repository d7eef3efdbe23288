"""Issue #31, item 7, end to end: through `toolgate mcp wrap` around the real
`@modelcontextprotocol/server-filesystem`, no spelling of a hardlined path
(conftest: `**/.env`) reaches the server: not `…/.env/`, not `…/sub/.env/.`."""
import pytest
from mcp import Client

from .test_mcp_wrap import decisions, server_js, text, wrapped  # noqa: F401 (server_js is a fixture)

pytestmark = pytest.mark.asyncio


async def test_no_spelling_of_a_hardlined_path_reaches_the_server(sidecar, server_js, tmp_path, run_id):
    root = tmp_path / 'root'
    (root / 'sub').mkdir(parents=True)
    (root / '.env').write_text('SECRET=hunter2')
    async with Client(wrapped(sidecar, server_js, root, run_id)) as client:
        await client.list_tools()  # a tool is called as it was listed
        for path in (f'{root}/.env/', f'{root}//.env', f'{root}/./.env', f'{root}/sub/../.env'):
            result = await client.call_tool('read_text_file', {'path': path})
            assert result.is_error and 'hardline_path' in text(result), (path, text(result))
            assert 'hunter2' not in text(result)
        for path in (f'{root}/sub/.env/.', f'{root}/sub//.env/'):
            result = await client.call_tool('write_file', {'path': path, 'content': 'SECRET=1'})
            assert result.is_error and 'hardline_path' in text(result), (path, text(result))
        assert not (root / 'sub' / '.env').exists()
        # move_file names its paths in pathArgs: the destination is normalized too.
        (root / 'notes.txt').write_text('x')
        result = await client.call_tool('move_file', {'source': f'{root}/notes.txt',
                                                      'destination': f'{root}/sub/.env/'})
        assert result.is_error and 'hardline_path' in text(result), text(result)
        # A path that climbs out of where it starts is refused as such.
        result = await client.call_tool('read_text_file', {'path': '../etc/passwd'})
        assert result.is_error and 'path_escapes' in text(result), text(result)
    reasons = {reason for _, _, reason in decisions(sidecar, run_id)}
    assert reasons == {'hardline_path', 'path_escapes'}, reasons
