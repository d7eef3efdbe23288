"""LionAGI (0.36): every tool call of a ``Branch`` goes through the sidecar.

LionAGI's ``ActionManager.invoke`` runs tool-pre hooks (``branch.acts.
add_tool_pre_hook``) with ``(tool_name, arguments)`` before any tool's
function, local or MCP, and tool-post hooks (``add_tool_post_hook``) with
``(tool_name, arguments, result, error)`` afterwards. A pre-hook answers
``ToolPreDecision(decision="allow" | "deny" | "ask", reason)`` or ``None``;
a deny (or a hook that raises) fails the call closed: its function never
runs and ``branch.act`` reports ``{"error": "<hook name>: <reason>"}`` as
the tool's output. This module never answers ``ask``: LionAGI has no
approval screen, so an escalation waits for a human through the sidecar
(up to ``approval_timeout``) and is otherwise denied.

    from toolgate.integrations.lionagi import govern
    govern(branch, toolgate.AsyncClient())

Register ``govern`` after any hook that rewrites arguments: the sidecar
decides the arguments this hook sees.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Deque, Optional, Union

from .. import _ops
from ..client import AsyncClient, Client
from ..errors import ApprovalRequired, Denied, ToolgateError
from ..types import Admission

#: The name LionAGI prefixes to a denial reason (``toolgate: ...``).
HOOK_NAME = "toolgate"

# The intent begun by this task's current pre-hook, for its post-hook:
# LionAGI awaits both hooks of one call in the same task.
_current: contextvars.ContextVar[Optional[tuple[int, str, str]]] = contextvars.ContextVar(
    "toolgate_lionagi_intent", default=None)


def _key(tool_name: str, arguments: Any) -> tuple[str, str]:
    try:
        text = json.dumps(arguments, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(arguments)
    return tool_name, text


@dataclass
class Governance:
    """What :func:`govern` registered, and the intents still open."""

    client: Union[Client, AsyncClient]
    approval_timeout: float
    pre_hook: Callable[..., Awaitable[Any]] = field(init=False)
    post_hook: Callable[..., Awaitable[Any]] = field(init=False)
    # Fallback pairing of pre- and post-hook by (tool, arguments), FIFO.
    _open: dict[tuple[str, str], Deque[str]] = field(default_factory=lambda: defaultdict(deque))

    async def _drive(self, op: _ops.Op[Any]) -> Any:
        if isinstance(self.client, AsyncClient):
            return await self.client._drive(op)
        # The blocking client must not stall the event loop.
        return await asyncio.to_thread(self.client._drive, op)

    async def admit(self, tool_name: str, arguments: dict[str, Any]) -> Admission:
        c = self.client
        return await self._drive(_ops.admit(c.run_id, tool_name, arguments, None, None, self.approval_timeout,
                                            c.timeout))

    async def complete(self, intent_id: str, outcome: str, detail: Optional[str]) -> None:
        await self._drive(_ops.complete_intent(intent_id, outcome, detail))

    def take_intent(self, tool_name: str, arguments: Any) -> Optional[str]:
        """The open intent of the call whose post-hook runs now."""
        current = _current.get()
        key = _key(tool_name, arguments)
        if current is not None and current[0] == id(self) and current[1] == tool_name:
            _current.set(None)
            intent_id = current[2]
            for queue in self._open.values():
                if intent_id in queue:
                    queue.remove(intent_id)
                    break
            return intent_id
        queue = self._open.get(key)
        if queue:
            return queue.popleft()
        return None


def _deny(reason: str) -> Any:
    from lionagi.protocols.action.tool_hooks import ToolPreDecision

    return ToolPreDecision(decision="deny", reason=reason)


def govern(branch: Any, client: Union[Client, AsyncClient], approval_timeout: float = 0.0) -> Governance:
    """Puts every tool call of ``branch`` behind the sidecar ``client`` talks
    to: allow runs it (a high-risk call with its intent begun and marked
    effect-sent first, closed by the post-hook), deny and an escalation no
    human approved within ``approval_timeout`` seconds never run it, and a
    sidecar that cannot be asked denies."""
    from lionagi.protocols.action.tool_hooks import ToolHookDeniedError, ToolPostDecision

    gov = Governance(client=client, approval_timeout=approval_timeout)

    async def pre_hook(tool_name: str, arguments: dict[str, Any]) -> Any:
        try:
            admission = await gov.admit(tool_name, arguments)
        except Denied as e:
            return _deny(f"denied by policy: {e.reason}"
                         + (f" ({e.matched_rule})" if e.matched_rule else "")
                         + f"; decision {e.decision_id}")
        except ApprovalRequired as e:
            return _deny(f"needs human approval {e.approval_id} ({e.approval_status}); not run")
        except ToolgateError as e:
            return _deny(f"sidecar refused or unreachable, not run: {e}")
        if admission.intent_id is not None:
            _current.set((id(gov), tool_name, admission.intent_id))
            gov._open[_key(tool_name, arguments)].append(admission.intent_id)
        return None  # allow, arguments unchanged

    async def post_hook(tool_name: str, arguments: dict[str, Any], result: Any,
                        error: Optional[BaseException]) -> Any:
        intent_id = gov.take_intent(tool_name, arguments)
        if intent_id is None:
            return None
        if error is None:
            outcome, detail = "completed", None
        elif isinstance(error, ToolHookDeniedError):
            # A later pre-hook refused the call after toolgate allowed it.
            outcome, detail = "not_completed", _ops.describe_error(error)
        else:
            outcome, detail = "error", _ops.describe_error(error)
        try:
            await gov.complete(intent_id, outcome, detail)
        except ToolgateError as e:
            return ToolPostDecision(reason=f"toolgate: intent {intent_id} not closed ({e}); resume sees it uncertain")
        return ToolPostDecision(reason=f"toolgate: intent {intent_id} {outcome}")

    pre_hook.__name__ = HOOK_NAME
    post_hook.__name__ = HOOK_NAME
    gov.pre_hook = pre_hook
    gov.post_hook = post_hook
    branch.acts.add_tool_pre_hook(pre_hook)
    branch.acts.add_tool_post_hook(post_hook)
    return gov


__all__ = ["HOOK_NAME", "Governance", "govern"]
