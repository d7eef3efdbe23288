//! The agent API's error codes, once: every `{"error": {"code", "message"}}`
//! the sidecar answers with, the HTTP status it comes with and what it
//! means. The sidecar takes both code and status from here, clients match
//! on these strings, and the table in `docs/sidecar.md` is generated from
//! [`ALL`] (a test keeps it in sync). One fault, one code: a database that
//! is down is `store_unavailable` wherever it is met, an oversized body
//! `body_too_large` (the webhook's word too).

/// One code of the agent API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiErrorCode {
    /// The stable snake_case code.
    pub code: &'static str,
    /// The HTTP status it is answered with.
    pub status: u16,
    /// What it means, for the docs table.
    pub meaning: &'static str,
}

macro_rules! api_errors {
    ($( $name:ident = $code:literal, $status:literal, $meaning:literal; )*) => {
        $(
            #[doc = $meaning]
            pub const $name: &str = $code;
        )*
        /// Every code of the agent API, in the order of the docs table.
        pub const ALL: &[ApiErrorCode] = &[
            $( ApiErrorCode { code: $code, status: $status, meaning: $meaning }, )*
        ];
    };
}

api_errors! {
    INVALID_REQUEST = "invalid_request", 400, "The request is malformed: not the JSON the endpoint takes, an unknown field, a value out of range.";
    INVALID_RUN_ID = "invalid_run_id", 400, "A run id outside the run-id alphabet (1-128 of a-z, 0-9, `.`, `_`, `:`, `-`).";
    WORKSPACE_INVALID_PATH = "workspace_invalid_path", 400, "A workspace path that is absolute, has `..`, NUL or another refused form.";
    WORKSPACE_INVALID_ID = "workspace_invalid_id", 400, "A run or tenant id that cannot name a workspace directory.";
    WORKSPACE_NOT_TEXT = "workspace_not_text", 400, "The file is not UTF-8 text.";
    WORKSPACE_WRONG_KIND = "workspace_wrong_kind", 400, "A directory where a file was expected, or the reverse.";
    WORKSPACE_NOT_REGULAR_FILE = "workspace_not_regular_file", 400, "A FIFO, socket or device: only regular files are served.";
    POLICY_DENIED = "policy_denied", 403, "A governed operation (the workspace API) the policy denied; the verdict is in the body.";
    APPROVAL_REQUIRED = "approval_required", 403, "A governed operation the policy escalated: wait on the approval in the verdict, then ask again.";
    DECISION_NOT_ALLOWED = "decision_not_allowed", 403, "An intent for a decision that allowed no call needing one.";
    INTENT_DIGEST_MISMATCH = "intent_digest_mismatch", 403, "An intent whose call is not the one its decision allowed.";
    ORIGIN_NOT_ALLOWED = "origin_not_allowed", 403, "A request carrying a browser `Origin`: web pages may not reach the agent API.";
    WORKSPACE_ESCAPE = "workspace_escape", 403, "A path that leaves the run's workspace (through `..` or a link).";
    WORKSPACE_HARDLINK = "workspace_hardlink", 403, "A file with more than one hard link (it may live outside the workspace too).";
    MCP_UPSTREAM_NOT_ALLOWED = "mcp_upstream_not_allowed", 403, "An MCP upstream outside the profile's egress or hardline rules, or no live bundle to check it with.";
    NOT_FOUND = "not_found", 404, "No such record in this tenant.";
    NO_ROUTE = "no_route", 404, "No such endpoint.";
    WORKSPACE_NOT_FOUND = "workspace_not_found", 404, "Nothing at that workspace path.";
    MCP_UNKNOWN_SERVER = "mcp_unknown_server", 404, "`/mcp/NAME` names no configured upstream.";
    CONFLICT = "conflict", 409, "The record changed under the request (an intent already completed, say).";
    INTENT_EXISTS = "intent_exists", 409, "The decision already has its intent.";
    WORKSPACE_CHANGED = "workspace_changed", 409, "The file changed between the decision and the operation.";
    APPROVAL_EXPIRED = "approval_expired", 410, "The approval expired before it was used.";
    BODY_TOO_LARGE = "body_too_large", 413, "The request body is over the API's limit.";
    WORKSPACE_TOO_LARGE = "workspace_too_large", 413, "The file is over the workspace API's size limit.";
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type", 415, "A body that is not `application/json`.";
    HOST_NOT_ALLOWED = "host_not_allowed", 421, "A `Host` the agent API does not answer to (DNS rebinding).";
    WORKSPACE_IO = "workspace_io", 500, "Any other I/O failure in the workspace (the OS error kind only).";
    WORKSPACE_UNUSABLE = "workspace_unusable", 500, "The tenant's workspace directory could not be created (at start-up).";
    PERMISSION_DENIED = "permission_denied", 500, "The database refused the sidecar's role: its credential is not the tenant's, or grants are missing.";
    STORED_DATA_CORRUPT = "stored_data_corrupt", 500, "A stored record does not parse: the database was written by something else.";
    MCP_UPSTREAM_UNAVAILABLE = "mcp_upstream_unavailable", 502, "The MCP upstream could not be reached or failed.";
    STORE_UNAVAILABLE = "store_unavailable", 503, "The database is down or timed out; nothing was decided or recorded.";
    WORKSPACE_BUSY = "workspace_busy", 503, "Every workspace I/O slot is taken; retry.";
    WORKSPACE_TIMEOUT = "workspace_timeout", 504, "A workspace operation took too long.";
}

