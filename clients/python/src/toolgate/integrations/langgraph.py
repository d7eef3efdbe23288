"""LangGraph (``langgraph`` 1.2, ``langgraph-prebuilt`` 1.1): a ``ToolNode``
whose tool calls run only when the sidecar allows them.

``ToolNode`` hands every tool call, in ``invoke`` and ``ainvoke`` alike, to
its ``wrap_tool_call`` / ``awrap_tool_call`` interceptor with an ``execute``
callback that runs the tool. :func:`tool_call_wrappers` builds that pair:
it asks the sidecar with the model's arguments (before LangGraph injects
state or runtime; no step id, since an approval binds the step and a model
retrying an escalated call gives it a new tool call id), then

- allow: calls ``execute``; a high-risk call gets its intent begun and
  marked effect-sent first and closed ``completed``, or ``error`` when the
  tool raised or came back as an error ``ToolMessage``;
- deny, an escalation no human approved within ``approval_timeout`` seconds,
  or a sidecar that cannot be asked: never calls ``execute`` and answers an
  error ``ToolMessage`` (``status="error"``) that starts ``toolgate:``, which
  is what the model reads as the tool's result.

    from toolgate.integrations.langgraph import governed_tool_node
    graph.add_node("tools", governed_tool_node([lookup, transfer], toolgate.Client()))

An ``AsyncClient`` serves ``ainvoke``/``astream`` only; in a synchronous run
its calls are refused (fail closed) since it cannot be driven there. Use
``toolgate.Client`` to serve both.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

from .. import _ops
from ..client import AsyncClient, Client, _log_close_failure
from ..errors import ApprovalRequired, Denied, ToolgateError
from ..types import Admission

#: Every refusal the model sees starts with this.
PREFIX = "toolgate: "


def _import_prebuilt() -> Any:
    try:
        import langgraph.prebuilt as prebuilt
    except ImportError as e:  # pragma: no cover - exercised without the extra
        raise ImportError("toolgate.integrations.langgraph needs LangGraph: pip install 'toolgate[langgraph]' "
                          "(langgraph==1.2.24)") from e
    return prebuilt


def refusal(error: ToolgateError) -> str:
    """The tool result the model sees for a call the sidecar did not allow."""
    if isinstance(error, Denied):
        rule = f" ({error.matched_rule})" if error.matched_rule else ""
        return f"{PREFIX}denied by policy: {error.reason}{rule}; decision {error.decision_id}; the tool did not run"
    if isinstance(error, ApprovalRequired):
        return (f"{PREFIX}needs human approval {error.approval_id} ({error.approval_status}); "
                "the tool did not run")
    return f"{PREFIX}sidecar refused or unreachable, the tool did not run: {error}"


def _refused(call: dict[str, Any], text: str) -> Any:
    from langchain_core.messages import ToolMessage

    return ToolMessage(content=text, name=call.get("name"), tool_call_id=call.get("id") or "", status="error")


def _outcome(result: Any) -> tuple[str, Optional[str]]:
    """How a call that ran ended, from what ``execute`` returned."""
    if getattr(result, "status", None) == "error":
        return "error", f"tool failed; the model was told: {getattr(result, 'content', '')}"[:_ops.MAX_DETAIL_CHARS]
    return "completed", None


def _is_interrupt(exc: BaseException) -> bool:
    try:
        from langgraph.errors import GraphBubbleUp
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, GraphBubbleUp)


def tool_call_wrappers(client: Union[Client, AsyncClient], approval_timeout: float = 0.0) -> tuple[
        Callable[[Any, Callable[[Any], Any]], Any], Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]]:
    """``(wrap_tool_call, awrap_tool_call)`` for a ``ToolNode`` (see the
    module docstring); pass both, or LangGraph runs synchronous calls
    ungoverned."""
    if not isinstance(client, (Client, AsyncClient)):
        raise TypeError("client must be a toolgate.Client or toolgate.AsyncClient")
    timeout = float(approval_timeout)

    def admit_op(call: dict[str, Any]) -> _ops.Op[Admission]:
        arguments = call.get("args")
        if not isinstance(arguments, dict):
            arguments = {}  # LangChain tool calls always carry a dict; never skip the decision
        return _ops.admit(client.run_id, call["name"], arguments, None, None, timeout, client.timeout)

    def close_op(intent_id: str, outcome: str, detail: Optional[str]) -> _ops.Op[Any]:
        return _ops.complete_intent(intent_id, outcome, detail)

    def wrap(request: Any, execute: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        if not isinstance(client, Client):
            return _refused(call, f"{PREFIX}an AsyncClient cannot decide a synchronous tool call "
                                  "(use ainvoke, or a toolgate.Client); the tool did not run")
        try:
            admission = client._drive(admit_op(call))
        except ToolgateError as e:
            return _refused(call, refusal(e))
        if admission.intent_id is None:
            return execute(request)
        intent_id = admission.intent_id
        try:
            result = execute(request)
        except Exception as e:
            if not _is_interrupt(e):  # an interrupted tool reruns on resume: its intent stays uncertain
                detail = _ops.describe_error(e)
                _close(lambda: client._drive(close_op(intent_id, "error", detail)), intent_id)
            raise
        _close(lambda: client._drive(close_op(intent_id, *_outcome(result))), intent_id)
        return result

    async def drive(op: _ops.Op[Any]) -> Any:
        if isinstance(client, AsyncClient):
            return await client._drive(op)
        return await asyncio.to_thread(client._drive, op)  # keep the event loop free

    async def awrap(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        call = request.tool_call
        try:
            admission = await drive(admit_op(call))
        except ToolgateError as e:
            return _refused(call, refusal(e))
        if admission.intent_id is None:
            return await execute(request)
        intent_id = admission.intent_id
        try:
            result = await execute(request)
        except Exception as e:
            if not _is_interrupt(e):
                await _aclose(drive(close_op(intent_id, "error", _ops.describe_error(e))), intent_id)
            raise
        await _aclose(drive(close_op(intent_id, *_outcome(result))), intent_id)
        return result

    return wrap, awrap


def _close(fn: Callable[[], Any], intent_id: str) -> None:
    # The effect happened (or was attempted): a failure to record it leaves
    # the intent effect-sent, which a resume reports as uncertain.
    try:
        fn()
    except ToolgateError as e:
        _log_close_failure(intent_id, e)


async def _aclose(pending: Awaitable[Any], intent_id: str) -> None:
    try:
        await pending
    except ToolgateError as e:
        _log_close_failure(intent_id, e)


def governed_tool_node(tools: Sequence[Any], client: Union[Client, AsyncClient], approval_timeout: float = 0.0,
                       **tool_node_args: Any) -> Any:
    """A ``langgraph.prebuilt.ToolNode`` over ``tools`` (further ``ToolNode``
    arguments pass through) whose calls the sidecar decides."""
    prebuilt = _import_prebuilt()
    if "wrap_tool_call" in tool_node_args or "awrap_tool_call" in tool_node_args:
        raise TypeError("governed_tool_node sets wrap_tool_call/awrap_tool_call itself; compose yours "
                        "around tool_call_wrappers() instead")
    wrap, awrap = tool_call_wrappers(client, approval_timeout)
    return prebuilt.ToolNode(tools, wrap_tool_call=wrap, awrap_tool_call=awrap, **tool_node_args)


__all__ = ["PREFIX", "governed_tool_node", "refusal", "tool_call_wrappers"]
