/**
 * TypeScript client for the toolgate sidecar: ask before every tool call,
 * wait for a human when the policy escalates, and record what high-risk
 * calls are about to do before they do it.
 */
export { Toolgate, DEFAULT_TIMEOUT_MS } from "./client.js";
export type {
  Arguments,
  AuthorizeRequest,
  BatchCall,
  CallOptions,
  GuardOptions,
  GuardRunOptions,
  ToolgateOptions,
  TraceContext,
} from "./client.js";
export { ErrorCode, MAX_BATCH_CALLS, MAX_DETAIL_CHARS, MAX_WAIT_SECONDS, RUN_ID_HEADER, URL_ENV } from "./codes.js";
export {
  ApprovalRequired,
  Conflict,
  Denied,
  Forbidden,
  InvalidRequest,
  NotFound,
  ProtocolError,
  RunCancelled,
  SidecarUnreachable,
  ToolgateError,
  Unavailable,
  WorkspaceError,
  errorClass,
} from "./errors.js";
export type { ErrorOptions } from "./errors.js";
export type * from "./types.js";
export { ANSWER_MEMBERS, ROW_MEMBERS } from "./types.js";
