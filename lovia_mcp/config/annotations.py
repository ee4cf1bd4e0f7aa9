"""Tool annotations: what a server says of its tools, and the policies built on it.

MCP tools may carry ``annotations`` (``readOnlyHint``, ``destructiveHint``,
``idempotentHint``, ``openWorldHint``, ``title``) and ``_meta``. The spec
calls the hints untrusted unless the server is, so they are used two ways:

- **Always**, where they can only make things stricter: with
  ``auto_reconnect="safe"`` a call lost with its server is retried only if
  its tool says it is read-only or idempotent (a missing hint means no).
- **With** ``trust_annotations=True`` only, where they loosen things: a
  read-only tool (``readOnlyHint`` true, ``destructiveHint`` not true) runs
  in parallel and skips approval under ``needs_approval="destructive"``;
  every other tool of the server is an execution barrier. Untrusted, every
  tool needs approval under ``"destructive"``, and ``parallel`` applies as
  configured.

Every tool a connection builds is an :class:`MCPTool`: lovia's ``Tool`` plus
``annotations`` and ``meta`` with the SDK's attribute names
(``tool.annotations.read_only_hint``, ``tool.meta``), so code written
against the SDK's ``Tool`` model reads them unchanged.

Non-goals: ``openWorldHint`` changes no policy (a network sandbox is the
answer to open-world tools); ``call_mcp_tool`` (``defer=True``) delegates
approval to its target, but it is one lovia tool, so it runs in parallel
whatever its target says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

import msgspec
from lovia.tools import ApprovalPredicate, Tool
from lovia_mcp_worker.wire.mcpjson import ToolAnnotations, to_json

AutoReconnect: TypeAlias = bool | Literal["safe"]
Approval: TypeAlias = bool | ApprovalPredicate | Literal["destructive"]
AUTO_RECONNECTS: Final = (True, False, "safe")


@dataclass
class MCPTool(Tool):
    """A lovia ``Tool`` for one MCP tool, carrying what the server listed with it.

    ``annotations`` is the tool's hints (``None`` if it gave none) and
    ``meta`` its ``_meta`` object; ``raw_name`` is the name the server is
    called by (``name`` may be prefixed or made safe for providers).
    """

    annotations: ToolAnnotations | None = None
    meta: dict[str, Any] | None = None
    raw_name: str = ""


def as_json(annotations: ToolAnnotations) -> dict[str, Any]:
    """The hints under their MCP JSON names (``readOnlyHint``...), as a server lists them; unset ones left out."""
    return to_json(annotations)


def meta_object(raw: bytes | None) -> dict[str, Any] | None:
    """A tool's ``_meta`` as the worker passed it (raw JSON), or ``None``."""
    if raw is None:
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def read_only(annotations: ToolAnnotations | None, *, trusted: bool) -> bool:
    """A tool that may skip approval and run beside others: trusted, read-only, not marked destructive."""
    return (
        trusted
        and annotations is not None
        and annotations.read_only_hint is True
        and annotations.destructive_hint is not True
    )


def retry_is_safe(annotations: ToolAnnotations | None) -> bool:
    """Whether ``auto_reconnect="safe"`` retries a call of this tool: it says read-only or idempotent.

    Used whether or not the server is trusted: a hint can only withhold a
    retry that ``auto_reconnect=True`` would make.
    """
    return annotations is not None and (annotations.read_only_hint is True or annotations.idempotent_hint is True)


def approval(setting: Approval, annotations: ToolAnnotations | None, *, trusted: bool) -> bool | ApprovalPredicate:
    """The lovia ``needs_approval`` of one tool."""
    if setting == "destructive":
        return not read_only(annotations, trusted=trusted)
    return setting


def parallel(setting: bool, annotations: ToolAnnotations | None, *, trusted: bool) -> bool:
    """The lovia ``parallel`` of one tool: trusted hints make every tool but the read-only ones a barrier."""
    if not setting:
        return False
    return read_only(annotations, trusted=True) if trusted else True


__all__ = [
    "AUTO_RECONNECTS",
    "Approval",
    "AutoReconnect",
    "MCPTool",
    "ToolAnnotations",
    "approval",
    "as_json",
    "meta_object",
    "parallel",
    "read_only",
    "retry_is_safe",
]
