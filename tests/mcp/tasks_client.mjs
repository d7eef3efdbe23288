// tasks_client.mjs URL TOOL ARGSJSON: an MCP client of the TypeScript SDK
// (@modelcontextprotocol/client) pinned to protocol 2026-07-28, calling TOOL
// through @modelcontextprotocol/ext-tasks, so its tools/call declares the
// tasks extension and a task answer is polled to its end. The SDK client
// cannot carry that traffic itself: ext-tasks takes a raw dispatcher, which
// is the HTTP POST below. Prints one JSON object per line on stdout:
//   {"event":"tools","tools":[...names]}
//   {"event":"status","status":...,"statusMessage":...,"taskId":...}   (per observed task state)
//   {"event":"result", ...CallToolResult}  |  {"event":"failed","error":...}  |  {"event":"cancelled",...}
// Env: POLL_MS overrides the server's pollIntervalMs hint on task results
// (ext-tasks polls at the hint); TIMEOUT_MS bounds the whole run (30000);
// RUN_ID is sent as X-Toolgate-Run-Id on every request.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, DispatchError, toolDeclarationFromMcpTool } from "@modelcontextprotocol/ext-tasks/client";

const [url, toolName, argsJson = "{}"] = process.argv.slice(2);
if (!url || !toolName) {
  console.error("usage: client.mjs URL TOOL ARGSJSON");
  process.exit(2);
}
const PROTOCOL_VERSION = "2026-07-28";
const CLIENT_INFO = { name: "toolgate-tasks-test", version: "1.0.0" };
const RUN_HEADERS = process.env.RUN_ID ? { "X-Toolgate-Run-Id": process.env.RUN_ID } : {};
const CLIENT_CAPABILITIES = {};
const POLL_MS = process.env.POLL_MS ? Number(process.env.POLL_MS) : undefined;
const TIMEOUT_MS = Number(process.env.TIMEOUT_MS ?? 30000);

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const errorJson = (e) =>
  e && typeof e === "object"
    ? {
        name: e.name,
        message: e.message,
        ...(e.code !== undefined ? { code: e.code } : {}),
        ...(e.data !== undefined ? { data: e.data } : {}),
        ...(e.cause ? { cause: String(e.cause?.message ?? e.cause) } : {}),
      }
    : { message: String(e) };

// Which params field the Mcp-Name header mirrors (SEP-2243), as the SDK transport does.
const MCP_NAME_SOURCE = {
  "tools/call": "name",
  "prompts/get": "name",
  "resources/read": "uri",
  "tasks/get": "taskId",
  "tasks/update": "taskId",
  "tasks/cancel": "taskId",
};
function encodeHeaderValue(s) {
  const plain = s.length > 0 && s === s.trim() && /^[\x20-\x7e\t]*$/.test(s) && !(s.startsWith("=?base64?") && s.endsWith("?="));
  return plain ? s : `=?base64?${Buffer.from(s, "utf8").toString("base64")}?=`;
}

// Parse a text/event-stream body and return the JSON-RPC response with the given id.
function responseFromSse(text, id) {
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).replace(/^ /, ""))
      .join("\n");
    if (!data) continue;
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      continue;
    }
    if (msg && msg.id === id && ("result" in msg || "error" in msg)) return msg;
  }
  return undefined;
}

function maybeOverridePoll(result) {
  if (POLL_MS === undefined || !result || typeof result !== "object" || Array.isArray(result)) return result;
  const isTask = result.resultType === "task" || (typeof result.taskId === "string" && typeof result.status === "string");
  return isTask ? { ...result, pollIntervalMs: POLL_MS } : result;
}

// The tools as listed: a tools/call mirrors each argument whose property
// declares `x-mcp-header: NAME` into the header Mcp-Param-NAME (SEP-2243).
let listedTools = [];
function paramHeaders(toolName, args) {
  const tool = listedTools.find((t) => t.name === toolName);
  const out = {};
  const walk = (schema, value) => {
    for (const [key, prop] of Object.entries(schema?.properties ?? {})) {
      const v = value?.[key];
      if (typeof prop?.["x-mcp-header"] === "string" && ["string", "number", "boolean"].includes(typeof v))
        out[`Mcp-Param-${prop["x-mcp-header"]}`] = encodeHeaderValue(String(v));
      walk(prop, v);
    }
  };
  if (tool) walk(tool.inputSchema, args);
  return out;
}

