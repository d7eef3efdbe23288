// The Vercel AI SDK adapter, through the SDK's own tool loop: generateText
// runs the governed tools for the tool calls of MockLanguageModelV3 (the
// SDK's scripted stand-in for a model, from `ai/test`), decided by a real
// sidecar.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { generateText, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";
import { Toolgate } from "@toolgate/client";
import { governTool, governTools } from "@toolgate/client/ai";

import { needsSidecar, resolveLater, runId, startSidecar } from "./sidecar.mjs";

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A scripted model that asks for one tool call and then stops. */
function modelCalling(toolName, input) {
  return new MockLanguageModelV3({
    doGenerate: async () => ({
      content: [{ type: "tool-call", toolCallId: "call-1", toolName, input: JSON.stringify(input) }],
      finishReason: { unified: "tool-calls", raw: undefined },
      usage: USAGE,
      warnings: [],
    }),
  });
}

/** The step's tool result or tool error for call-1. */
async function runOneCall(tools, toolName, input) {
  const result = await generateText({ model: modelCalling(toolName, input), tools, prompt: "go" });
  return result.steps[0].content.find((p) => p.type === "tool-result" || p.type === "tool-error");
}

describe("Vercel AI SDK adapter", needsSidecar(), () => {
  let sidecar;
  before(async () => {
    sidecar = await startSidecar();
  });
  after(async () => {
    await sidecar?.stop();
  });

  const sent = [];
  const sendEmail = tool({
    description: "Send an email",
    inputSchema: z.object({ to: z.string(), body: z.string() }),
    execute: async ({ to }) => {
      sent.push(to);
      return `sent to ${to}`;
    },
  });
  const weather = tool({
    description: "Weather",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => `sunny in ${city}`,
  });

  test("an allowed call runs, with its intent recorded and closed", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("ai-allow") });
    const tools = governTools(tg, { send_email: sendEmail, weather });
    const low = await runOneCall(tools, "weather", { city: "Oslo" });
    assert.deepEqual([low.type, low.output], ["tool-result", "sunny in Oslo"]);
    const high = await runOneCall(tools, "send_email", { to: "bob@example.com", body: "hi" });
    assert.deepEqual([high.type, high.output], ["tool-result", "sent to bob@example.com"]);
    assert.deepEqual(sent.splice(0), ["bob@example.com"]);
    assert.deepEqual(await tg.intents.pending(), []);
  });

  test("a denied call is a tool error and its execute never runs", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("ai-deny") });
    const tools = { send_email: governTool(tg, "send_email", sendEmail) };
    const part = await runOneCall(tools, "send_email", { to: "mallory@evil.example", body: "secrets" });
    assert.equal(part.type, "tool-error");
    assert.deepEqual([part.error.code, part.error.reason], ["policy_denied", "deny_rule"]);
    assert.deepEqual(sent, []);
  });

  test("an escalated call runs once a human approves it, not before", async () => {
    const tg = new Toolgate({ url: sidecar.url, runId: runId("ai-escalate") });
    const input = { to: "chair@board.example", body: "resign" };
    const notWaiting = { send_email: governTool(tg, "send_email", sendEmail) };
    const refused = await runOneCall(notWaiting, "send_email", input);
    assert.deepEqual([refused.type, refused.error.code], ["tool-error", "approval_required"]);
    assert.deepEqual(sent, []);
    const approving = resolveLater(sidecar, refused.error.approvalId);
    const waiting = { send_email: governTool(tg, "send_email", sendEmail, { approvalTimeoutMs: 20_000 }) };
    const part = await runOneCall(waiting, "send_email", input);
    await approving;
    assert.deepEqual([part.type, part.output], ["tool-result", "sent to chair@board.example"]);
    assert.deepEqual(sent.splice(0), ["chair@board.example"]);
  });

  test("an unreachable sidecar fails closed", async () => {
    const tg = new Toolgate({ url: "http://127.0.0.1:9", runId: runId("ai-down"), timeoutMs: 2000 });
    const part = await runOneCall(governTools(tg, { send_email: sendEmail }), "send_email", {
      to: "a@example.com",
      body: "",
    });
    assert.deepEqual([part.type, part.error.code], ["tool-error", "sidecar_unreachable"]);
    assert.deepEqual(sent, []);
  });
});
