"""The blocking and the asyncio client. Both run the same protocol steps
from :mod:`toolgate._ops`; they differ only in how a step is carried out."""

from __future__ import annotations

import inspect
import logging
import os
import uuid
from typing import Any, Awaitable, Callable, Mapping, Optional, TypeVar, Union

import httpx

try:  # The caller's trace continues in the sidecar when OpenTelemetry is there.
    from opentelemetry import propagate as _otel_propagate
except ImportError:  # pragma: no cover - optional
    _otel_propagate = None

from . import _ops
from .errors import ProtocolError, ToolgateError
from .types import (
    Admission,
    Approval,
    Batch,
    Cancellation,
    PodCancellation,
    FileContent,
    FileStat,
    Intent,
    Listing,
    RunStatus,
    Verdict,
    Written,
)

T = TypeVar("T")

#: Environment variable the admission webhook sets in agent containers.
URL_ENV = "TOOLGATE_URL"
#: Header naming the run on the sidecar's MCP gateway (``$TOOLGATE_URL/mcp/NAME``):
#: an MCP client that sends it with ``client.run_id`` joins this client's run.
RUN_ID_HEADER = "X-Toolgate-Run-Id"
DEFAULT_TIMEOUT = 10.0

logger = logging.getLogger("toolgate")


def _resolve_url(url: Optional[str]) -> str:
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise ValueError(f"no sidecar URL: pass url= or set ${URL_ENV}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"sidecar URL must be http(s)://host:port, got {url!r}")
    return url.rstrip("/")


def _log_close_failure(intent_id: str, exc: BaseException) -> None:
    logger.warning("toolgate: could not close intent %s (it stays effect-sent, `uncertain` on resume): %s",
                   intent_id, exc)


def _trace_headers() -> dict[str, str]:
    """The caller's current trace context as W3C `traceparent`/`tracestate`
    headers, when `opentelemetry-api` is importable (nothing otherwise)."""
    if _otel_propagate is None:
        return {}
    carrier: dict[str, str] = {}
    _otel_propagate.inject(carrier)
    return carrier


class _Base:
    """Settings shared by both clients."""

    def __init__(self, url: Optional[str], run_id: Optional[str], timeout: float) -> None:
        self.url = _resolve_url(url)
        self.run_id = run_id or str(uuid.uuid4())
        self.timeout = float(timeout)

    def _http_args(self) -> dict[str, Any]:
        # The sidecar is on loopback: proxy settings from the environment
        # must never route (or leak) these requests elsewhere.
        return {"base_url": self.url, "timeout": self.timeout, "trust_env": False,
                "headers": {"Accept": "application/json"}}

    def _request_args(self, step: _ops.Http) -> dict[str, Any]:
        args: dict[str, Any] = {}
        trace = _trace_headers()
        if trace:
            args["headers"] = trace
        if step.body is not None:
            args["json"] = step.body  # also sets Content-Type: application/json
        if step.params is not None:
            args["params"] = dict(step.params)
        if step.timeout is not None:
            args["timeout"] = step.timeout
        return args

    @staticmethod
    def _decode(response: httpx.Response) -> Any:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.is_success:
            if payload is None:
                raise ProtocolError(f"HTTP {response.status_code} answer is not JSON", status=response.status_code)
            return payload
        raise _ops.error_from_response(response.status_code, payload)

    def _run_id(self, run_id: Optional[str]) -> str:
        return run_id or self.run_id


class Client(_Base):
    """Blocking client of the sidecar at ``url`` (default ``$TOOLGATE_URL``)
    for one agent run (``run_id``, default a fresh UUID)."""

    def __init__(self, url: Optional[str] = None, run_id: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(url, run_id, timeout)
        self._http = httpx.Client(**self._http_args())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drive(self, op: _ops.Op[T]) -> T:
        """Runs one protocol operation with blocking I/O."""
        to_send: Any = None
        to_throw: Optional[BaseException] = None
        while True:
            try:
                step = op.throw(to_throw) if to_throw is not None else op.send(to_send)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            to_send, to_throw = None, None
            try:
                to_send = self._step(step)
            except BaseException as exc:  # handed to the operation, which decides
                to_throw = exc

    def _step(self, step: Any) -> Any:
        if isinstance(step, _ops.Http):
            try:
                response = self._http.request(step.method, step.path, **self._request_args(step))
            except httpx.TransportError as exc:
                raise _ops.unreachable(self.url, exc) from exc
            return self._decode(response)
        if isinstance(step, _ops.CallFn):
            return step.fn()
        if isinstance(step, _ops.Now):
            return _ops.monotonic()
        raise TypeError(f"unknown step {step!r}")

    # ---- decisions ----

    def authorize(self, tool: str, arguments: Mapping[str, Any], action: Optional[str] = None,
                  step_id: Optional[str] = None) -> Verdict:
        """Asks whether ``tool`` may run with ``arguments``: the verdict."""
        return self._drive(_ops.authorize(self.run_id, tool, arguments, action, step_id))

    def guard(self, tool: str, arguments: Mapping[str, Any], fn: Callable[[], T], action: Optional[str] = None,
              step_id: Optional[str] = None, approval_timeout: float = 0) -> T:
        """Runs ``fn()`` only if the sidecar allows the call.

        Deny raises :class:`~toolgate.Denied`; escalate raises
        :class:`~toolgate.ApprovalRequired`, unless ``approval_timeout > 0``:
        then it waits that long for a human and asks again. A high-risk call
        gets an intent (pending, then effect-sent) before ``fn`` runs, closed
        ``completed``, or ``error`` if ``fn`` raises (re-raised)."""
        return self._drive(_ops.guard(self.run_id, tool, arguments, fn, action, step_id, approval_timeout,
                                      self.timeout, _log_close_failure))

    def admit(self, tool: str, arguments: Mapping[str, Any], action: Optional[str] = None,
              step_id: Optional[str] = None, approval_timeout: float = 0) -> Admission:
        """The first half of :meth:`guard`, for frameworks that run the call
        themselves: raises ``Denied``/``ApprovalRequired``, else returns the
        verdict and the begun, effect-sent intent of a high-risk call, which
        the caller closes with :meth:`complete_intent`."""
        return self._drive(_ops.admit(self.run_id, tool, arguments, action, step_id, approval_timeout,
                                      self.timeout))

    # ---- approvals ----

    def authorize_batch(self, calls: Any, run_id: Optional[str] = None) -> Batch:
        """Decides several calls at once; run them concurrently only when
        ``parallel`` is true, else one by one by their own verdicts."""
        return self._drive(_ops.authorize_batch(self._run_id(run_id), calls))

    def run_status(self, run_id: Optional[str] = None) -> RunStatus:
        """The run's heartbeat: cancellation, budgets used and left, open intents."""
        return self._drive(_ops.run_status(self._run_id(run_id)))

    def cancel_run(self, reason: Optional[str] = None, run_id: Optional[str] = None) -> Cancellation:
        """Cancels the run durably: every later call of it is refused."""
        return self._drive(_ops.cancel_run(self._run_id(run_id), reason))

    def cancel_pod(self, reason: Optional[str] = None) -> PodCancellation:
        """Stops every run of this sidecar's pod, whatever run id it uses: a
        stop the agent cannot step around by starting another run."""
        return self._drive(_ops.cancel_pod(reason))

    def approval(self, approval_id: str, wait: float = 0) -> Approval:
        """The approval, after waiting up to ``wait`` seconds (≤ 60) for it to be resolved."""
        return self._drive(_ops.approval(approval_id, wait, self.timeout))

    def wait_for_approval(self, approval_id: str, timeout: float) -> str:
        """Waits up to ``timeout`` seconds: ``approved``, ``denied``,
        ``expired``, or ``pending`` when the time ran out."""
        return self._drive(_ops.wait_for_approval(approval_id, timeout, self.timeout))

    # ---- intents ----

    def begin_intent(self, verdict: Verdict, tool: str, step_id: Optional[str] = None,
                     verification_probe: Any = None) -> Intent:
        """Records that the call ``verdict`` allowed is about to happen."""
        return self._drive(_ops.begin_intent(self.run_id, verdict, tool, step_id, verification_probe))

    def mark_effect_sent(self, intent_id: str) -> Intent:
        return self._drive(_ops.mark_effect_sent(intent_id))

    def complete_intent(self, intent_id: str, outcome: str, detail: Optional[str] = None) -> Intent:
        """``outcome``: ``completed``, ``not_completed`` or ``error``."""
        return self._drive(_ops.complete_intent(intent_id, outcome, detail))

    def pending_intents(self, run_id: Optional[str] = None) -> list[Intent]:
        """Open intents of this run (or ``run_id``), for resuming after a crash."""
        return self._drive(_ops.pending_intents(self._run_id(run_id)))

    # ---- workspace ----

    def read(self, path: str, step_id: Optional[str] = None) -> FileContent:
        return self._drive(_ops.read(self.run_id, path, step_id))

    def write(self, path: str, content: str, step_id: Optional[str] = None) -> Written:
        return self._drive(_ops.write(self.run_id, path, content, step_id))

    def list(self, path: str = "", step_id: Optional[str] = None) -> Listing:
        return self._drive(_ops.list_dir(self.run_id, path, step_id))

    def stat(self, path: str = "", step_id: Optional[str] = None) -> FileStat:
        return self._drive(_ops.stat(self.run_id, path, step_id))


class AsyncClient(_Base):
    """:class:`Client` for asyncio: the same methods, as coroutines."""

    def __init__(self, url: Optional[str] = None, run_id: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(url, run_id, timeout)
        self._http = httpx.AsyncClient(**self._http_args())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _drive(self, op: _ops.Op[T]) -> T:
        """Runs one protocol operation with asyncio I/O."""
        to_send: Any = None
        to_throw: Optional[BaseException] = None
        while True:
            try:
                step = op.throw(to_throw) if to_throw is not None else op.send(to_send)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            to_send, to_throw = None, None
            try:
                to_send = await self._step(step)
            except BaseException as exc:  # handed to the operation, which decides
                to_throw = exc

    async def _step(self, step: Any) -> Any:
        if isinstance(step, _ops.Http):
            try:
                response = await self._http.request(step.method, step.path, **self._request_args(step))
            except httpx.TransportError as exc:
                raise _ops.unreachable(self.url, exc) from exc
            return self._decode(response)
        if isinstance(step, _ops.CallFn):
            result = step.fn()
            if inspect.isawaitable(result):
                result = await result
            return result
        if isinstance(step, _ops.Now):
            return _ops.monotonic()
        raise TypeError(f"unknown step {step!r}")

    async def authorize(self, tool: str, arguments: Mapping[str, Any], action: Optional[str] = None,
                        step_id: Optional[str] = None) -> Verdict:
        return await self._drive(_ops.authorize(self.run_id, tool, arguments, action, step_id))

    async def guard(self, tool: str, arguments: Mapping[str, Any],
                    fn: Callable[[], Union[T, Awaitable[T]]], action: Optional[str] = None,
                    step_id: Optional[str] = None, approval_timeout: float = 0) -> T:
        """:meth:`Client.guard`; ``fn`` may be sync or async."""
        return await self._drive(_ops.guard(self.run_id, tool, arguments, fn, action, step_id, approval_timeout,
                                            self.timeout, _log_close_failure))

    async def admit(self, tool: str, arguments: Mapping[str, Any], action: Optional[str] = None,
                    step_id: Optional[str] = None, approval_timeout: float = 0) -> Admission:
        return await self._drive(_ops.admit(self.run_id, tool, arguments, action, step_id, approval_timeout,
                                            self.timeout))

    async def authorize_batch(self, calls: Any, run_id: Optional[str] = None) -> Batch:
        return await self._drive(_ops.authorize_batch(self._run_id(run_id), calls))

    async def run_status(self, run_id: Optional[str] = None) -> RunStatus:
        return await self._drive(_ops.run_status(self._run_id(run_id)))

    async def cancel_run(self, reason: Optional[str] = None, run_id: Optional[str] = None) -> Cancellation:
        return await self._drive(_ops.cancel_run(self._run_id(run_id), reason))

    async def cancel_pod(self, reason: Optional[str] = None) -> PodCancellation:
        return await self._drive(_ops.cancel_pod(reason))

    async def approval(self, approval_id: str, wait: float = 0) -> Approval:
        return await self._drive(_ops.approval(approval_id, wait, self.timeout))

    async def wait_for_approval(self, approval_id: str, timeout: float) -> str:
        return await self._drive(_ops.wait_for_approval(approval_id, timeout, self.timeout))

    async def begin_intent(self, verdict: Verdict, tool: str, step_id: Optional[str] = None,
                           verification_probe: Any = None) -> Intent:
        return await self._drive(_ops.begin_intent(self.run_id, verdict, tool, step_id, verification_probe))

    async def mark_effect_sent(self, intent_id: str) -> Intent:
        return await self._drive(_ops.mark_effect_sent(intent_id))

    async def complete_intent(self, intent_id: str, outcome: str, detail: Optional[str] = None) -> Intent:
        return await self._drive(_ops.complete_intent(intent_id, outcome, detail))

    async def pending_intents(self, run_id: Optional[str] = None) -> list[Intent]:
        return await self._drive(_ops.pending_intents(self._run_id(run_id)))

    async def read(self, path: str, step_id: Optional[str] = None) -> FileContent:
        return await self._drive(_ops.read(self.run_id, path, step_id))

    async def write(self, path: str, content: str, step_id: Optional[str] = None) -> Written:
        return await self._drive(_ops.write(self.run_id, path, content, step_id))

    async def list(self, path: str = "", step_id: Optional[str] = None) -> Listing:
        return await self._drive(_ops.list_dir(self.run_id, path, step_id))

    async def stat(self, path: str = "", step_id: Optional[str] = None) -> FileStat:
        return await self._drive(_ops.stat(self.run_id, path, step_id))


__all__ = ["AsyncClient", "Client", "RUN_ID_HEADER", "ToolgateError", "URL_ENV"]
