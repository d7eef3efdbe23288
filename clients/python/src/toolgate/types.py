"""What the sidecar answers, as frozen dataclasses. Fields the sidecar adds
in a later release land in ``extra`` instead of breaking the parse; a
missing required field is a :class:`~toolgate.errors.ProtocolError`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence, TypeVar

from .errors import ProtocolError

T = TypeVar("T")


def _no_extra() -> Mapping[str, Any]:
    return MappingProxyType({})


def parse(cls: type[T], data: Any, **overrides: Any) -> T:
    """Builds dataclass ``cls`` from a JSON object: fields without a default
    are required, unknown keys go to ``extra``. ``overrides`` replace parsed
    values (used for nested lists)."""
    if not isinstance(data, Mapping):
        raise ProtocolError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    kwargs: dict[str, Any] = {}
    known = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == "extra":
            continue
        known.add(f.name)
        if f.name in overrides:
            kwargs[f.name] = overrides[f.name]
        elif f.name in data:
            kwargs[f.name] = data[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"sidecar answer lacks `{f.name}` ({cls.__name__})")
    if any(f.name == "extra" for f in dataclasses.fields(cls)):  # type: ignore[arg-type]
        kwargs["extra"] = MappingProxyType({k: v for k, v in data.items() if k not in known})
    return cls(**kwargs)


@dataclass(frozen=True)
class Verdict:
    """The answer of ``POST /v1/authorize``."""

    decision_id: str
    verdict: str
    """``allow``, ``deny`` or ``escalate``."""
    reason: str
    policy_version: str
    risk: str
    """``low``, ``write`` or ``high``."""
    intent_required: bool
    """Allowed and high risk: record an intent before the effect."""
    args_digest: str
    call_digest: str
    matched_rule: Optional[str] = None
    approval_id: Optional[str] = None
    """Set on ``escalate`` (and on allows/denies an approval decided)."""
    enforced: bool = True
    """False under a ``warn`` or ``dryRun`` profile: the call is allowed and
    ``would_*`` say what enforcement would have answered."""
    would_verdict: Optional[str] = None
    would_reason: Optional[str] = None
    would_rule: Optional[str] = None
    warning: Optional[str] = None
    """Under ``warn``: what enforcement would not have allowed (the client
    also emits it as a :class:`~toolgate.PolicyWarning`)."""
    flow_labels_set: Sequence[str] = ()
    """Flow labels this allowed call set on its run (``spec.flows``)."""
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"

    @property
    def denied(self) -> bool:
        return self.verdict == "deny"

    @property
    def escalated(self) -> bool:
        return self.verdict == "escalate"


@dataclass(frozen=True)
class Intent:
    """An intent row (``POST /v1/intents`` answers only ``intent_id`` and
    ``status``; the other calls answer the whole row)."""

    intent_id: str
    status: str
    """``pending``, ``completed``, ``not_completed`` or ``error``."""
    run_id: Optional[str] = None
    step_id: Optional[str] = None
    tool: Optional[str] = None
    decision_id: Optional[str] = None
    args_digest: Optional[str] = None
    call_digest: Optional[str] = None
    risk: Optional[str] = None
    detail: Optional[str] = None
    created_at: Optional[str] = None
    effect_sent_at: Optional[str] = None
    completed_at: Optional[str] = None
    resume: Optional[str] = None
    """In ``pending_intents``: ``safe_to_retry`` (the effect was never sent)
    or ``uncertain`` (it may have happened)."""
    verification_probe: Any = None
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


APPROVAL_STATUSES: tuple[str, ...] = ("pending", "approved", "denied", "expired", "cancelled")
"""Every approval status, as the sidecar spells it (the Rust contract's
``ApprovalStatus``; a test checks the two agree). Only ``pending`` is open."""


@dataclass(frozen=True)
class Approval:
    """An approval row, as ``GET /v1/approvals/{id}`` answers it."""

    approval_id: str
    status: str
    """One of :data:`APPROVAL_STATUSES`: ``pending``, ``approved``, ``denied``,
    ``expired`` or ``cancelled`` (its run, or a scope holding it, was stopped)."""
    tool: Optional[str] = None
    run_id: Optional[str] = None
    resolved_by: Optional[str] = None
    reason: Optional[str] = None
    expires_at: Optional[str] = None
    consumed_at: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class FileContent:
    """``workspace.read``: a UTF-8 file and where its content came from."""

    decision_id: str
    path: str
    content: str
    provenance: str
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class Written:
    """``workspace.write``: bytes written."""

    decision_id: str
    path: str
    bytes: int
    provenance: str
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class Entry:
    """One directory entry."""

    name: str
    kind: str
    provenance: str
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class Listing:
    """``workspace.list``: a directory's entries, sorted by name."""

    decision_id: str
    path: str
    entries: tuple[Entry, ...]
    provenance: str
    truncated: bool = False
    skipped_non_utf8: int = 0
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class FileStat:
    """``workspace.stat``."""

    decision_id: str
    path: str
    kind: str
    size: int
    provenance: str
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class Batch:
    """``POST /v1/authorize/batch``: each call's own verdict, and whether the
    calls may run concurrently (only if every one is allowed, enforced,
    read-only and parallel-safe, within the run's budget)."""

    parallel: bool
    reason: str
    """``batch_parallel``, or why not: ``batch_not_read_only``,
    ``batch_budget``, ``batch_denied``, ``batch_escalated``, ..."""
    verdicts: tuple[Verdict, ...]
    call_index: Optional[int] = None
    """The first call that keeps the batch sequential."""
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class FlowLabel:
    """A flow label a run carries, and the decision whose call set it."""

    label: str
    decision_id: str
    set_at: str
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class RunStatus:
    """``GET /v1/runs/{run_id}``: check it between steps; stop when
    ``cancel_requested``."""

    run_id: str
    cancel_requested: bool
    budgets: Mapping[str, Any]
    """``calls``, ``high_risk_calls``, ``run_seconds`` of the run, ``pod_calls`` and
    ``pod_high_risk_calls`` of its pod (``spec.budgets.perPod``): each ``{used, limit, left}``
    (``limit``/``left`` are ``None`` when unlimited)."""
    open_intents: tuple[Intent, ...] = ()
    cancel_requested_at: Optional[str] = None
    cancel_reason: Optional[str] = None
    cancelled_by: Optional[str] = None
    """Who stopped the run (the CLI's ``--by``, or the operator)."""
    cancelled_scope: Optional[str] = None
    """When a wider stop holds the run: ``pod NAME``, ``profile NAME`` or
    ``namespace``; ``cancel_requested_at`` and ``cancel_reason`` are then its."""
    flow_labels: Optional[tuple[FlowLabel, ...]] = None
    """The flow labels the run (or, with ``flows.scope: pod``, its pod)
    carries, oldest first; ``None`` when the profile declares no flows."""
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class PodCancellation:
    """``POST /v1/pod/cancel``: every run of this sidecar's pod stopped,
    whatever run id it uses."""

    scope: str
    cancel_requested_at: str
    newly_cancelled: bool
    approvals_cancelled: int
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class Cancellation:
    """``POST /v1/runs/{run_id}/cancel``."""

    run_id: str
    cancel_requested_at: str
    newly_cancelled: bool
    approvals_cancelled: int
    extra: Mapping[str, Any] = field(default_factory=_no_extra, compare=False)


@dataclass(frozen=True)
class Admission:
    """A call that may run now: its allowing verdict, and the intent (begun
    and marked effect-sent) when the call is high risk. Close it with
    ``complete_intent`` after the effect."""

    verdict: Verdict
    intent_id: Optional[str] = None