/// The JSON Schema of an error code (`ErrorDetail::code`): a string, one
/// of [`ALL`]. The agent API's OpenAPI document takes its `ErrorCode` enum
/// from here, so a code added above reaches every client's contract test.
pub struct Code;

impl schemars::JsonSchema for Code {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ErrorCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let codes: Vec<&str> = ALL.iter().map(|e| e.code).collect();
        schemars::json_schema!({
            "description": "A stable error code of the agent API (see docs/sidecar.md).",
            "type": "string",
            "enum": codes,
        })
    }
}

/// The entry of `code`, if it is one of the agent API's.
pub fn lookup(code: &str) -> Option<&'static ApiErrorCode> {
    ALL.iter().find(|e| e.code == code)
}

/// The HTTP status of `code`; 500 for a code that is not in [`ALL`] (a
/// bug, which the sidecar's tests rule out).
pub fn status_of(code: &str) -> u16 {
    lookup(code).map_or(500, |e| e.status)
}

/// The docs table of [`ALL`] (Markdown), as `docs/sidecar.md` holds it.
pub fn markdown_table() -> String {
    let mut out = String::from("| status | code | meaning |\n|---|---|---|\n");
    for e in ALL {
        out.push_str(&format!(
            "| {} | `{}` | {} |\n",
            e.status, e.code, e.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_fault_one_code() {
        let mut codes: Vec<&str> = ALL.iter().map(|e| e.code).collect();
        codes.sort_unstable();
        let before = codes.len();
        codes.dedup();
        assert_eq!(codes.len(), before, "a code appears twice");
        for e in ALL {
            assert!(
                e.code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{} is not snake_case",
                e.code
            );
            assert!((400..600).contains(&e.status), "{}", e.code);
        }
        assert!(ALL.windows(2).all(|w| w[0].status <= w[1].status));
        assert_eq!(status_of(BODY_TOO_LARGE), 413);
        assert_eq!(status_of("made_up"), 500);
    }
}

#[cfg(test)]
mod docs {
    /// `docs/sidecar.md` holds exactly [`super::markdown_table`] between
    /// its `error-codes` markers; `TOOLGATE_BLESS=1` writes it there.
    #[test]
    fn the_docs_table_is_the_contract_s() {
        crate::doc_tables::assert_generated("error-codes", &super::markdown_table());
    }
}
