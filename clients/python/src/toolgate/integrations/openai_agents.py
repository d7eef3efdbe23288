"""OpenAI Agents SDK (``openai-agents`` 0.24): function tools that run only
when the sidecar allows the call.

:func:`govern_tool` returns a copy of a ``FunctionTool`` (from
``@function_tool``, ``Agent.as_tool`` or a hand-built one) whose
``on_invoke_tool`` asks the sidecar first, with the arguments the model sent
(and no step id: an approval binds the step, and a model retrying an
escalated call gives it a new ``tool_call_id``). The SDK's runner calls it
like any tool, so its own argument parsing, failure handling, tool
guardrails and ``timeout_seconds`` still apply around (and, for the timeout,
including) the decision.

- allow: the tool runs; a high-risk call gets its intent begun and marked
  effect-sent first and closed ``completed``, or ``error`` when the tool
  raised or the SDK's default failure handler turned an exception into the
  output.
- deny, an escalation no human approved within ``approval_timeout`` seconds,
  or a sidecar that cannot be asked: the tool never runs and the model gets
  a ``toolgate: ...`` string as the tool's output (the SDK's documented way
  to report a tool failure without ending the run).

    from toolgate.integrations.openai_agents import govern_tools
    agent = Agent(name="ops", tools=govern_tools([lookup, transfer], toolgate.AsyncClient()))

A tool guardrail is not used: it cannot close a high-risk call's intent
after the effect. Hosted tools (web search, computer, shell, ...) do not run
here and are refused by :func:`govern_tools`; reach MCP servers through the
sidecar's MCP gateway instead of ``Agent.mcp_servers``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any, Iterable, Optional, Union

from .. import _ops
from ..client import AsyncClient, Client, _log_close_failure
from ..errors import ApprovalRequired, Denied, ToolgateError
from ..types import Admission

#: Every refusal the model sees starts with this.
PREFIX = "toolgate: "

# The SDK marks a ToolContext with this attribute when its default failure
# handler turned the tool's exception into the output (private in 0.24; when
# it is gone such a call is closed `completed`).
_HANDLED_FAILURE_ATTR = "_function_tool_default_failure_handled"


def _import_sdk() -> Any:
    try:
        import agents
    except ImportError as e:  # pragma: no cover - exercised without the extra
        raise ImportError("toolgate.integrations.openai_agents needs the OpenAI Agents SDK: "
                          "pip install 'toolgate[openai-agents]' (openai-agents==0.24.0)") from e
    return agents


class _Gate:
    """One client and approval wait, shared by the tools it governs."""

    def __init__(self, client: Union[Client, AsyncClient], approval_timeout: float) -> None:
        if not isinstance(client, (Client, AsyncClient)):
            raise TypeError("client must be a toolgate.Client or toolgate.AsyncClient")
        self.client = client
        self.approval_timeout = float(approval_timeout)

    async def _drive(self, op: _ops.Op[Any]) -> Any:
        if isinstance(self.client, AsyncClient):
            return await self.client._drive(op)
        # The blocking client must not stall the runner's event loop.
        return await asyncio.to_thread(self.client._drive, op)

    async def admit(self, tool: str, arguments: dict[str, Any]) -> Admission:
        c = self.client
        return await self._drive(_ops.admit(c.run_id, tool, arguments, None, None, self.approval_timeout,
                                            c.timeout))

    async def close(self, intent_id: str, outcome: str, detail: Optional[str]) -> None:
        try:
            await self._drive(_ops.complete_intent(intent_id, outcome, detail))
        except ToolgateError as e:
            # The effect happened (or was attempted): the intent stays
            # effect-sent, which a resume reports as uncertain.
            _log_close_failure(intent_id, e)


def refusal(error: ToolgateError) -> str:
    """The tool output the model sees for a call the sidecar did not allow."""
    if isinstance(error, Denied):
        rule = f" ({error.matched_rule})" if error.matched_rule else ""
        return f"{PREFIX}denied by policy: {error.reason}{rule}; decision {error.decision_id}; the tool did not run"
    if isinstance(error, ApprovalRequired):
        return (f"{PREFIX}needs human approval {error.approval_id} ({error.approval_status}); "
                "the tool did not run")
    return f"{PREFIX}sidecar refused or unreachable, the tool did not run: {error}"


def _arguments(input_json: str) -> Optional[dict[str, Any]]:
    if not input_json or not input_json.strip():
        return {}
    try:
        value = json.loads(input_json)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _govern(tool: Any, gate: _Gate) -> Any:
    agents = _import_sdk()
    if not isinstance(tool, agents.FunctionTool):
        raise TypeError(f"toolgate can govern FunctionTools only, not {type(tool).__name__} "
                        f"({getattr(tool, 'name', '?')}): it runs outside this process")
    inner = tool.on_invoke_tool
    name = tool.name

    async def on_invoke_tool(ctx: Any, input_json: str) -> Any:
        arguments = _arguments(input_json)
        if arguments is None:
            return f"{PREFIX}the arguments are not a JSON object; the tool did not run"
        try:
            admission = await gate.admit(name, arguments)
        except ToolgateError as e:
            return refusal(e)
        if admission.intent_id is None:
            return await inner(ctx, input_json)
        try:
            output = await inner(ctx, input_json)
        except Exception as e:
            await gate.close(admission.intent_id, "error", _ops.describe_error(e))
            raise
        if getattr(ctx, _HANDLED_FAILURE_ATTR, False):
            await gate.close(admission.intent_id, "error", f"tool failed; the model was told: {output}")
        else:
            await gate.close(admission.intent_id, "completed", None)
        return output

    governed = copy.copy(tool)  # FunctionTool.__copy__ keeps the SDK's own bindings
    governed.on_invoke_tool = on_invoke_tool
    return governed


def govern_tool(tool: Any, client: Union[Client, AsyncClient], approval_timeout: float = 0.0) -> Any:
    """A copy of the ``FunctionTool`` ``tool`` that runs only when the sidecar
    ``client`` talks to allows the call (see the module docstring); waits up
    to ``approval_timeout`` seconds for a human on an escalation."""
    return _govern(tool, _Gate(client, approval_timeout))


def govern_tools(tools: Iterable[Any], client: Union[Client, AsyncClient], approval_timeout: float = 0.0) -> list[Any]:
    """:func:`govern_tool` for each of ``tools``; raises ``TypeError`` for a
    tool it cannot govern rather than hand it over ungoverned."""
    gate = _Gate(client, approval_timeout)
    return [_govern(tool, gate) for tool in tools]


__all__ = ["PREFIX", "govern_tool", "govern_tools", "refusal"]
