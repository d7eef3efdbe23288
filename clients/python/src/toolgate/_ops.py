"""The protocol, without I/O. Every operation is a generator that yields
steps (an HTTP request, a call of the guarded function, a clock read) and
receives their results; :class:`toolgate.Client` runs the steps with blocking
I/O and :class:`toolgate.AsyncClient` with ``await``, so the two clients share
every decision about what to send and what an answer means."""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Generator, Mapping, Optional, TypeVar

from .errors import (
    ApprovalRequired,
    Denied,
    PolicyWarning,
    ProtocolError,
    RunCancelled,
    SidecarUnreachable,
    ToolgateError,
    error_class,
)
from .types import (
    Admission,
    Approval,
    Batch,
    Cancellation,
    FlowLabel,
    PodCancellation,
    RunStatus,
    Entry,
    FileContent,
    FileStat,
    Intent,
    Listing,
    Verdict,
    Written,
    parse,
)

T = TypeVar("T")

#: The sidecar caps one approval long-poll at this many seconds.
MAX_WAIT_SECONDS = 60
#: Longest ``detail`` sent when an intent closes with an error.
MAX_DETAIL_CHARS = 1000
#: Step id the sidecar records for calls made outside any step.
NO_STEP = "-"


@dataclass(frozen=True)
class Http:
    """One request. ``timeout`` overrides the client's (long-polls)."""

    method: str
    path: str
    body: Optional[Mapping[str, Any]] = None
    params: Optional[Mapping[str, str]] = None
    timeout: Optional[float] = None


@dataclass(frozen=True)
class CallFn:
    """Run the guarded function (the driver awaits it if it is async)."""

    fn: Callable[[], Any]


@dataclass(frozen=True)
class Now:
    """Read the monotonic clock (kept out of the protocol for testability)."""


Step = Any  # Http | CallFn | Now
Op = Generator[Step, Any, T]


# ---- responses ----

def error_from_response(status: int, payload: Any) -> ToolgateError:
    """The typed exception for a non-2xx answer (``{error: {code, message}}``,
    plus ``verdict`` for a workspace call the policy refused)."""
    err = payload.get("error") if isinstance(payload, Mapping) else None
    if not isinstance(err, Mapping) or not isinstance(err.get("code"), str):
        return ProtocolError(f"HTTP {status} without an error envelope: {str(payload)[:200]}", status=status)
    code = err["code"]
    message = str(err.get("message", ""))
    if code in ("policy_denied", "approval_required"):
        verdict = None
        if isinstance(payload.get("verdict"), Mapping):
            try:
                verdict = parse(Verdict, payload["verdict"])
            except ProtocolError:
                verdict = None
        if code == "policy_denied":
            return Denied(verdict, message, status=status, body=payload)
        return ApprovalRequired(verdict, message, status=status, body=payload)
    return error_class(code)(message, code=code, status=status, body=payload)


def unreachable(url: str, exc: BaseException) -> SidecarUnreachable:
    return SidecarUnreachable(f"no answer from the toolgate sidecar at {url}: {type(exc).__name__}: {exc}")


def _intent(data: Any) -> Intent:
    if isinstance(data, Mapping) and "intent_id" not in data and "id" in data:
        data = {**data, "intent_id": data["id"]}
    return parse(Intent, data)


# ---- single requests ----

def authorize(run_id: str, tool: str, arguments: Mapping[str, Any], action: Optional[str],
              step_id: Optional[str]) -> Op[Verdict]:
    if not isinstance(arguments, Mapping):
        raise TypeError("arguments must be a mapping (a JSON object)")
    body: dict[str, Any] = {"tool": tool, "arguments": dict(arguments), "run_id": run_id}
    if action is not None:
        body["action"] = action
    if step_id is not None:
        body["step_id"] = step_id
    verdict = parse(Verdict, (yield Http("POST", "/v1/authorize", body)))
    _surface_warning(tool, verdict)
    return verdict


def _surface_warning(tool: str, verdict: Verdict) -> None:
    if verdict.warning:
        message = f"toolgate: {tool}: {verdict.warning} (decision {verdict.decision_id})"
        logging.getLogger("toolgate").warning("%s", message)
        warnings.warn(message, PolicyWarning, stacklevel=4)


#: Most calls one batch may hold.
MAX_BATCH_CALLS = 64


