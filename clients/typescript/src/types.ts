/**
 * What the sidecar answers, with its snake_case keys camelCased. Fields a
 * later sidecar adds are kept (camelCased too) rather than breaking the
 * parse; a missing required field, or a verdict outside allow/deny/escalate,
 * is a ProtocolError, so a malformed answer never reads as an allow.
 */
import { ProtocolError } from "./errors.js";

export type VerdictKind = "allow" | "deny" | "escalate";

/** The answer of `POST /v1/authorize`. */
export interface Verdict {
  decisionId: string;
  verdict: VerdictKind;
  reason: string;
  policyVersion: string;
  /** `low`, `write` or `high`. */
  risk: string;
  /** Allowed and high risk: record an intent before the effect. */
  intentRequired: boolean;
  argsDigest: string;
  callDigest: string;
  matchedRule: string | null;
  /** Set on escalate (and on allows/denies an approval decided). */
  approvalId: string | null;
  /** False under a `warn` or `dryRun` profile; `would*` then say what enforcement would answer. */
  enforced: boolean;
  wouldVerdict?: string | null;
  wouldReason?: string | null;
  wouldRule?: string | null;
  /** Under `warn`: what enforcement would not have allowed. */
  warning?: string | null;
  /** Flow labels this allowed call set on its run. */
  flowLabelsSet: string[];
}

/** An intent row (`begin` answers only `intentId` and `status`). */
export interface Intent {
  intentId: string;
  /** `pending`, `completed`, `not_completed` or `error`. */
  status: string;
  runId?: string;
  stepId?: string;
  tool?: string;
  decisionId?: string;
  argsDigest?: string;
  callDigest?: string;
  risk?: string;
  detail?: string | null;
  createdAt?: string;
  effectSentAt?: string | null;
  completedAt?: string | null;
  /** In `pending()`: `safe_to_retry` (never sent) or `uncertain` (may have happened). */
  resume?: string;
  verificationProbe?: unknown;
}

export type ApprovalStatus = "pending" | "approved" | "denied" | "expired" | "cancelled";

export interface Approval {
  approvalId: string;
  status: ApprovalStatus;
  tool?: string;
  runId?: string;
  resolvedBy?: string | null;
  reason?: string | null;
  expiresAt?: string;
  consumedAt?: string | null;
}

export interface Batch {
  /** True only when every call may run concurrently. */
  parallel: boolean;
  /** `batch_parallel`, or why not (`batch_denied`, `batch_escalated`, ...). */
  reason: string;
  /** The first call that keeps the batch sequential. */
  callIndex?: number | null;
  verdicts: Verdict[];
}

export interface Budget {
  used: number;
  limit: number | null;
  left: number | null;
}

export interface FlowLabel {
  label: string;
  decisionId: string;
  setAt: string;
}

export interface RunStatus {
  runId: string;
  cancelRequested: boolean;
  cancelRequestedAt?: string | null;
  cancelReason?: string | null;
  cancelledBy?: string | null;
  cancelledScope?: string | null;
  budgets: Record<string, Budget>;
  openIntents: Intent[];
  flowLabels?: FlowLabel[] | null;
}

export interface Cancellation {
  runId: string;
  cancelRequestedAt: string;
  newlyCancelled: boolean;
  approvalsCancelled: number;
}

export interface PodCancellation {
  scope: string;
  cancelRequestedAt: string;
  newlyCancelled: boolean;
  approvalsCancelled: number;
}

export interface FileContent {
  decisionId: string;
  path: string;
  content: string;
  provenance: string;
}

export interface Written {
  decisionId: string;
  path: string;
  bytes: number;
  provenance: string;
}

export interface Entry {
  name: string;
  kind: string;
  provenance: string;
}

export interface Listing {
  decisionId: string;
  path: string;
  entries: Entry[];
  provenance: string;
  truncated: boolean;
  skippedNonUtf8: number;
}

export interface FileStat {
  decisionId: string;
  path: string;
  kind: string;
  size: number;
  provenance: string;
}

/** A call that may run now, and its begun, effect-sent intent when high risk. */
export interface Admission {
  verdict: Verdict;
  intentId: string | null;
}

/**
 * The members of each answer as the sidecar writes them (snake_case): what
 * the interfaces above read, camelCased. The contract test checks each list
 * against docs/agent-api.openapi.json and test/types.ts checks it against
 * its interface, both ways, so neither side can gain a member alone.
 */
export const ANSWER_MEMBERS = {
  AuthorizeResponse: [
    "decision_id",
    "verdict",
    "reason",
    "matched_rule",
    "policy_version",
    "risk",
    "intent_required",
    "args_digest",
    "call_digest",
    "approval_id",
    "enforced",
    "would_verdict",
    "would_reason",
    "would_rule",
    "warning",
    "flow_labels_set",
  ],
  BatchResponse: ["parallel", "reason", "call_index", "verdicts"],
  RunStatus: [
    "run_id",
    "cancel_requested",
    "cancel_requested_at",
    "cancel_reason",
    "cancelled_by",
    "cancelled_scope",
    "budgets",
    "open_intents",
    "flow_labels",
  ],
  BudgetUse: ["used", "limit", "left"],
  CancelResponse: ["run_id", "cancel_requested_at", "newly_cancelled", "approvals_cancelled"],
  PodCancelResponse: ["scope", "cancel_requested_at", "newly_cancelled", "approvals_cancelled"],
  FlowLabel: ["label", "decision_id", "set_at"],
  FileRead: ["decision_id", "path", "content", "provenance"],
  FileWritten: ["decision_id", "path", "bytes", "provenance"],
  Listing: ["decision_id", "path", "entries", "provenance", "truncated", "skipped_non_utf8"],
  Entry: ["name", "kind", "provenance"],
  Stat: ["decision_id", "path", "kind", "size", "provenance"],
} as const;

