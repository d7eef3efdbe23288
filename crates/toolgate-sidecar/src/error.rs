//! The sidecar's one error type: every failure is `{error: {code, message}}`
//! with a stable code and a fitting HTTP status. What the gate refuses is
//! its [`GateError`], with the gate's code; the rest is HTTP's own.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use toolgate_contract::agent_api::ErrorDetail;
use toolgate_gate::GateError;

/// The body of every refusal (the contract's envelope, with the gate's verdict).
type ErrorBody = toolgate_contract::agent_api::ErrorBody<toolgate_policy::Verdict>;

/// A request the sidecar refuses or cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// What the gate refused or failed.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The body is over the API's limit (`MAX_BODY_BYTES`).
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    /// A `Host` the agent API does not answer to.
    #[error("{0}")]
    HostNotAllowed(String),
    /// A browser `Origin`.
    #[error("{0}")]
    OriginNotAllowed(String),
    /// A body that is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// `/mcp/{server}` names no configured upstream.
    #[error("no MCP upstream named {0}")]
    McpUnknownServer(String),
    /// The upstream's address is refused by the policy.
    #[error("MCP upstream refused: {0}")]
    McpUpstreamNotAllowed(String),
    /// The upstream could not be reached or failed.
    #[error("MCP upstream unavailable: {0}")]
    McpUpstream(String),
    /// No such endpoint.
    #[error("no such endpoint")]
    NoRoute,
}

impl ApiError {
    /// Malformed input (`invalid_request`, the gate's code).
    pub fn invalid_request(message: String) -> Self {
        Self::Gate(GateError::InvalidRequest(message))
    }

    /// A run id outside the alphabet (`invalid_run_id`, the gate's code).
    pub fn invalid_run_id(message: String) -> Self {
        Self::Gate(GateError::InvalidRunId(message))
    }

    /// The stable code clients match on (from the contract's table).
    pub fn code(&self) -> &'static str {
        use toolgate_contract::errors as codes;
        match self {
            Self::Gate(e) => e.code(),
            Self::TooLarge(_) => codes::BODY_TOO_LARGE,
            Self::HostNotAllowed(_) => codes::HOST_NOT_ALLOWED,
            Self::OriginNotAllowed(_) => codes::ORIGIN_NOT_ALLOWED,
            Self::UnsupportedMediaType(_) => codes::UNSUPPORTED_MEDIA_TYPE,
            Self::NoRoute => codes::NO_ROUTE,
            Self::McpUnknownServer(_) => codes::MCP_UNKNOWN_SERVER,
            Self::McpUpstreamNotAllowed(_) => codes::MCP_UPSTREAM_NOT_ALLOWED,
            Self::McpUpstream(_) => codes::MCP_UPSTREAM_UNAVAILABLE,
        }
    }

    /// The HTTP status of this refusal: its code's, from the same table.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(toolgate_contract::errors::status_of(self.code()))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl From<toolgate_policy::PolicyError> for ApiError {
    fn from(e: toolgate_policy::PolicyError) -> Self {
        Self::Gate(e.into())
    }
}

