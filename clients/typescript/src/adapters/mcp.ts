/**
 * MCP TypeScript SDK (`@modelcontextprotocol/sdk`): a client whose
 * `callTool` the sidecar decides first, under `SERVER.TOOL` (the names the
 * sidecar's MCP gateway uses) or the bare tool name. Every other method
 * passes through to the wrapped client. A refusal throws; the request never
 * reaches the server. A high-risk call's intent is closed `error` when the
 * server answers `isError`.
 *
 * Typed structurally, so this module loads no SDK code of its own.
 */
import type { Arguments, GuardOptions, Toolgate } from "../client.js";

/** The part of an MCP SDK `Client` this adapter touches. */
export interface McpCallable {
  callTool(params: { name: string; arguments?: Record<string, unknown> }, ...rest: any[]): Promise<any>;
}

export interface GovernMcpOptions extends GuardOptions {
  /** Prefix of the policy's tool names: `server` makes `echo` the tool `server.echo`. */
  server?: string;
}

function errorText(result: any): string | undefined {
  if (!result || result.isError !== true) return undefined;
  const parts = Array.isArray(result.content) ? result.content : [];
  const text = parts
    .filter((p: any) => p && p.type === "text" && typeof p.text === "string")
    .map((p: any) => p.text)
    .join(" ");
  return `MCP tool error: ${text}`.trim();
}

/** `client` with a governed `callTool` (a Proxy: the client itself is not changed). */
export function governClient<C extends McpCallable>(toolgate: Toolgate, client: C, options: GovernMcpOptions = {}): C {
  const { server, ...guardOptions } = options;
  const callTool = async (params: { name: string; arguments?: Record<string, unknown> }, ...rest: unknown[]) => {
    if (!params || typeof params.name !== "string") throw new TypeError("callTool needs { name, arguments? }");
    const tool = server ? `${server}.${params.name}` : params.name;
    return toolgate.guard(tool, (params.arguments ?? {}) as Arguments, () => client.callTool(params, ...rest), {
      ...guardOptions,
      failureOf: errorText,
    });
  };
  return new Proxy(client, {
    get(target, prop) {
      if (prop === "callTool") return callTool;
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
