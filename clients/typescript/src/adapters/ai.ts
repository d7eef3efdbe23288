/**
 * Vercel AI SDK (`ai`): governs a `tool()`'s `execute`, so the SDK's own
 * tool loop (generateText / streamText) asks the sidecar before every call.
 * A refusal throws inside `execute`, which the SDK reports to the model as a
 * tool error; the tool's own code never runs.
 *
 * Typed structurally, so this module loads no `ai` code of its own.
 */
import type { Arguments, GuardOptions, Toolgate } from "../client.js";

/** The part of an AI SDK `Tool` this adapter touches. */
export interface AiSdkTool {
  execute?: ((input: any, options: any) => unknown) | undefined;
}

export interface GovernAiToolOptions extends Omit<GuardOptions, "stepId"> {
  /** The step id of a call; default the SDK's `toolCallId`. */
  stepId?: (options: { toolCallId?: string }) => string | undefined;
}

function isAsyncIterable(v: unknown): v is AsyncIterable<unknown> {
  return (
    typeof v === "object" && v !== null && typeof (v as AsyncIterable<unknown>)[Symbol.asyncIterator] === "function"
  );
}

/**
 * `tool` with its `execute` run only when the sidecar allows `name` with the
 * call's input. A streaming `execute` (an async iterable) runs to its end
 * inside the guard, so the intent covers it; its final value is returned.
 */
export function governTool<T extends AiSdkTool>(
  toolgate: Toolgate,
  name: string,
  tool: T,
  options: GovernAiToolOptions = {},
): T {
  const execute = tool.execute;
  if (typeof execute !== "function") {
    throw new TypeError(`tool ${name} has no execute: there is nothing to govern`);
  }
  const { stepId, ...guardOptions } = options;
  const governed = async (input: unknown, callOptions: { toolCallId?: string } = {}) => {
    const args = (
      typeof input === "object" && input !== null && !Array.isArray(input) ? input : { input }
    ) as Arguments;
    return toolgate.guard(
      name,
      args,
      async () => {
        const out = await execute.call(tool, input, callOptions);
        if (!isAsyncIterable(out)) return out;
        let last: unknown;
        for await (const chunk of out) last = chunk;
        return last;
      },
      { ...guardOptions, stepId: stepId ? stepId(callOptions) : callOptions.toolCallId },
    );
  };
  return { ...tool, execute: governed };
}

/** Every tool of a `tools` record governed under its key. */
export function governTools<T extends Record<string, AiSdkTool>>(
  toolgate: Toolgate,
  tools: T,
  options: GovernAiToolOptions = {},
): T {
  const out: Record<string, AiSdkTool> = {};
  for (const [name, tool] of Object.entries(tools)) {
    out[name] = typeof tool.execute === "function" ? governTool(toolgate, name, tool, options) : tool;
  }
  return out as T;
}
