"""A minimal MCP server (raw JSON-RPC, no SDK) with one tool, `fetch`,
taking {"url": string}: the upstream of test_url_spellings.py.

Every message that reaches it is appended to the log as one JSON line:
{"method": M} for each request or notification, and
{"method": "tools/call", "name": N, "arguments": A} for each tools/call,
arguments exactly as received, so a test can tell what the gateway let
through and in what form.

  stdio: python url_mcp_server.py stdio LOG
  http:  python url_mcp_server.py http PORT LOG   (streamable HTTP at /mcp,
         each answer one application/json body)
"""
import json
import sys
import threading

FETCH = {
    "name": "fetch",
    "description": "Fetches a URL.",
    "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
}
LOG = None
LOCK = threading.Lock()


def record(entry):
    with LOCK, open(LOG, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


def answer(msg):
    """The answer to one client message (None for a notification)."""
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "tools/call":
        record({"method": method, "name": params.get("name"), "arguments": params.get("arguments")})
    else:
        record({"method": method})
    if "id" not in msg or method is None:
        return None
    i = msg["id"]
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "url-fetch", "version": "1.0"}}
    elif method == "tools/list":
        result = {"tools": [FETCH]}
    elif method == "tools/call" and params.get("name") == "fetch":
        result = {"content": [{"type": "text", "text": f"fetched {params['arguments'].get('url')}"}],
                  "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": i, "result": result}


def serve_stdio():
    for line in sys.stdin:
        if line.strip():
            out = answer(json.loads(line))
            if out is not None:
                sys.stdout.write(json.dumps(out) + "\n")
                sys.stdout.flush()


def serve_http(port):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, body=b"", content_type=None):
            self.send_response(status)
            if content_type:
                self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            msg = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            out = answer(msg)
            if out is None:
                self.reply(202)
            else:
                self.reply(200, json.dumps(out).encode(), "application/json")

        def do_GET(self):
            self.reply(405)

        do_DELETE = do_GET

    # A call is logged before it is answered, so once a client has its
    # answer, the log shows whether the call got here.
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        LOG = sys.argv[2]
        serve_stdio()
    else:
        LOG = sys.argv[3]
        serve_http(int(sys.argv[2]))