impl From<toolgate_store::StoreError> for ApiError {
    fn from(e: toolgate_store::StoreError) -> Self {
        Self::Gate(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = ErrorDetail {
            code: self.code().to_owned(),
            message: self.to_string(),
        };
        let status = self.status();
        let verdict = match self {
            Self::Gate(GateError::PolicyDenied { verdict, .. }) => Some(*verdict),
            _ => None,
        };
        (status, axum::Json(ErrorBody { error, verdict })).into_response()
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;

    use toolgate_gate::workspace::WorkspaceError;
    use toolgate_policy::{Decision, Reason, Risk, Verdict};

    use super::*;

    /// A decision refusing a workspace write.
    fn refusing(verdict: Decision, reason: Reason) -> Box<toolgate_gate::AuthorizeResponse> {
        Box::new(toolgate_gate::AuthorizeResponse {
            decision_id: "d1".into(),
            verdict: Verdict {
                verdict,
                reason,
                matched_rule: Some("rule".into()),
                policy_version: "sha256:p".into(),
                risk: Risk::Write,
                intent_required: false,
                args_digest: "sha256:a".into(),
                call_digest: "sha256:c".into(),
                enforced: true,
                would_verdict: None,
                would_reason: None,
                would_rule: None,
                warning: None,
            },
            approval_id: (verdict == Decision::Escalate).then(|| "a1".into()),
            flow_labels_set: Vec::new(),
        })
    }

    async fn body_of(e: ApiError) -> serde_json::Value {
        let bytes = axum::body::to_bytes(e.into_response().into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// A policy refusal's body is the error plus the decision as
    /// `/v1/authorize` answers it; any other refusal's is the error alone.
    #[tokio::test]
    async fn a_policy_refusal_carries_its_verdict() {
        let denied = ApiError::Gate(GateError::PolicyDenied {
            code: toolgate_contract::errors::APPROVAL_REQUIRED,
            message: "workspace.write: escalate (escalate_rule)".into(),
            verdict: refusing(Decision::Escalate, Reason::EscalateRule),
        });
        assert_eq!(
            body_of(denied).await,
            serde_json::json!({
                "error": {
                    "code": "approval_required",
                    "message": "workspace.write: escalate (escalate_rule)",
                },
                "verdict": {
                    "decision_id": "d1", "verdict": "escalate", "reason": "escalate_rule",
                    "matched_rule": "rule", "policy_version": "sha256:p", "risk": "write",
                    "intent_required": false, "args_digest": "sha256:a",
                    "call_digest": "sha256:c", "enforced": true, "approval_id": "a1",
                },
            })
        );
        assert_eq!(
            body_of(ApiError::NoRoute).await,
            serde_json::json!({"error": {"code": "no_route", "message": "no such endpoint"}})
        );
    }

    /// Every refusal the sidecar can answer with, one per variant.
    fn every_refusal() -> Vec<ApiError> {
        let s = || "x".to_owned();
        let workspace = [
            WorkspaceError::InvalidPath("x"),
            WorkspaceError::InvalidId("run id"),
            WorkspaceError::Escape,
            WorkspaceError::Changed,
            WorkspaceError::NotFound,
            WorkspaceError::NotText,
            WorkspaceError::TooLarge,
            WorkspaceError::NotRegularFile,
            WorkspaceError::HardLink,
            WorkspaceError::WrongKind("x"),
            WorkspaceError::Io(ErrorKind::Other),
            WorkspaceError::BaseUnusable {
                path: s(),
                error: s(),
            },
        ];
        let gate = [
            GateError::InvalidRequest(s()),
            GateError::InvalidRunId(s()),
            GateError::NotFound(s()),
            GateError::IntentDigestMismatch(s()),
            GateError::DecisionNotAllowed(s()),
            GateError::Conflict(s()),
            GateError::IntentExists(s()),
            GateError::PolicyDenied {
                code: toolgate_contract::errors::POLICY_DENIED,
                message: s(),
                verdict: refusing(Decision::Deny, Reason::DenyRule),
            },
            GateError::PolicyDenied {
                code: toolgate_contract::errors::APPROVAL_REQUIRED,
                message: s(),
                verdict: refusing(Decision::Escalate, Reason::EscalateRule),
            },
            GateError::WorkspaceBusy(s()),
            GateError::WorkspaceTimeout(s()),
            GateError::ApprovalExpired(s()),
            GateError::StoreUnavailable(s()),
            GateError::StorePermissionDenied(s()),
            GateError::StoredDataCorrupt(s()),
        ];
        let http = [
            ApiError::TooLarge(1),
            ApiError::HostNotAllowed(s()),
            ApiError::OriginNotAllowed(s()),
            ApiError::UnsupportedMediaType(s()),
            ApiError::McpUnknownServer(s()),
            ApiError::McpUpstreamNotAllowed(s()),
            ApiError::McpUpstream(s()),
            ApiError::NoRoute,
        ];
        workspace
            .into_iter()
            .map(|w| ApiError::Gate(GateError::Workspace(w)))
            .chain(gate.into_iter().map(ApiError::Gate))
            .chain(http)
            .collect()
    }

    /// Every code the sidecar can return is in the contract's table, with
    /// the table's status; and every code of the table is one it returns.
    #[test]
    fn every_code_is_the_contract_s() {
        let mut seen = std::collections::BTreeSet::new();
        for e in every_refusal() {
            let entry = toolgate_contract::errors::lookup(e.code())
                .unwrap_or_else(|| panic!("{} is not in the contract's table", e.code()));
            assert_eq!(e.status().as_u16(), entry.status, "{}", e.code());
            seen.insert(e.code());
        }
        let table: std::collections::BTreeSet<&str> = toolgate_contract::errors::ALL
            .iter()
            .map(|e| e.code)
            .collect();
        assert_eq!(seen, table, "codes in the table the sidecar never returns");
    }

    /// A database refusal that is not an outage keeps its own code.
    #[test]
    fn store_faults_keep_their_codes() {
        use toolgate_store::StoreError;
        let cases = [
            (
                StoreError::LockTimeout("busy".into()),
                "store_unavailable",
                503,
            ),
            (
                StoreError::PermissionDenied("role".into()),
                "permission_denied",
                500,
            ),
            (
                StoreError::Corrupt("row".into()),
                "stored_data_corrupt",
                500,
            ),
        ];
        for (store, code, status) in cases {
            let e = ApiError::from(store);
            assert_eq!((e.code(), e.status().as_u16()), (code, status));
        }
    }
}
