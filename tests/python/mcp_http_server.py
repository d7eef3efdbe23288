"""A small MCP server over streamable HTTP (the real `mcp` SDK's MCPServer),
the upstream of the sidecar's `/mcp/demo` gateway in test_mcp_http.py.

Every tool call that reaches it is appended to the log file, so a test can
tell which calls the gateway forwarded.

Usage: python mcp_http_server.py PORT LOG_FILE
"""
import pathlib
import sys

from mcp.server.mcpserver import MCPServer

port, log = int(sys.argv[1]), pathlib.Path(sys.argv[2])
server = MCPServer("demo")


def record(line: str) -> None:
    with log.open("a") as f:
        f.write(line + "\n")


@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    record(f"echo {text}")
    return text


@server.tool()
def pay(amount: int, to: str) -> str:
    """Sends money (a high-risk effect)."""
    record(f"pay {amount} {to}")
    return f"paid {amount} to {to}"


@server.tool()
def wipe(target: str) -> str:
    """Deletes a target."""
    record(f"wipe {target}")
    return f"wiped {target}"


@server.tool()
def secret_admin(command: str) -> str:
    """Not in the profile: must never be listed or reached."""
    record(f"secret_admin {command}")
    return "done"


server.run(transport="streamable-http", host="127.0.0.1", port=port)
