package toolgate

import (
	"errors"
	"fmt"
)

// The sidecar's stable error codes (docs/sidecar.md, generated from
// toolgate_contract::errors). A test checks this list against that table.
const (
	CodeInvalidRequest          = "invalid_request"
	CodeInvalidRunID            = "invalid_run_id"
	CodeWorkspaceInvalidPath    = "workspace_invalid_path"
	CodeWorkspaceInvalidID      = "workspace_invalid_id"
	CodeWorkspaceNotText        = "workspace_not_text"
	CodeWorkspaceWrongKind      = "workspace_wrong_kind"
	CodeWorkspaceNotRegularFile = "workspace_not_regular_file"
	CodePolicyDenied            = "policy_denied"
	CodeApprovalRequired        = "approval_required"
	CodeDecisionNotAllowed      = "decision_not_allowed"
	CodeIntentDigestMismatch    = "intent_digest_mismatch"
	CodeOriginNotAllowed        = "origin_not_allowed"
	CodeWorkspaceEscape         = "workspace_escape"
	CodeWorkspaceHardlink       = "workspace_hardlink"
	CodeMCPUpstreamNotAllowed   = "mcp_upstream_not_allowed"
	CodeNotFound                = "not_found"
	CodeNoRoute                 = "no_route"
	CodeWorkspaceNotFound       = "workspace_not_found"
	CodeMCPUnknownServer        = "mcp_unknown_server"
	CodeConflict                = "conflict"
	CodeIntentExists            = "intent_exists"
	CodeWorkspaceChanged        = "workspace_changed"
	CodeApprovalExpired         = "approval_expired"
	CodeBodyTooLarge            = "body_too_large"
	CodeWorkspaceTooLarge       = "workspace_too_large"
	CodeUnsupportedMediaType    = "unsupported_media_type"
	CodeHostNotAllowed          = "host_not_allowed"
	CodeWorkspaceIO             = "workspace_io"
	CodeWorkspaceUnusable       = "workspace_unusable"
	CodePermissionDenied        = "permission_denied"
	CodeStoredDataCorrupt       = "stored_data_corrupt"
	CodeMCPUpstreamUnavailable  = "mcp_upstream_unavailable"
	CodeStoreUnavailable        = "store_unavailable"
	CodeWorkspaceBusy           = "workspace_busy"
	CodeWorkspaceTimeout        = "workspace_timeout"
)

// Codes the client itself reports (the Python client's spelling): no
// answer at all, or an answer it cannot read. Either way nothing may run.
const (
	CodeSidecarUnreachable = "sidecar_unreachable"
	CodeBadResponse        = "bad_response"
)

// sidecarCodes is every code of the sidecar's table, in its order.
var sidecarCodes = []string{
	CodeInvalidRequest, CodeInvalidRunID, CodeWorkspaceInvalidPath, CodeWorkspaceInvalidID,
	CodeWorkspaceNotText, CodeWorkspaceWrongKind, CodeWorkspaceNotRegularFile, CodePolicyDenied,
	CodeApprovalRequired, CodeDecisionNotAllowed, CodeIntentDigestMismatch, CodeOriginNotAllowed,
	CodeWorkspaceEscape, CodeWorkspaceHardlink, CodeMCPUpstreamNotAllowed, CodeNotFound, CodeNoRoute,
	CodeWorkspaceNotFound, CodeMCPUnknownServer, CodeConflict, CodeIntentExists, CodeWorkspaceChanged,
	CodeApprovalExpired, CodeBodyTooLarge, CodeWorkspaceTooLarge, CodeUnsupportedMediaType,
	CodeHostNotAllowed, CodeWorkspaceIO, CodeWorkspaceUnusable, CodePermissionDenied,
	CodeStoredDataCorrupt, CodeMCPUpstreamUnavailable, CodeStoreUnavailable, CodeWorkspaceBusy,
	CodeWorkspaceTimeout,
}

// SidecarCodes is every code the sidecar answers with, in its table's order.
func SidecarCodes() []string { return append([]string(nil), sidecarCodes...) }

// Error is every failure the client reports: a refusal by the sidecar
// (its {"error": {"code", "message"}} envelope), a verdict that does not
// let a guarded call run (CodePolicyDenied, CodeApprovalRequired), or no
// readable answer (CodeSidecarUnreachable, CodeBadResponse). None of them
// ever means the call may run.
type Error struct {
	// Code is the sidecar's stable code, or one of the client's own.
	Code string
	// Message is for people.
	Message string
	// Status is the HTTP status, 0 when there was no answer.
	Status int
	// Reason is the refusing verdict's reason for CodePolicyDenied and
	// CodeApprovalRequired (deny_rule, approval_denied, run_cancelled, ...).
	Reason string
	// Decision is the refusing verdict, when there was one.
	Decision *Decision
	// ApprovalStatus is the approval's last status seen, for an
	// escalation that was waited on and not resolved in time.
	ApprovalStatus string
	// Err is the underlying cause (a transport or context error).
	Err error
}

func (e *Error) Error() string {
	where := ""
	if e.Status != 0 {
		where = fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	return fmt.Sprintf("toolgate: %s%s: %s", e.Code, where, e.Message)
}

// Unwrap gives the cause, so errors.Is(err, context.DeadlineExceeded) works.
func (e *Error) Unwrap() error { return e.Err }

// Is matches another *Error by code, and by reason too when the target
// names one: errors.Is(err, ErrRunCancelled).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Code != e.Code {
		return false
	}
	return t.Reason == "" || t.Reason == e.Reason
}

// Sentinels for errors.Is; any code works through IsCode.
var (
	ErrDenied           = &Error{Code: CodePolicyDenied}
	ErrRunCancelled     = &Error{Code: CodePolicyDenied, Reason: ReasonRunCancelled}
	ErrApprovalRequired = &Error{Code: CodeApprovalRequired}
	ErrUnreachable      = &Error{Code: CodeSidecarUnreachable}
	ErrBadResponse      = &Error{Code: CodeBadResponse}
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrIntentExists     = &Error{Code: CodeIntentExists}
	ErrInvalidRequest   = &Error{Code: CodeInvalidRequest}
)

// ErrorCode is the code of the first *Error in err's chain, "" if none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsCode reports whether err carries the toolgate code.
func IsCode(err error, code string) bool {
	return err != nil && ErrorCode(err) == code
}

func badResponse(status int, format string, args ...any) *Error {
	return &Error{Code: CodeBadResponse, Status: status, Message: fmt.Sprintf(format, args...)}
}

// refusal is the error for a verdict that does not let a call run.
func refusal(d *Decision, approvalStatus string) *Error {
	if d.Escalated() {
		if approvalStatus == "" {
			approvalStatus = ApprovalPending
		}
		return &Error{
			Code: CodeApprovalRequired, Reason: d.Reason, Decision: d, ApprovalStatus: approvalStatus,
			Message: fmt.Sprintf("approval %s required (%s; approval %s)", d.ApprovalID, d.Reason, approvalStatus),
		}
	}
	rule := ""
	if d.MatchedRule != "" {
		rule = ", rule " + d.MatchedRule
	}
	return &Error{
		Code: CodePolicyDenied, Reason: d.Reason, Decision: d,
		Message: fmt.Sprintf("denied: %s%s (decision %s)", d.Reason, rule, d.DecisionID),
	}
}