/**
 * The members of the store rows the client reads (an intent as `pending()`
 * lists it, an approval): a part of each row, never a member it lacks.
 */
export const ROW_MEMBERS = {
  OpenIntent: [
    "intent_id",
    "status",
    "run_id",
    "step_id",
    "tool",
    "decision_id",
    "args_digest",
    "call_digest",
    "risk",
    "detail",
    "created_at",
    "effect_sent_at",
    "completed_at",
    "resume",
    "verification_probe",
  ],
  ApprovalView: ["approval_id", "status", "tool", "run_id", "resolved_by", "reason", "expires_at", "consumed_at"],
} as const;

// ---- parsing ----

type Json = Record<string, unknown>;
type Check = "string" | "boolean" | "number" | "object" | "array" | ((v: unknown) => boolean);

export function camel(key: string): string {
  return key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function fits(v: unknown, check: Check): boolean {
  if (typeof check === "function") return check(v);
  if (check === "array") return Array.isArray(v);
  if (check === "object") return isObject(v);
  return typeof v === check;
}

/**
 * Builds `name` from a JSON object: every key camelCased, `required` keys
 * present and of their type, `nested` values converted, `defaults` filled.
 * Nested values not named in `nested` are kept as the sidecar sent them
 * (tool arguments must not be renamed).
 */
function record<T>(
  name: string,
  data: unknown,
  required: Record<string, Check>,
  nested: Record<string, (v: unknown) => unknown> = {},
  defaults: Json = {},
): T {
  if (!isObject(data)) throw new ProtocolError(`expected a JSON object for ${name}, got ${describe(data)}`);
  for (const [key, check] of Object.entries(required)) {
    if (!(key in data)) throw new ProtocolError(`sidecar answer lacks \`${key}\` (${name})`);
    if (!fits(data[key], check)) throw new ProtocolError(`\`${key}\` of ${name} is malformed: ${describe(data[key])}`);
  }
  const out: Json = { ...defaults };
  for (const [key, value] of Object.entries(data)) {
    const convert = nested[key];
    out[camel(key)] = convert && value !== null && value !== undefined ? convert(value) : value;
  }
  return out as T;
}

function describe(v: unknown): string {
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 120 ? `${text.slice(0, 120)}...` : text;
}

function list<T>(name: string, each: (v: unknown) => T): (v: unknown) => T[] {
  return (v) => {
    if (!Array.isArray(v)) throw new ProtocolError(`\`${name}\` is not a list`);
    return v.map(each);
  };
}

const VERDICTS = new Set(["allow", "deny", "escalate"]);

export function parseVerdict(data: unknown): Verdict {
  return record<Verdict>(
    "Verdict",
    data,
    {
      decision_id: "string",
      verdict: (v) => typeof v === "string" && VERDICTS.has(v),
      reason: "string",
      policy_version: "string",
      risk: "string",
      intent_required: "boolean",
      args_digest: "string",
      call_digest: "string",
    },
    {},
    { matchedRule: null, approvalId: null, enforced: true, flowLabelsSet: [] },
  );
}

export function parseIntent(data: unknown): Intent {
  // The list answers `intent_id` and, for one release, `id`.
  if (isObject(data) && !("intent_id" in data) && "id" in data) data = { ...data, intent_id: data.id };
  return record<Intent>("Intent", data, { intent_id: "string", status: "string" });
}

export function parseApproval(data: unknown): Approval {
  return record<Approval>("Approval", data, { approval_id: "string", status: "string" });
}

export function parseBatch(data: unknown): Batch {
  return record<Batch>(
    "Batch",
    data,
    { parallel: "boolean", reason: "string", verdicts: "array" },
    { verdicts: list("verdicts", parseVerdict) },
  );
}

const parseBudget = (v: unknown): Budget => record<Budget>("Budget", v, { used: "number" });

export function parseRunStatus(data: unknown): RunStatus {
  return record<RunStatus>(
    "RunStatus",
    data,
    { run_id: "string", cancel_requested: "boolean", budgets: "object", open_intents: "array" },
    {
      budgets: (b) => Object.fromEntries(Object.entries(b as Json).map(([k, v]) => [camel(k), parseBudget(v)])),
      open_intents: list("open_intents", parseIntent),
      flow_labels: list("flow_labels", (v) =>
        record<FlowLabel>("FlowLabel", v, { label: "string", decision_id: "string", set_at: "string" }),
      ),
    },
  );
}

export function parseCancellation(data: unknown): Cancellation {
  return record<Cancellation>("Cancellation", data, {
    run_id: "string",
    cancel_requested_at: "string",
    newly_cancelled: "boolean",
    approvals_cancelled: "number",
  });
}

export function parsePodCancellation(data: unknown): PodCancellation {
  return record<PodCancellation>("PodCancellation", data, {
    scope: "string",
    cancel_requested_at: "string",
    newly_cancelled: "boolean",
    approvals_cancelled: "number",
  });
}

const FILE = { decision_id: "string", path: "string", provenance: "string" } as const;

export const parseFileContent = (d: unknown): FileContent =>
  record<FileContent>("FileContent", d, { ...FILE, content: "string" });
export const parseWritten = (d: unknown): Written => record<Written>("Written", d, { ...FILE, bytes: "number" });
export const parseFileStat = (d: unknown): FileStat =>
  record<FileStat>("FileStat", d, { ...FILE, kind: "string", size: "number" });
export const parseListing = (d: unknown): Listing =>
  record<Listing>(
    "Listing",
    d,
    { ...FILE, entries: "array" },
    { entries: list("entries", (e) => record<Entry>("Entry", e, { name: "string", kind: "string" })) },
    { truncated: false, skippedNonUtf8: 0 },
  );
