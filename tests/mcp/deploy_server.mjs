// deploy_server.mjs PORT: an MCP server of the TypeScript SDK
// (@modelcontextprotocol/server) on http://127.0.0.1:PORT/mcp, speaking
// protocol 2026-07-28 (it answers server/discover) and the older ones.
// One tool, `deploy {service}` (`service` mirrored in Mcp-Param-Service),
// which answers "deployed <service>" and writes
// a line to $CALLS_FILE per call, so a test counts what really ran
// (a call for $STALL_SERVICE is written and never answered).
// It declares no tasks support of its own. Prints READY once listening.
import http from "node:http";
import { appendFileSync } from "node:fs";
import { McpServer, createMcpHandler } from "@modelcontextprotocol/server";
import * as z from "zod/v4";

const port = Number(process.argv[2] ?? 0);
const callsFile = process.env.CALLS_FILE;

function buildServer() {
  const server = new McpServer({ name: "deploy-server", version: "1.0.0" });
  server.registerTool(
    "deploy",
    {
      description: "Deploy a service",
      // `service` is mirrored in the Mcp-Param-Service header (protocol
      // 2026-07-28's x-mcp-header): the SDK server rejects a call whose
      // header is missing or disagrees with the body.
      inputSchema: z.object({ service: z.string().meta({ "x-mcp-header": "Service" }) }),
    },
    async ({ service }) => {
      if (callsFile) appendFileSync(callsFile, `deploy ${service}\n`);
      // $STALL_SERVICE: that call is recorded and never answered, so a test
      // can stop the gateway while the call is in flight.
      if (process.env.STALL_SERVICE && service === process.env.STALL_SERVICE) await new Promise(() => {});
      return { content: [{ type: "text", text: `deployed ${service}` }] };
    },
  );
  return server;
}

const handler = createMcpHandler(() => buildServer(), {
  onerror: (err) => console.error("[server] mcp error:", err?.message ?? err),
});

const httpServer = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, `http://${req.headers.host ?? "127.0.0.1"}`);
    if (url.pathname !== "/mcp") {
      res.writeHead(404).end("not found");
      return;
    }
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) v.forEach((x) => headers.append(k, x));
      else if (v !== undefined) headers.set(k, v);
    }
    const ac = new AbortController();
    res.on("close", () => ac.abort());
    const request = new Request(url, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" || body.length === 0 ? undefined : body,
      signal: ac.signal,
    });
    const response = await handler.fetch(request);
    const outHeaders = {};
    response.headers.forEach((v, k) => (outHeaders[k] = v));
    res.writeHead(response.status, outHeaders);
    if (response.body) {
      const reader = response.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        res.write(value);
      }
    }
    res.end();
  } catch (err) {
    console.error("[server] http error:", err);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  }
});

httpServer.listen(port, "127.0.0.1", () => {
  process.stdout.write("READY\n");
});
const shutdown = () => {
  handler.close().finally(() => httpServer.close(() => process.exit(0)));
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
