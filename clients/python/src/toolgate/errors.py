"""Exceptions. Every failure the client reports is a :class:`ToolgateError`
carrying the sidecar's stable ``code`` (and the HTTP ``status`` when there
was a response); nothing here ever turns a failure into an allow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .types import Verdict


class ToolgateError(Exception):
    """A request the sidecar refused, or could not be asked at all."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status: int | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.body: Mapping[str, Any] = body or {}

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.code}{where}: {self.message}"


class SidecarUnreachable(ToolgateError):
    """No answer from the sidecar (connection refused, reset, timed out).
    The call must not run: toolgate fails closed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="sidecar_unreachable")


class ProtocolError(ToolgateError):
    """The sidecar answered something this client cannot read (not JSON, or
    a required field missing)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, code="bad_response", status=status)


class InvalidRequest(ToolgateError):
    """The request was malformed: ``invalid_request``, ``invalid_run_id`` (a
    run id outside the sidecar's run-id alphabet), ``body_too_large``,
    ``unsupported_media_type``."""


class NotFound(ToolgateError):
    """Unknown approval, intent, endpoint or MCP server: ``not_found``,
    ``no_route``, ``mcp_unknown_server``."""


class Conflict(ToolgateError):
    """A state transition that is not possible now: ``conflict``,
    ``intent_exists``, ``approval_expired``."""


class Forbidden(ToolgateError):
    """The sidecar refused the request itself: ``decision_not_allowed``,
    ``intent_digest_mismatch``, ``origin_not_allowed``, ``host_not_allowed``,
    ``mcp_upstream_not_allowed``."""


class Unavailable(ToolgateError):
    """The sidecar cannot decide or record: ``store_unavailable``,
    ``mcp_upstream_unavailable``, and the faults that need an operator,
    ``permission_denied`` (the database refused the sidecar's role) and
    ``stored_data_corrupt`` (and ``no_bundle``, ``bundle_expired``,
    ``audit_unavailable``, which the sidecar reports as the reason of a deny
    verdict rather than as an error)."""


class WorkspaceError(ToolgateError):
    """A workspace operation failed: any ``workspace_*`` code
    (``workspace_invalid_path``, ``workspace_not_found``,
    ``workspace_escape``, ``workspace_busy``, ...)."""


class Denied(ToolgateError):
    """The policy denied the call; it must not run.

    ``reason`` is the verdict's reason (``deny_rule``, ``hardline_path``,
    ``approval_denied``, ``no_bundle``, ...), ``decision_id`` the logged
    decision, ``verdict`` the whole verdict (``None`` only if the sidecar sent
    none with a ``policy_denied`` error)."""

    def __init__(self, verdict: Verdict | None, message: str | None = None, *, status: int | None = None,
                 body: Mapping[str, Any] | None = None) -> None:
        self.verdict = verdict
        self.reason: str = verdict.reason if verdict else "policy_denied"
        self.decision_id: str | None = verdict.decision_id if verdict else None
        self.matched_rule: str | None = verdict.matched_rule if verdict else None
        if message is None:
            rule = f", rule {self.matched_rule}" if self.matched_rule else ""
            message = f"denied: {self.reason}{rule} (decision {self.decision_id})"
        super().__init__(message, code="policy_denied", status=status, body=body)


class RunCancelled(Denied):
    """The run was cancelled (by its operator, kubectl, or the agent itself):
    this call and every later one of the run are refused. Stop the run."""


class PolicyWarning(UserWarning):
    """A ``warn``-mode profile allowed a call that enforcement would not
    have allowed (emitted with :func:`warnings.warn`)."""


class ApprovalRequired(ToolgateError):
    """The policy escalated the call to a human and no approval arrived (in
    time); it must not run yet. Wait on ``approval_id`` and ask again."""

    def __init__(self, verdict: Verdict | None, message: str | None = None, *, approval_status: str = "pending",
                 status: int | None = None, body: Mapping[str, Any] | None = None) -> None:
        self.verdict = verdict
        self.approval_id: str | None = verdict.approval_id if verdict else None
        self.decision_id: str | None = verdict.decision_id if verdict else None
        self.reason: str = verdict.reason if verdict else "approval_required"
        self.approval_status = approval_status
        if message is None:
            message = f"approval {self.approval_id} required ({self.reason}; approval {approval_status})"
        super().__init__(message, code="approval_required", status=status, body=body)


_BY_CODE: dict[str, type[ToolgateError]] = {
    "invalid_request": InvalidRequest,
    "invalid_run_id": InvalidRequest,
    "body_too_large": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "not_found": NotFound,
    "no_route": NotFound,
    "mcp_unknown_server": NotFound,
    "conflict": Conflict,
    "intent_exists": Conflict,
    "approval_expired": Conflict,
    "decision_not_allowed": Forbidden,
    "intent_digest_mismatch": Forbidden,
    "origin_not_allowed": Forbidden,
    "host_not_allowed": Forbidden,
    "mcp_upstream_not_allowed": Forbidden,
    "no_bundle": Unavailable,
    "bundle_expired": Unavailable,
    "audit_unavailable": Unavailable,
    "store_unavailable": Unavailable,
    "permission_denied": Unavailable,
    "stored_data_corrupt": Unavailable,
    "mcp_upstream_unavailable": Unavailable,
}


def error_class(code: str) -> type[ToolgateError]:
    """The exception class for a sidecar error code (``ToolgateError`` for
    codes this client does not know)."""
    if code.startswith("workspace_"):
        return WorkspaceError
    return _BY_CODE.get(code, ToolgateError)
