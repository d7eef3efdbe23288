// The MCP adapter: a governed MCP SDK Client talking to a real MCP server
// (fixtures/notes-mcp-server.mjs) over stdio, decided by a real sidecar.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ApprovalRequired, Denied, Toolgate } from "@toolgate/client";
import { governClient } from "@toolgate/client/mcp";

import { needsSidecar, resolveLater, runId, startSidecar } from "./sidecar.mjs";

const SERVER = fileURLToPath(new URL("./fixtures/notes-mcp-server.mjs", import.meta.url));

describe("MCP SDK client adapter", needsSidecar(), () => {
  let sidecar;
  let dir;
  let log;
  let mcp;
  before(async () => {
    sidecar = await startSidecar();
    dir = mkdtempSync(path.join(tmpdir(), "toolgate-ts-mcp-"));
    log = path.join(dir, "calls.log");
    writeFileSync(log, "");
    mcp = new Client({ name: "toolgate-ts-test", version: "1.0.0" });
    await mcp.connect(new StdioClientTransport({ command: process.execPath, args: [SERVER, log], stderr: "inherit" }));
  });
  after(async () => {
    await mcp?.close();
    await sidecar?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  const calls = () =>
    readFileSync(log, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));

  test("an allowed call reaches the server; other methods pass through", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("mcp-allow") });
    const governed = governClient(tg, mcp, { server: "notes" });
    const { tools } = await governed.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ["delete_note", "read_note", "write_note"]);
    const before = calls().length;
    const result = await governed.callTool({ name: "read_note", arguments: { name: "todo" } });
    assert.deepEqual(result.content, [{ type: "text", text: "contents of todo" }]);
    assert.deepEqual(calls().slice(before), [{ tool: "read_note", args: { name: "todo" } }]);
  });

  test("a denied call never reaches the server", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("mcp-deny") });
    const governed = governClient(tg, mcp, { server: "notes" });
    const before = calls().length;
    await assert.rejects(
      governed.callTool({ name: "delete_note", arguments: { name: "prod-db" } }),
      (e) => e instanceof Denied && e.code === "policy_denied" && e.reason === "deny_rule",
    );
    // A tool the policy does not know under the server's name is denied too.
    await assert.rejects(
      governClient(tg, mcp).callTool({ name: "read_note", arguments: { name: "x" } }),
      (e) => e instanceof Denied && e.reason === "unknown_tool",
    );
    assert.equal(calls().length, before);
  });

  test("an escalated call waits for the human's approval, then reaches the server once", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("mcp-escalate") });
    const first = await tg.authorize({ tool: "notes.delete_note", arguments: { name: "draft" } });
    assert.equal(first.verdict, "escalate");
    const governed = governClient(tg, mcp, { server: "notes" });
    const before = calls().length;
    // Without waiting: refused, and nothing sent.
    await assert.rejects(governed.callTool({ name: "delete_note", arguments: { name: "draft" } }), ApprovalRequired);
    assert.equal(calls().length, before);
    const approving = resolveLater(sidecar, first.approvalId);
    const waiting = governClient(tg, mcp, { server: "notes", approvalTimeoutMs: 20_000 });
    const result = await waiting.callTool({ name: "delete_note", arguments: { name: "draft" } });
    await approving;
    assert.deepEqual(result.content, [{ type: "text", text: "deleted draft" }]);
    assert.deepEqual(calls().slice(before), [{ tool: "delete_note", args: { name: "draft" } }]);
    assert.deepEqual(await tg.intents.pending(), []);
  });

  test("a high-risk call answered isError closes its intent as error", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("mcp-iserror") });
    const seen = [];
    const spy = {
      callTool: async (...args) => {
        seen.push(await tg.intents.pending());
        return mcp.callTool(...args);
      },
    };
    const result = await governClient(tg, spy, { server: "notes" }).callTool({
      name: "write_note",
      arguments: { name: "n", text: "" },
    });
    assert.equal(result.isError, true);
    const [[intent]] = seen;
    assert.equal(intent.tool, "notes.write_note");
    assert.deepEqual(await tg.intents.pending(), []);
    // Closed as error: repeating that outcome answers the row.
    const row = await tg.intents.complete(intent.intentId, "error");
    assert.deepEqual([row.status, row.detail], ["error", "MCP tool error: empty note"]);
    await assert.rejects(tg.intents.complete(intent.intentId, "completed"), (e) => e.code === "conflict");
  });
});