def authorize_batch(run_id: str, calls: Any) -> Op[Batch]:
    """``calls``: ``[{tool, arguments, action?, step_id?}, ...]``."""
    body_calls = []
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("arguments"), Mapping):
            raise TypeError("each call must be a mapping with `tool` and `arguments` (a JSON object)")
        body_calls.append({k: (dict(v) if k == "arguments" else v) for k, v in call.items()})
    data = yield Http("POST", "/v1/authorize/batch", {"run_id": run_id, "calls": body_calls})
    verdicts = data.get("verdicts") if isinstance(data, Mapping) else None
    if not isinstance(verdicts, list):
        raise ProtocolError("sidecar answer lacks `verdicts` (Batch)")
    parsed = tuple(parse(Verdict, v) for v in verdicts)
    for call, verdict in zip(body_calls, parsed):
        _surface_warning(str(call.get("tool")), verdict)
    return parse(Batch, data, verdicts=parsed)


def run_status(run_id: str) -> Op[RunStatus]:
    data = yield Http("GET", f"/v1/runs/{_seg(run_id)}")
    intents = data.get("open_intents") if isinstance(data, Mapping) else None
    if not isinstance(intents, list):
        raise ProtocolError("sidecar answer lacks `open_intents` (RunStatus)")
    labels = data.get("flow_labels")
    if labels is not None and not isinstance(labels, list):
        raise ProtocolError("`flow_labels` is not a list (RunStatus)")
    flow = None if labels is None else tuple(parse(FlowLabel, label) for label in labels)
    return parse(RunStatus, data, open_intents=tuple(_intent(i) for i in intents), flow_labels=flow)


def cancel_run(run_id: str, reason: Optional[str]) -> Op[Cancellation]:
    body: dict[str, Any] = {} if reason is None else {"reason": reason}
    return parse(Cancellation, (yield Http("POST", f"/v1/runs/{_seg(run_id)}/cancel", body)))


def cancel_pod(reason: Optional[str]) -> Op[PodCancellation]:
    body: dict[str, Any] = {} if reason is None else {"reason": reason}
    return parse(PodCancellation, (yield Http("POST", "/v1/pod/cancel", body)))


def approval(approval_id: str, wait: float, timeout: float) -> Op[Approval]:
    params = None
    http_timeout = None
    if wait > 0:
        secs = min(MAX_WAIT_SECONDS, max(1, math.ceil(wait)))
        params = {"wait": str(secs)}
        http_timeout = secs + timeout
    data = yield Http("GET", f"/v1/approvals/{_seg(approval_id)}", params=params, timeout=http_timeout)
    return parse(Approval, data)


def wait_for_approval(approval_id: str, timeout: float, http_timeout: float) -> Op[str]:
    """Long-polls (at most 60 s per request) until the approval is resolved
    or ``timeout`` seconds passed; the last status seen."""
    deadline = (yield Now()) + max(0.0, timeout)
    while True:
        remaining = deadline - (yield Now())
        a = yield from approval(approval_id, remaining if remaining >= 1 else 0, http_timeout)
        if a.status != "pending":
            return a.status
        if deadline - (yield Now()) <= 0:
            return a.status
        if remaining < 1:
            # Less than the 1 s granularity of ?wait= was left.
            return a.status


def begin_intent(run_id: str, verdict: Verdict, tool: str, step_id: Optional[str],
                 verification_probe: Any = None) -> Op[Intent]:
    body: dict[str, Any] = {
        "decision_id": verdict.decision_id,
        "run_id": run_id,
        "step_id": step_id or NO_STEP,
        "tool": tool,
        "args_digest": verdict.args_digest,
        "call_digest": verdict.call_digest,
    }
    if verification_probe is not None:
        body["verification_probe"] = verification_probe
    return _intent((yield Http("POST", "/v1/intents", body)))


def mark_effect_sent(intent_id: str) -> Op[Intent]:
    return _intent((yield Http("POST", f"/v1/intents/{_seg(intent_id)}/effect-sent", {})))


def complete_intent(intent_id: str, outcome: str, detail: Optional[str]) -> Op[Intent]:
    body: dict[str, Any] = {"outcome": outcome}
    if detail is not None:
        body["detail"] = detail[:MAX_DETAIL_CHARS]
    return _intent((yield Http("POST", f"/v1/intents/{_seg(intent_id)}/complete", body)))


def pending_intents(run_id: str) -> Op[list[Intent]]:
    data = yield Http("GET", "/v1/intents", params={"run_id": run_id, "status": "pending"})
    if not isinstance(data, Mapping) or not isinstance(data.get("intents"), list):
        raise ProtocolError("GET /v1/intents did not answer {intents: [...]}")
    return [_intent(i) for i in data["intents"]]


