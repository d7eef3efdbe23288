// The OpenAI Agents SDK adapter, through the SDK's own tool-execution path:
// `invokeFunctionTool` (what the runner calls for each function call the
// model makes) on a governed `tool()`, decided by a real sidecar.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Agent, RunContext, Runner, Usage, invokeFunctionTool, tool } from "@openai/agents";
import { z } from "zod";
import { RunCancelled, SidecarUnreachable, Toolgate } from "@toolgate/client";
import { governTool } from "@toolgate/client/openai-agents";

import { needsSidecar, resolveLater, runId, startSidecar } from "./sidecar.mjs";

/** A scripted Model: asks for `calls` on its first turn, then reports the tool outputs it got. */
function scriptedModel(calls) {
  let turn = 0;
  return {
    async getResponse(request) {
      if (turn++ === 0) {
        const output = calls.map(([name, args], i) => ({
          type: "function_call",
          callId: `c${i}`,
          name,
          arguments: JSON.stringify(args),
          status: "completed",
        }));
        return { usage: new Usage(), responseId: "r1", output };
      }
      const results = request.input.filter((i) => i.type === "function_call_result").map((i) => i.output.text);
      const text = JSON.stringify(results);
      return {
        usage: new Usage(),
        responseId: "r2",
        output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] }],
      };
    },
    async *getStreamedResponse() {
      throw new Error("not scripted");
    },
  };
}

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

  test("through the SDK's Runner: the allowed call runs, the denied one is answered", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("agents-runner") });
    const model = scriptedModel([
      ["bash", { command: "echo one" }],
      ["bash", { command: "rm -rf /" }],
    ]);
    const agent = new Agent({ name: "ops", instructions: "-", tools: [governTool(tg, bash)], model });
    const result = await new Runner({ tracingDisabled: true }).run(agent, "go");
    const [allowed, denied] = JSON.parse(result.finalOutput);
    assert.equal(allowed, "ran echo one");
    assert.match(denied, /^toolgate: this call was denied \(deny_rule\)/);
    assert.deepEqual(ran.splice(0), ["echo one"]);
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
