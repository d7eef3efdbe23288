"""Python client for the toolgate sidecar: ask before every tool call,
wait for a human when the policy escalates, and record what high-risk calls
are about to do before they do it.

    import toolgate
    client = toolgate.Client()          # $TOOLGATE_URL, a fresh run id
    client.guard("bash", {"command": "git status"}, lambda: run("git status"))
"""

from .client import DEFAULT_TIMEOUT, RUN_ID_HEADER, URL_ENV, AsyncClient, Client
from .errors import (
    ApprovalRequired,
    Conflict,
    Denied,
    Forbidden,
    InvalidRequest,
    NotFound,
    PolicyWarning,
    ProtocolError,
    RunCancelled,
    SidecarUnreachable,
    ToolgateError,
    Unavailable,
    WorkspaceError,
)
from .types import (
    APPROVAL_STATUSES,
    Admission,
    Approval,
    Batch,
    Cancellation,
    Entry,
    FileContent,
    FileStat,
    FlowLabel,
    Intent,
    Listing,
    PodCancellation,
    RunStatus,
    Verdict,
    Written,
)

__version__ = "0.1.0"

__all__ = [
    "APPROVAL_STATUSES",
    "DEFAULT_TIMEOUT",
    "RUN_ID_HEADER",
    "URL_ENV",
    "Admission",
    "Approval",
    "ApprovalRequired",
    "AsyncClient",
    "Batch",
    "Cancellation",
    "Client",
    "Conflict",
    "Denied",
    "Entry",
    "FileContent",
    "FileStat",
    "Forbidden",
    "Intent",
    "InvalidRequest",
    "Listing",
    "NotFound",
    "PodCancellation",
    "PolicyWarning",
    "ProtocolError",
    "RunCancelled",
    "FlowLabel",
    "RunStatus",
    "SidecarUnreachable",
    "ToolgateError",
    "Unavailable",
    "Verdict",
    "WorkspaceError",
    "Written",
]