def _workspace(op: str, run_id: str, path: str, step_id: Optional[str], content: Optional[str] = None) -> Op[Any]:
    body: dict[str, Any] = {"run_id": run_id, "path": path}
    if content is not None:
        body["content"] = content
    if step_id is not None:
        body["step_id"] = step_id
    return (yield Http("POST", f"/v1/workspace/{op}", body))


def read(run_id: str, path: str, step_id: Optional[str]) -> Op[FileContent]:
    return parse(FileContent, (yield from _workspace("read", run_id, path, step_id)))


def write(run_id: str, path: str, content: str, step_id: Optional[str]) -> Op[Written]:
    if not isinstance(content, str):
        raise TypeError("content must be str (the workspace holds UTF-8 text)")
    return parse(Written, (yield from _workspace("write", run_id, path, step_id, content)))


def list_dir(run_id: str, path: str, step_id: Optional[str]) -> Op[Listing]:
    data = yield from _workspace("list", run_id, path, step_id)
    entries = data.get("entries") if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise ProtocolError("sidecar answer lacks `entries` (Listing)")
    return parse(Listing, data, entries=tuple(parse(Entry, e) for e in entries))


def stat(run_id: str, path: str, step_id: Optional[str]) -> Op[FileStat]:
    return parse(FileStat, (yield from _workspace("stat", run_id, path, step_id)))


# ---- the governed call ----

def admit(run_id: str, tool: str, arguments: Mapping[str, Any], action: Optional[str], step_id: Optional[str],
          approval_timeout: float, http_timeout: float) -> Op[Admission]:
    """Everything before the effect: authorize; on escalate wait up to
    ``approval_timeout`` for a human and ask again; on allow of a high-risk
    call begin the intent and mark it effect-sent. Raises ``Denied`` or
    ``ApprovalRequired`` unless the call may run now."""
    verdict = yield from authorize(run_id, tool, arguments, action, step_id)
    if verdict.escalated and approval_timeout > 0 and verdict.approval_id:
        status = yield from wait_for_approval(verdict.approval_id, approval_timeout, http_timeout)
        if status == "pending":
            raise ApprovalRequired(verdict, approval_status=status)
        # Approved: the one re-authorization it grants answers `approved`.
        # Denied: the sidecar answers `approval_denied`. Expired: a fresh
        # approval is asked for. Either way the sidecar decides again.
        verdict = yield from authorize(run_id, tool, arguments, action, step_id)
    if verdict.escalated:
        raise ApprovalRequired(verdict)
    if verdict.reason == "run_cancelled":
        raise RunCancelled(verdict)
    if not verdict.allowed:
        raise Denied(verdict)
    intent_id = None
    if verdict.intent_required:
        intent = yield from begin_intent(run_id, verdict, tool, step_id)
        intent_id = intent.intent_id
        yield from mark_effect_sent(intent_id)
    return Admission(verdict=verdict, intent_id=intent_id)


def describe_error(exc: BaseException) -> str:
    """Bounded ``detail`` for an intent closed with ``error``."""
    text = f"{type(exc).__name__}: {exc}"
    return text[:MAX_DETAIL_CHARS]


def guard(run_id: str, tool: str, arguments: Mapping[str, Any], fn: Callable[[], Any], action: Optional[str],
          step_id: Optional[str], approval_timeout: float, http_timeout: float,
          on_close_failure: Callable[[str, BaseException], None]) -> Op[Any]:
    admission = yield from admit(run_id, tool, arguments, action, step_id, approval_timeout, http_timeout)
    if admission.intent_id is None:
        return (yield CallFn(fn))
    try:
        result = yield CallFn(fn)
    except Exception as exc:
        try:
            yield from complete_intent(admission.intent_id, "error", describe_error(exc))
        except ToolgateError as close_exc:
            on_close_failure(admission.intent_id, close_exc)
        raise
    # The effect happened: a failure to record that must not make the caller
    # believe it did not (and run it again). The intent stays effect-sent,
    # which the resume flow reports as `uncertain`.
    try:
        yield from complete_intent(admission.intent_id, "completed", None)
    except ToolgateError as close_exc:
        on_close_failure(admission.intent_id, close_exc)
    return result


def _seg(value: str) -> str:
    """An id as one path segment."""
    from urllib.parse import quote

    if not isinstance(value, str) or not value:
        raise TypeError("ids must be non-empty strings")
    return quote(value, safe="")


def monotonic() -> float:
    return time.monotonic()
