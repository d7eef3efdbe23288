// Compiled (not run) by `npm test`: the adapters accept the frameworks' real
// tool and client types and hand back the same types.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { tool as agentsTool, type FunctionTool } from "@openai/agents";
import { tool as aiTool, type Tool } from "ai";
import { z } from "zod";
import {
  ANSWER_MEMBERS,
  ROW_MEMBERS,
  Toolgate,
  type Approval,
  type Batch,
  type Budget,
  type Cancellation,
  type Entry,
  type FileContent,
  type FileStat,
  type FlowLabel,
  type Intent,
  type Listing,
  type PodCancellation,
  type RunStatus,
  type Verdict,
  type Written,
} from "@toolgate/client";
import { governTool, governTools } from "@toolgate/client/ai";
import { governClient } from "@toolgate/client/mcp";
import { governTool as governAgentsTool } from "@toolgate/client/openai-agents";

const tg = new Toolgate({ url: "http://127.0.0.1:1" });

const weather = aiTool({
  description: "Weather",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `sunny in ${city}`,
});
const governedWeather: typeof weather = governTool(tg, "weather", weather);
const tools: { weather: Tool } = governTools(tg, { weather });

const bash = agentsTool({
  name: "bash",
  description: "Run",
  parameters: z.object({ command: z.string() }),
  execute: async ({ command }) => command,
});
const governedBash: FunctionTool<unknown, any, unknown> = governAgentsTool(tg, bash);

const mcp: Client = governClient(tg, new Client({ name: "x", version: "1" }), { server: "notes" });

async function verdictFields(): Promise<string> {
  const v: Verdict = await tg.authorize({ tool: "lookup", arguments: { q: 1 }, runId: "r", stepId: "s" });
  const r: string = await tg.guard("lookup", {}, async () => "x", { approvalTimeoutMs: 1000 });
  return `${v.decisionId} ${v.approvalId ?? ""} ${v.verdict satisfies "allow" | "deny" | "escalate"} ${r}`;
}

export { governedWeather, tools, governedBash, mcp, verdictFields };

// Each ANSWER_MEMBERS list, camelCased, is exactly its interface's keys.
type Camel<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Members<K extends keyof typeof ANSWER_MEMBERS> = Camel<(typeof ANSWER_MEMBERS)[K][number]>;
type Row<K extends keyof typeof ROW_MEMBERS> = Camel<(typeof ROW_MEMBERS)[K][number]>;
const membersMatch: [
  Same<Members<"AuthorizeResponse">, keyof Verdict>,
  Same<Members<"BatchResponse">, keyof Batch>,
  Same<Members<"RunStatus">, keyof RunStatus>,
  Same<Members<"BudgetUse">, keyof Budget>,
  Same<Members<"CancelResponse">, keyof Cancellation>,
  Same<Members<"PodCancelResponse">, keyof PodCancellation>,
  Same<Members<"FlowLabel">, keyof FlowLabel>,
  Same<Members<"FileRead">, keyof FileContent>,
  Same<Members<"FileWritten">, keyof Written>,
  Same<Members<"Listing">, keyof Listing>,
  Same<Members<"Entry">, keyof Entry>,
  Same<Members<"Stat">, keyof FileStat>,
  Same<Row<"OpenIntent">, keyof Intent>,
  Same<Row<"ApprovalView">, keyof Approval>,
] = [true, true, true, true, true, true, true, true, true, true, true, true, true, true];

export { membersMatch };
