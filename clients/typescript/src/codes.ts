/**
 * The sidecar's stable error codes (docs/sidecar.md, generated from
 * `toolgate_contract::errors`; a test checks this list against that table),
 * plus the two codes this client reports itself.
 */
export const ErrorCode = {
  INVALID_REQUEST: "invalid_request",
  INVALID_RUN_ID: "invalid_run_id",
  WORKSPACE_INVALID_PATH: "workspace_invalid_path",
  WORKSPACE_INVALID_ID: "workspace_invalid_id",
  WORKSPACE_NOT_TEXT: "workspace_not_text",
  WORKSPACE_WRONG_KIND: "workspace_wrong_kind",
  WORKSPACE_NOT_REGULAR_FILE: "workspace_not_regular_file",
  POLICY_DENIED: "policy_denied",
  APPROVAL_REQUIRED: "approval_required",
  DECISION_NOT_ALLOWED: "decision_not_allowed",
  INTENT_DIGEST_MISMATCH: "intent_digest_mismatch",
  ORIGIN_NOT_ALLOWED: "origin_not_allowed",
  WORKSPACE_ESCAPE: "workspace_escape",
  WORKSPACE_HARDLINK: "workspace_hardlink",
  MCP_UPSTREAM_NOT_ALLOWED: "mcp_upstream_not_allowed",
  NOT_FOUND: "not_found",
  NO_ROUTE: "no_route",
  WORKSPACE_NOT_FOUND: "workspace_not_found",
  MCP_UNKNOWN_SERVER: "mcp_unknown_server",
  CONFLICT: "conflict",
  INTENT_EXISTS: "intent_exists",
  WORKSPACE_CHANGED: "workspace_changed",
  APPROVAL_EXPIRED: "approval_expired",
  BODY_TOO_LARGE: "body_too_large",
  WORKSPACE_TOO_LARGE: "workspace_too_large",
  UNSUPPORTED_MEDIA_TYPE: "unsupported_media_type",
  HOST_NOT_ALLOWED: "host_not_allowed",
  WORKSPACE_IO: "workspace_io",
  WORKSPACE_UNUSABLE: "workspace_unusable",
  PERMISSION_DENIED: "permission_denied",
  STORED_DATA_CORRUPT: "stored_data_corrupt",
  MCP_UPSTREAM_UNAVAILABLE: "mcp_upstream_unavailable",
  STORE_UNAVAILABLE: "store_unavailable",
  WORKSPACE_BUSY: "workspace_busy",
  WORKSPACE_TIMEOUT: "workspace_timeout",
  // Reported by this client, never sent by the sidecar.
  SIDECAR_UNREACHABLE: "sidecar_unreachable",
  BAD_RESPONSE: "bad_response",
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Longest `?wait=` of one approval long-poll, in seconds (the sidecar caps it). */
export const MAX_WAIT_SECONDS = 60;
/** Header naming the run on the sidecar's MCP gateway (`$TOOLGATE_URL/mcp/NAME`). */
export const RUN_ID_HEADER = "x-toolgate-run-id";
/** Environment variable holding the sidecar's URL in every app container. */
export const URL_ENV = "TOOLGATE_URL";
/** Most calls one batch may hold. */
export const MAX_BATCH_CALLS = 64;
/** Longest `detail` sent when an intent closes with an error. */
export const MAX_DETAIL_CHARS = 1000;
