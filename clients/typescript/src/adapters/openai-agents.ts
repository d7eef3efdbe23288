/**
 * OpenAI Agents SDK (`@openai/agents`): governs a function tool's `invoke`,
 * the path the SDK's runner calls (through `invokeFunctionTool`) for every
 * tool call the model makes. The original `invoke` (its input parsing,
 * `execute` and error handling) runs only when the sidecar allows the call.
 *
 * A policy refusal (deny, or an escalation no human approved in time) is
 * answered to the model as the tool's output, so the agent can go on
 * without it; a cancelled run, an unreachable sidecar or an unreadable
 * answer throws, which stops the run: it fails closed.
 *
 * Typed structurally, so this module loads no SDK code of its own.
 */
import type { Arguments, GuardOptions, Toolgate } from "../client.js";
import { ApprovalRequired, Denied, RunCancelled } from "../errors.js";

/** The part of an Agents SDK `FunctionTool` this adapter touches. */
export interface AgentsFunctionTool {
  type: "function";
  name: string;
  invoke: (runContext: any, input: string, details?: any) => Promise<unknown>;
}

export interface GovernAgentsToolOptions extends Omit<GuardOptions, "stepId"> {
  /** The step id of a call; default the model's call id (`details.toolCall.callId`). */
  stepId?: (details: any) => string | undefined;
  /** What the model is told of a refusal; default a one-line description. */
  refusalMessage?: (error: Denied | ApprovalRequired) => string;
}

export function describeRefusal(error: Denied | ApprovalRequired): string {
  if (error instanceof ApprovalRequired) {
    return `toolgate: this call needs a human's approval (${error.approvalId ?? "none"}, ${error.approvalStatus}); it did not run.`;
  }
  return `toolgate: this call was denied (${error.reason}); it did not run.`;
}

/** `tool` whose every invocation the sidecar decides first, under `tool.name`. */
export function governTool<T extends AgentsFunctionTool>(
  toolgate: Toolgate,
  tool: T,
  options: GovernAgentsToolOptions = {},
): T {
  if (tool.type !== "function" || typeof tool.invoke !== "function") {
    throw new TypeError("only function tools can be governed");
  }
  const { stepId, refusalMessage = describeRefusal, ...guardOptions } = options;
  const invoke = tool.invoke;
  const governed = async (runContext: unknown, input: string, details?: any) => {
    let args: unknown;
    try {
      args = JSON.parse(input === "" ? "{}" : input);
    } catch {
      return `toolgate: the arguments of ${tool.name} are not JSON; it did not run.`;
    }
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      return `toolgate: the arguments of ${tool.name} are not a JSON object; it did not run.`;
    }
    try {
      return await toolgate.guard(tool.name, args as Arguments, () => invoke.call(tool, runContext, input, details), {
        ...guardOptions,
        stepId: stepId ? stepId(details) : details?.toolCall?.callId,
      });
    } catch (err) {
      if ((err instanceof Denied && !(err instanceof RunCancelled)) || err instanceof ApprovalRequired) {
        return refusalMessage(err);
      }
      throw err;
    }
  };
  return { ...tool, invoke: governed };
}
