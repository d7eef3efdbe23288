/**
 * The client of one agent run against the toolgate sidecar. Every decision
 * about what to send and what an answer means mirrors the Python client
 * (clients/python/src/toolgate/_ops.py); it fails closed: no answer, or one
 * it cannot read, throws, and a guarded function then never runs.
 */
import { ErrorCode, MAX_BATCH_CALLS, MAX_DETAIL_CHARS, MAX_WAIT_SECONDS, URL_ENV } from "./codes.js";
import {
  ApprovalRequired,
  Denied,
  ProtocolError,
  RunCancelled,
  SidecarUnreachable,
  ToolgateError,
  errorClass,
} from "./errors.js";
import {
  parseApproval,
  parseBatch,
  parseCancellation,
  parseFileContent,
  parseFileStat,
  parseIntent,
  parseListing,
  parsePodCancellation,
  parseRunStatus,
  parseVerdict,
  parseWritten,
  type Admission,
  type Approval,
  type ApprovalStatus,
  type Batch,
  type Cancellation,
  type FileContent,
  type FileStat,
  type Intent,
  type Listing,
  type PodCancellation,
  type RunStatus,
  type Verdict,
  type Written,
} from "./types.js";

export const DEFAULT_TIMEOUT_MS = 10_000;
/** Step id the sidecar records for calls made outside any step. */
const NO_STEP = "-";

/** W3C trace context of the caller, passed on so the sidecar's spans join its trace. */
export interface TraceContext {
  traceparent?: string;
  tracestate?: string;
}

export interface ToolgateOptions {
  /** The sidecar, `http(s)://host:port`; default `$TOOLGATE_URL`. */
  url?: string;
  /** The run every call belongs to; default a fresh UUID. */
  runId?: string;
  /** Per-request timeout (long-polls add their wait to it). */
  timeoutMs?: number;
  /** The caller's current trace context, asked before each request (e.g. from OpenTelemetry). */
  traceContext?: () => TraceContext | undefined;
  /** Told of a `warn`-mode verdict's warning; default `console.warn`. */
  onWarning?: (message: string, verdict: Verdict) => void;
  /** Told when an intent could not be closed after its effect; default `console.warn`. */
  onCloseFailure?: (intentId: string, error: unknown) => void;
  /** The `fetch` to use; default the platform's. */
  fetch?: typeof fetch;
}

export type Arguments = Record<string, unknown>;

export interface CallOptions {
  action?: string;
  stepId?: string;
  runId?: string;
  /** Trace context for this call (instead of `traceContext()`). */
  trace?: TraceContext;
}

export interface AuthorizeRequest extends CallOptions {
  tool: string;
  arguments: Arguments;
}

export interface GuardOptions extends CallOptions {
  /** On escalate, wait up to this many ms for a human, then ask again; 0 throws ApprovalRequired at once. */
  approvalTimeoutMs?: number;
}

export interface GuardRunOptions<T> extends GuardOptions {
  /**
   * For results that report a failure instead of throwing (an MCP result
   * with `isError`): the detail to close a high-risk call's intent with
   * `error`, or undefined when the call succeeded.
   */
  failureOf?: (result: T) => string | undefined;
}

export interface BatchCall {
  tool: string;
  arguments: Arguments;
  action?: string;
  stepId?: string;
}

interface Http {
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  query?: Record<string, string>;
  timeoutMs?: number;
  trace?: TraceContext;
}