let nextRawId = 1_000_000;
// Raw JSON-RPC over HTTP POST for V2 task traffic (tools/call, tasks/*), which the
// SDK Client's codecs would reject. `request` arrives already framed by ext-tasks
// ({method, params:{..., _meta:{protocolVersion, clientInfo, clientCapabilities+tasks}}}).
async function rawDispatch(request, options = {}) {
  const id = nextRawId++;
  const message = { jsonrpc: "2.0", id, ...request };
  const headers = {
    ...(options.context?.headers ?? {}),
    ...RUN_HEADERS,
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
    "Mcp-Protocol-Version": PROTOCOL_VERSION,
    "Mcp-Method": request.method,
  };
  const nameField = MCP_NAME_SOURCE[request.method];
  const nameValue = nameField ? request.params?.[nameField] : undefined;
  if (typeof nameValue === "string") {
    for (const k of Object.keys(headers)) if (k.toLowerCase() === "mcp-name") delete headers[k];
    headers["Mcp-Name"] = encodeHeaderValue(nameValue);
  }
  if (request.method === "tools/call") Object.assign(headers, paramHeaders(request.params?.name, request.params?.arguments));
  let res;
  try {
    res = await fetch(url, { method: "POST", headers, body: JSON.stringify(message), signal: options.signal });
  } catch (e) {
    throw new DispatchError(`HTTP request failed: ${e.message}`, true, { cause: e });
  }
  const text = await res.text();
  const ctype = (res.headers.get("content-type") ?? "").toLowerCase();
  let reply;
  if (ctype.includes("text/event-stream")) reply = responseFromSse(text, id);
  else {
    try {
      reply = JSON.parse(text);
    } catch {
      reply = undefined;
    }
  }
  if (reply && typeof reply === "object" && reply.error && typeof reply.error.code === "number") {
    const { code, message: msg, data } = reply.error;
    return { kind: "error", error: { code, message: String(msg ?? ""), ...(data === undefined ? {} : { data }) } };
  }
  if (!res.ok) throw new DispatchError(`HTTP ${res.status} for ${request.method}: ${text.slice(0, 300)}`, res.status >= 500);
  if (!reply || typeof reply !== "object" || !("result" in reply))
    throw new DispatchError(`Unusable response for ${request.method} (content-type ${ctype}): ${text.slice(0, 300)}`);
  return { kind: "result", result: maybeOverridePoll(reply.result) };
}

const timer = setTimeout(() => {
  emit({ event: "failed", error: { message: `client timeout after ${TIMEOUT_MS}ms` } });
  process.exit(1);
}, TIMEOUT_MS);

let exitCode = 0;
const client = new Client(CLIENT_INFO, {
  capabilities: CLIENT_CAPABILITIES,
  versionNegotiation: { mode: { pin: PROTOCOL_VERSION } },
});
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: RUN_HEADERS } });
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  listedTools = tools;
  emit({
    event: "tools",
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    tools: tools.map((t) => t.name),
  });

  const session = createTaskSessionFromClient(client, {
    endpointId: url,
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: PROTOCOL_VERSION,
      clientInfo: CLIENT_INFO,
      clientCapabilities: CLIENT_CAPABILITIES,
    },
    // Reuse our tools/list so ext-tasks does not issue a second one itself.
    tools: { currentTool: (name) => { const t = tools.find((x) => x.name === name); return t ? toolDeclarationFromMcpTool(t) : undefined; } },
    onError: (e) => console.error("[client] background error:", e?.message ?? e),
  });

  let lastKey;
  const emitStatus = (task) => {
    const key = JSON.stringify([task.taskId, task.status, task.statusMessage ?? null, task.lastUpdatedAt ?? null]);
    if (key === lastKey) return;
    lastKey = key;
    emit({
      event: "status",
      status: task.status,
      statusMessage: task.statusMessage ?? null,
      taskId: task.taskId,
      ...(task.suggestedPollIntervalMs !== undefined ? { pollIntervalMs: task.suggestedPollIntervalMs } : {}),
    });
  };

  try {
    const execution = await session.callTool(toolName, JSON.parse(argsJson));
    const { outcome, lastTask } = await execution.settle({
      onEvent: (ev) => {
        if (ev.type === "task") emitStatus(ev.task);
        else if (ev.outcome.task) emitStatus(ev.outcome.task);
      },
    });
    if (lastTask) emitStatus(lastTask);
    if (outcome.status === "completed") {
      emit({ event: "result", execution: execution.kind, ...outcome.result });
    } else if (outcome.status === "failed") {
      emit({ event: "failed", error: errorJson(outcome.error) });
      exitCode = 1;
    } else {
      emit({ event: "cancelled", taskId: outcome.task?.taskId ?? null });
      exitCode = 1;
    }
  } catch (e) {
    emit({ event: "failed", error: errorJson(e) });
    exitCode = 1;
  }
  await session.close().catch(() => {});
} catch (e) {
  emit({ event: "failed", error: errorJson(e) });
  exitCode = 1;
}
clearTimeout(timer);
await client.close().catch(() => {});
process.exit(exitCode);
