// The OpenAI Agents SDK adapter, through the SDK's own tool-execution path:
// `invokeFunctionTool` (what the runner calls for each function call the
// model makes) on a governed `tool()`, decided by a real sidecar.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { RunContext, invokeFunctionTool, tool } from "@openai/agents";
import { z } from "zod";
import { RunCancelled, SidecarUnreachable, Toolgate } from "@toolgate/client";
import { governTool } from "@toolgate/client/openai-agents";

import { needsSidecar, resolveLater, runId, startSidecar } from "./sidecar.mjs";

describe("OpenAI Agents SDK adapter", needsSidecar(), () => {
  let sidecar;
  before(async () => {
    sidecar = await startSidecar();
  });
  after(async () => {
    await sidecar?.stop();
  });

  const ran = [];
  const bash = tool({
    name: "bash",
    description: "Run a shell command",
    parameters: z.object({ command: z.string() }),
    execute: async ({ command }) => {
      ran.push(command);
      return `ran ${command}`;
    },
  });
  const call = (t, input, callId = "call-1") =>
    invokeFunctionTool({
      tool: t,
      runContext: new RunContext({}),
      input: JSON.stringify(input),
      details: { toolCall: { type: "function_call", callId, name: t.name, arguments: JSON.stringify(input) } },
    });

  test("an allowed call runs, its intent recorded and closed", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("agents-allow") });
    const governed = governTool(tg, bash);
    assert.equal(governed.name, "bash");
    assert.equal(governed.type, "function");
    assert.equal(await call(governed, { command: "echo hi" }), "ran echo hi");
    assert.deepEqual(ran.splice(0), ["echo hi"]);
    assert.deepEqual(await tg.intents.pending(), []);
  });

  test("a denied call is answered to the model and never runs", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("agents-deny") });
    const out = await call(governTool(tg, bash), { command: "rm -rf /" });
    assert.match(out, /^toolgate: this call was denied \(deny_rule\)/);
    assert.deepEqual(ran, []);
    // Arguments that are not a JSON object are not sent on, nor run.
    const odd = await invokeFunctionTool({ tool: governTool(tg, bash), runContext: new RunContext({}), input: "[1]" });
    assert.match(odd, /not a JSON object/);
    assert.deepEqual(ran, []);
  });

  test("an escalated call runs once a human approves it, not before", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("agents-escalate") });
    const refused = await call(governTool(tg, bash), { command: "deploy prod" });
    const [, approvalId] = refused.match(/^toolgate: this call needs a human's approval \(([^,]+), pending\)/);
    assert.equal((await tg.approvals.get(approvalId)).tool, "bash");
    assert.deepEqual(ran, []);
    const approving = resolveLater(sidecar, approvalId);
    const out = await call(governTool(tg, bash, { approvalTimeoutMs: 20_000 }), { command: "deploy prod" });
    await approving;
    assert.equal(out, "ran deploy prod");
    assert.deepEqual(ran.splice(0), ["deploy prod"]);
  });

  test("a cancelled run and an unreachable sidecar stop the run: they throw", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("agents-cancel") });
    await tg.runs.cancel({ reason: "stop" });
    await assert.rejects(call(governTool(tg, bash), { command: "echo hi" }), RunCancelled);
    const down = new Toolgate({ url: "http://127.0.0.1:9", timeoutMs: 2000 });
    await assert.rejects(call(governTool(down, bash), { command: "echo hi" }), SidecarUnreachable);
    assert.deepEqual(ran, []);
  });
});