function resolveUrl(url: string | undefined): string {
  const value = url || (typeof process !== "undefined" ? process.env?.[URL_ENV] : undefined);
  if (!value) throw new TypeError(`no sidecar URL: pass { url } or set $${URL_ENV}`);
  if (!/^https?:\/\//.test(value)) throw new TypeError(`sidecar URL must be http(s)://host:port, got ${value}`);
  return value.replace(/\/+$/, "");
}

/** An id as one path segment. */
function seg(id: string): string {
  if (typeof id !== "string" || id === "") throw new TypeError("ids must be non-empty strings");
  return encodeURIComponent(id);
}

function checkArguments(args: unknown): Arguments {
  if (typeof args !== "object" || args === null || Array.isArray(args)) {
    throw new TypeError("arguments must be a plain object (a JSON object)");
  }
  return args as Arguments;
}

function errorFromResponse(status: number, payload: unknown): ToolgateError {
  const env = payload as { error?: { code?: unknown; message?: unknown }; verdict?: unknown } | null;
  const err = env && typeof env === "object" ? env.error : undefined;
  if (!err || typeof err !== "object" || typeof err.code !== "string") {
    return new ProtocolError(
      `HTTP ${status} without an error envelope: ${String(JSON.stringify(payload)).slice(0, 200)}`,
      status,
    );
  }
  const code = err.code;
  const message = String(err.message ?? "");
  if (code === ErrorCode.POLICY_DENIED || code === ErrorCode.APPROVAL_REQUIRED) {
    let verdict: Verdict | undefined;
    try {
      verdict = env!.verdict === undefined ? undefined : parseVerdict(env!.verdict);
    } catch {
      verdict = undefined;
    }
    if (code === ErrorCode.APPROVAL_REQUIRED) return new ApprovalRequired(verdict, message, { status, body: payload });
    const Cls = verdict?.reason === "run_cancelled" ? RunCancelled : Denied;
    return new Cls(verdict, message, { status, body: payload });
  }
  const Cls = errorClass(code);
  return new Cls(message, { code, status, body: payload });
}

export class Toolgate {
  readonly url: string;
  readonly runId: string;
  readonly timeoutMs: number;
  private readonly options: ToolgateOptions;
  private readonly fetchFn: typeof fetch;

  /** Intents of high-risk calls: begin, mark effect-sent, complete, list the open ones. */
  readonly intents = {
    begin: (
      verdict: Verdict,
      tool: string,
      o: { stepId?: string; runId?: string; verificationProbe?: unknown } = {},
    ): Promise<Intent> => {
      const body: Record<string, unknown> = {
        decision_id: verdict.decisionId,
        run_id: o.runId ?? this.runId,
        step_id: o.stepId ?? NO_STEP,
        tool,
        args_digest: verdict.argsDigest,
        call_digest: verdict.callDigest,
      };
      if (o.verificationProbe !== undefined) body.verification_probe = o.verificationProbe;
      return this.request({ method: "POST", path: "/v1/intents", body }).then(parseIntent);
    },
    markEffectSent: (intentId: string): Promise<Intent> =>
      this.request({ method: "POST", path: `/v1/intents/${seg(intentId)}/effect-sent`, body: {} }).then(parseIntent),
    /** `outcome`: `completed`, `not_completed` or `error`. */
    complete: (
      intentId: string,
      outcome: "completed" | "not_completed" | "error",
      detail?: string,
    ): Promise<Intent> => {
      const body: Record<string, unknown> = { outcome };
      if (detail !== undefined) body.detail = detail.slice(0, MAX_DETAIL_CHARS);
      return this.request({ method: "POST", path: `/v1/intents/${seg(intentId)}/complete`, body }).then(parseIntent);
    },
    /** Open intents of the run, for resuming after a crash. */
    pending: async (o: { runId?: string } = {}): Promise<Intent[]> => {
      const data = (await this.request({
        method: "GET",
        path: "/v1/intents",
        query: { run_id: o.runId ?? this.runId, status: "pending" },
      })) as { intents?: unknown };
      if (!Array.isArray(data?.intents)) throw new ProtocolError("GET /v1/intents did not answer {intents: [...]}");
      return data.intents.map(parseIntent);
    },
  };

  /** The run's heartbeat and its stops. */
  readonly runs = {
    status: (o: { runId?: string } = {}): Promise<RunStatus> =>
      this.request({ method: "GET", path: `/v1/runs/${seg(o.runId ?? this.runId)}` }).then(parseRunStatus),
    /** Cancels the run durably: every later call of it is refused (`run_cancelled`). */
    cancel: (o: { reason?: string; runId?: string } = {}): Promise<Cancellation> =>
      this.request({
        method: "POST",
        path: `/v1/runs/${seg(o.runId ?? this.runId)}/cancel`,
        body: o.reason === undefined ? {} : { reason: o.reason },
      }).then(parseCancellation),
    /** Stops every run of this sidecar's pod, whatever run id it uses. */
    cancelPod: (o: { reason?: string } = {}): Promise<PodCancellation> =>
      this.request({
        method: "POST",
        path: "/v1/pod/cancel",
        body: o.reason === undefined ? {} : { reason: o.reason },
      }).then(parsePodCancellation),
  };

  /** Approvals a human grants or refuses. */
  readonly approvals = {
    /** The approval, after waiting up to `waitSeconds` (≤ 60) for it to be resolved. */
    get: (approvalId: string, o: { waitSeconds?: number } = {}): Promise<Approval> => {
      const wait = o.waitSeconds ?? 0;
      const http: Http = { method: "GET", path: `/v1/approvals/${seg(approvalId)}` };
      if (wait > 0) {
        const secs = Math.min(MAX_WAIT_SECONDS, Math.max(1, Math.ceil(wait)));
        http.query = { wait: String(secs) };
        http.timeoutMs = secs * 1000 + this.timeoutMs;
      }
      return this.request(http).then(parseApproval);
    },
    /** Long-polls until resolved or `timeoutMs` passed: the last status seen. */
    wait: async (approvalId: string, timeoutMs: number): Promise<ApprovalStatus> => {
      const deadline = performance.now() + Math.max(0, timeoutMs);
      for (;;) {
        const remaining = (deadline - performance.now()) / 1000;
        const a = await this.approvals.get(approvalId, { waitSeconds: remaining >= 1 ? remaining : 0 });
        // Less than the 1 s granularity of ?wait= left: stop rather than spin.
        if (a.status !== "pending" || deadline - performance.now() <= 0 || remaining < 1) return a.status;
      }
    },
  };

  /** The run's workspace, each operation decided as the tool `workspace.<op>`. */
  readonly workspace = {
    read: (path: string, o: { stepId?: string } = {}): Promise<FileContent> =>
      this.workspaceOp("read", path, o.stepId).then(parseFileContent),
    write: (path: string, content: string, o: { stepId?: string } = {}): Promise<Written> =>
      this.workspaceOp("write", path, o.stepId, content).then(parseWritten),
    list: (path = "", o: { stepId?: string } = {}): Promise<Listing> =>
      this.workspaceOp("list", path, o.stepId).then(parseListing),
    stat: (path = "", o: { stepId?: string } = {}): Promise<FileStat> =>
      this.workspaceOp("stat", path, o.stepId).then(parseFileStat),
  };

  constructor(options: ToolgateOptions = {}) {
    this.options = options;
    this.url = resolveUrl(options.url);
    this.runId = options.runId || globalThis.crypto.randomUUID();
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: pass { fetch } on a platform without one");
    this.fetchFn = f;
  }

  /** Asks whether `tool` may run with `arguments`: the verdict. */
  async authorize(req: AuthorizeRequest): Promise<Verdict> {
    const body: Record<string, unknown> = {
      tool: req.tool,
      arguments: checkArguments(req.arguments),
      run_id: req.runId ?? this.runId,
    };
    if (req.action !== undefined) body.action = req.action;
    if (req.stepId !== undefined) body.step_id = req.stepId;
    const verdict = parseVerdict(await this.request({ method: "POST", path: "/v1/authorize", body, trace: req.trace }));
    this.surfaceWarning(req.tool, verdict);
    return verdict;
  }

  /** Decides several calls at once; run them concurrently only when `parallel` is true. */
  async authorizeBatch(calls: BatchCall[], o: { runId?: string; trace?: TraceContext } = {}): Promise<Batch> {
    if (!Array.isArray(calls) || calls.length === 0 || calls.length > MAX_BATCH_CALLS) {
      throw new TypeError(`a batch holds 1-${MAX_BATCH_CALLS} calls`);
    }
    const bodyCalls = calls.map((c) => {
      const call: Record<string, unknown> = { tool: c.tool, arguments: checkArguments(c.arguments) };
      if (c.action !== undefined) call.action = c.action;
      if (c.stepId !== undefined) call.step_id = c.stepId;
      return call;
    });
    const batch = parseBatch(
      await this.request({
        method: "POST",
        path: "/v1/authorize/batch",
        body: { run_id: o.runId ?? this.runId, calls: bodyCalls },
        trace: o.trace,
      }),
    );
    if (batch.verdicts.length !== calls.length) {
      throw new ProtocolError(`${batch.verdicts.length} verdicts for ${calls.length} calls (Batch)`);
    }
    batch.verdicts.forEach((v, i) => this.surfaceWarning(calls[i]?.tool ?? "?", v));
    return batch;
  }

  /**
   * Everything before the effect: authorize; on escalate wait up to
   * `approvalTimeoutMs` and ask again; on a high-risk allow begin the intent
   * and mark it effect-sent. Throws Denied/ApprovalRequired/RunCancelled
   * unless the call may run now; the caller closes the intent.
   */
  async admit(tool: string, args: Arguments, o: GuardOptions = {}): Promise<Admission> {
    const req: AuthorizeRequest = { ...o, tool, arguments: args };
    let verdict = await this.authorize(req);
    const wait = o.approvalTimeoutMs ?? 0;
    if (verdict.verdict === "escalate" && wait > 0 && verdict.approvalId) {
      const status = await this.approvals.wait(verdict.approvalId, wait);
      if (status === "pending") throw new ApprovalRequired(verdict, undefined, { approvalStatus: status });
      // Approved: the one re-authorization it grants answers `approved`;
      // denied answers `approval_denied`; expired asks anew. The sidecar decides.
      verdict = await this.authorize(req);
    }
    if (verdict.verdict === "escalate") throw new ApprovalRequired(verdict);
    if (verdict.reason === "run_cancelled") throw new RunCancelled(verdict);
    if (verdict.verdict !== "allow") throw new Denied(verdict);
    let intentId: string | null = null;
    if (verdict.intentRequired) {
      const intent = await this.intents.begin(verdict, tool, { stepId: o.stepId, runId: o.runId });
      intentId = intent.intentId;
      await this.intents.markEffectSent(intentId);
    }
    return { verdict, intentId };
  }

  /**
   * Runs `fn` only if the sidecar allows the call (see `admit`). A high-risk
   * call's intent is closed `completed`, or `error` when `fn` throws
   * (rethrown).
   */
  async guard<T>(tool: string, args: Arguments, fn: () => T | Promise<T>, o: GuardRunOptions<T> = {}): Promise<T> {
    const { intentId } = await this.admit(tool, args, o);
    if (intentId === null) return await fn();
    let result: T;
    try {
      result = await fn();
    } catch (err) {
      await this.intents.complete(intentId, "error", describeError(err)).catch((e) => this.closeFailed(intentId, e));
      throw err;
    }
    // The effect happened: failing to record that must not make the caller
    // believe it did not (and run it again). The intent stays effect-sent,
    // which resume reports as `uncertain`.
    const failure = o.failureOf?.(result);
    await this.intents
      .complete(intentId, failure === undefined ? "completed" : "error", failure)
      .catch((e) => this.closeFailed(intentId, e));
    return result;
  }

  private closeFailed(intentId: string, err: unknown): void {
    if (!(err instanceof ToolgateError)) throw err;
    if (this.options.onCloseFailure) return this.options.onCloseFailure(intentId, err);
    console.warn(
      `toolgate: could not close intent ${intentId} (it stays effect-sent, \`uncertain\` on resume): ${err.message}`,
    );
  }

  private surfaceWarning(tool: string, verdict: Verdict): void {
    if (!verdict.warning) return;
    const message = `toolgate: ${tool}: ${verdict.warning} (decision ${verdict.decisionId})`;
    (this.options.onWarning ?? ((m) => console.warn(m)))(message, verdict);
  }

  private workspaceOp(op: string, path: string, stepId?: string, content?: string): Promise<unknown> {
    const body: Record<string, unknown> = { run_id: this.runId, path };
    if (content !== undefined) {
      if (typeof content !== "string") throw new TypeError("content must be a string (the workspace holds UTF-8 text)");
      body.content = content;
    }
    if (stepId !== undefined) body.step_id = stepId;
    return this.request({ method: "POST", path: `/v1/workspace/${op}`, body });
  }

  private traceHeaders(explicit: TraceContext | undefined): Record<string, string> {
    const ctx = explicit ?? this.options.traceContext?.();
    const headers: Record<string, string> = {};
    if (ctx?.traceparent) headers.traceparent = ctx.traceparent;
    if (ctx?.traceparent && ctx.tracestate) headers.tracestate = ctx.tracestate;
    return headers;
  }

  private async request(step: Http): Promise<unknown> {
    let url = this.url + step.path;
    if (step.query) url += `?${new URLSearchParams(step.query).toString()}`;
    const headers: Record<string, string> = { accept: "application/json", ...this.traceHeaders(step.trace) };
    if (step.body !== undefined) headers["content-type"] = "application/json";
    let response: Response;
    let text: string;
    try {
      response = await this.fetchFn(url, {
        method: step.method,
        headers,
        body: step.body === undefined ? undefined : JSON.stringify(step.body),
        signal: AbortSignal.timeout(step.timeoutMs ?? this.timeoutMs),
        redirect: "error",
      });
      text = await response.text();
    } catch (err) {
      const why = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      throw new SidecarUnreachable(`no answer from the toolgate sidecar at ${this.url}: ${why}`, err);
    }
    let payload: unknown;
    try {
      payload = JSON.parse(text);
    } catch {
      payload = undefined;
    }
    if (response.ok) {
      if (payload === undefined) throw new ProtocolError(`HTTP ${response.status} answer is not JSON`, response.status);
      return payload;
    }
    throw errorFromResponse(response.status, payload);
  }
}

/** Bounded `detail` for an intent closed with `error`. */
function describeError(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return text.slice(0, MAX_DETAIL_CHARS);
}
