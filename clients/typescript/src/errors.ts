/**
 * Every failure the client reports is a ToolgateError carrying the sidecar's
 * stable `code` (and the HTTP `status` when there was an answer). Nothing
 * here ever turns a failure into an allow.
 */
import { ErrorCode } from "./codes.js";
import type { Verdict } from "./types.js";

export interface ErrorOptions {
  code?: string;
  status?: number;
  body?: unknown;
  cause?: unknown;
}

/** A request the sidecar refused, or could not be asked at all. */
export class ToolgateError extends Error {
  readonly code: string;
  readonly status: number | undefined;
  readonly body: unknown;

  constructor(message: string, options: ErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? "error";
    this.status = options.status;
    this.body = options.body;
  }
}

/** No answer from the sidecar (refused, reset, timed out): the call must not run. */
export class SidecarUnreachable extends ToolgateError {
  constructor(message: string, cause?: unknown) {
    super(message, { code: ErrorCode.SIDECAR_UNREACHABLE, cause });
  }
}

/** The sidecar answered something this client cannot read. */
export class ProtocolError extends ToolgateError {
  constructor(message: string, status?: number) {
    super(message, { code: ErrorCode.BAD_RESPONSE, status });
  }
}

/** `invalid_request`, `invalid_run_id`, `body_too_large`, `unsupported_media_type`. */
export class InvalidRequest extends ToolgateError {}
/** `not_found`, `no_route`, `mcp_unknown_server`. */
export class NotFound extends ToolgateError {}
/** `conflict`, `intent_exists`, `approval_expired`. */
export class Conflict extends ToolgateError {}
/** `decision_not_allowed`, `intent_digest_mismatch`, `origin_not_allowed`, `host_not_allowed`, `mcp_upstream_not_allowed`. */
export class Forbidden extends ToolgateError {}
/** The sidecar cannot decide or record: `store_unavailable`, `permission_denied`, ... */
export class Unavailable extends ToolgateError {}
/** Any `workspace_*` code. */
export class WorkspaceError extends ToolgateError {}

/** The policy denied the call; it must not run. */
export class Denied extends ToolgateError {
  readonly verdict: Verdict | undefined;
  readonly reason: string;
  readonly decisionId: string | undefined;
  readonly matchedRule: string | null | undefined;

  constructor(verdict: Verdict | undefined, message?: string, options: ErrorOptions = {}) {
    const reason = verdict?.reason ?? ErrorCode.POLICY_DENIED;
    const rule = verdict?.matchedRule ? `, rule ${verdict.matchedRule}` : "";
    const decision = verdict ? ` (decision ${verdict.decisionId})` : "";
    super(message ?? `denied: ${reason}${rule}${decision}`, {
      ...options,
      code: ErrorCode.POLICY_DENIED,
    });
    this.verdict = verdict;
    this.reason = reason;
    this.decisionId = verdict?.decisionId;
    this.matchedRule = verdict?.matchedRule;
  }
}

/** The run was cancelled: this call and every later one of the run are refused. */
export class RunCancelled extends Denied {}

/** The policy escalated the call and no approval arrived (in time); it must not run yet. */
export class ApprovalRequired extends ToolgateError {
  readonly verdict: Verdict | undefined;
  readonly approvalId: string | null | undefined;
  readonly decisionId: string | undefined;
  readonly reason: string;
  readonly approvalStatus: string;

  constructor(
    verdict: Verdict | undefined,
    message?: string,
    options: ErrorOptions & { approvalStatus?: string } = {},
  ) {
    const approvalStatus = options.approvalStatus ?? "pending";
    const reason = verdict?.reason ?? ErrorCode.APPROVAL_REQUIRED;
    super(message ?? `approval ${verdict?.approvalId} required (${reason}; approval ${approvalStatus})`, {
      ...options,
      code: ErrorCode.APPROVAL_REQUIRED,
    });
    this.verdict = verdict;
    this.approvalId = verdict?.approvalId;
    this.decisionId = verdict?.decisionId;
    this.reason = reason;
    this.approvalStatus = approvalStatus;
  }
}

const BY_CODE: Record<string, new (message: string, options: ErrorOptions) => ToolgateError> = {
  invalid_request: InvalidRequest,
  invalid_run_id: InvalidRequest,
  body_too_large: InvalidRequest,
  unsupported_media_type: InvalidRequest,
  not_found: NotFound,
  no_route: NotFound,
  mcp_unknown_server: NotFound,
  conflict: Conflict,
  intent_exists: Conflict,
  approval_expired: Conflict,
  decision_not_allowed: Forbidden,
  intent_digest_mismatch: Forbidden,
  origin_not_allowed: Forbidden,
  host_not_allowed: Forbidden,
  mcp_upstream_not_allowed: Forbidden,
  store_unavailable: Unavailable,
  permission_denied: Unavailable,
  stored_data_corrupt: Unavailable,
  mcp_upstream_unavailable: Unavailable,
};

/** The error class for a sidecar code (ToolgateError for codes this client does not know). */
export function errorClass(code: string): new (message: string, options: ErrorOptions) => ToolgateError {
  if (code.startsWith("workspace_")) return WorkspaceError;
  return Object.hasOwn(BY_CODE, code) ? BY_CODE[code]! : ToolgateError;
}
