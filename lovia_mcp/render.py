"""Results and schemas: what the model sees of an MCP tool.

Rendering is lovia's own (:func:`lovia.plugins.mcp.render_mcp_content`), so a
result reads the same with or without isolation: content blocks crossing the
pipe keep the SDK's attribute names. :class:`MCPToolResult` extends lovia's
with ``structured_content``, so ``isinstance`` checks against lovia's class
keep working.

A custom ``result_renderer`` is written against lovia's plugin, which hands
it the MCP SDK's models (``mcp.types.TextContent``, ``ImageContent``,
``EmbeddedResource``...). :func:`with_sdk_models` wraps such a renderer so
it receives the same: the wire blocks are converted at render time, which
imports ``mcp`` in the agent on the first render (never otherwise). A block
the SDK's models reject (the worker reads results leniently), one of a type
the SDK does not model, or any block when ``mcp`` is not installed, is passed
as the wire :class:`~lovia_mcp_worker.wire.messages.ContentBlock`, which has the
same attribute names. A wire block turns back into MCP JSON through the
protocol's codec (:func:`~lovia_mcp_worker.wire.messages.to_json`), so no name is
mapped here.

The output cap: when an output cap applies to a call (the tool's
``max_output_chars``, else the agent's ``max_tool_output_chars``) and the
renderer is the default one, the call tells the worker (``CallTool.keep``).
A text longer than twice the cap plus ``KEEP_SLACK`` (64 Ki characters) then
loses its middle in the worker (``MCPToolResult.omitted`` counts it), and
:func:`default_renderer` cuts what crossed to fit the cap: lovia's head/tail
split and marker, the marker counting the whole text. Unlike lovia's own cut,
whose marker comes on top of the cap, this one fits inside it, because
lovia's runner cuts anything longer than the cap again; so the model sees
about 70 characters less of such a text than under lovia's plugin. Shorter
results cross whole and lovia's runner cuts them exactly as under lovia's
plugin. Caps under :data:`FIT_MIN` are left to lovia.

Sandbox denials: what the sandbox refused while the call was in flight
(the worker attributes it, ``Result.denied``) is in
``MCPToolResult.meta[DENIED_META]``, one entry per distinct denial
(:func:`denial_meta`), and the model reads one line per entry after the
result (:func:`denial_lines`), under the default renderer and after a custom
renderer's text alike. The words are the wire's
(:func:`~lovia_mcp_worker.wire.refusals.words`), said from the denial's
facts, as the worker says them to the refused client and in its log.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Final, cast

import msgspec
from lovia.plugins.mcp import MCPToolResult as _LoviaMCPToolResult
from lovia.plugins.mcp import normalize_schema as _lovia_normalize_schema
from lovia.plugins.mcp import render_mcp_content
from lovia.run_context import RunContext
from lovia.types import JsonObject
from lovia_mcp_worker.wire.mcpjson import to_json
from lovia_mcp_worker.wire.messages import CallUsage, Denied
from lovia_mcp_worker.wire.refusals import EgressRefusal, words


@dataclass
class MCPToolResult(_LoviaMCPToolResult):
    """What an MCP tool's ``invoke`` returns; a custom ``result_renderer`` receives it.

    ``content`` holds the content blocks (``type``, ``text``, ``mime_type``,
    ``data``, ``uri``, ``resource`` as on the SDK's models), ``is_error`` the
    ``isError`` flag, ``structured_content`` the parsed ``structuredContent``.

    ``cap``: the output cap the result was fetched under (``None``: none).
    ``omitted``: characters of text the worker left out of the middle
    because the cap would cut them anyway (blocks keep their place; ``0``:
    the text is whole); the default renderer then cuts the rest to fit the
    cap. Under a cap, a ``structuredContent`` larger than twice the cap plus
    64 KiB is not sent (``None``): the default renderer never shows it.
    A custom renderer always gets the whole result.

    ``usage``: what the server's process tree used during the call (CPU
    seconds, peak memory, egress per host; :class:`CallUsage`), ``None``
    where there is no local tree to measure (an HTTP server).
    """

    structured_content: Any = None
    cap: int | None = None
    omitted: int = 0
    usage: CallUsage | None = None
    meta: dict[str, Any] | None = None
    """What lovia-mcp adds about the call, as MCP's ``_meta`` would (``None``: nothing):
    ``meta[DENIED_META]`` lists the sandbox's denials during the call, each a dict with
    ``kind``, ``target``, ``reason``, ``count`` and ``shared``, and the facts the words are
    said from: ``host``, ``port``, ``why`` (and ``address``, ``embedded`` for an internal
    address; :class:`~lovia_mcp_worker.wire.refusals.EgressRefusal`)."""


# The smallest cap cut here: below it lovia's marker would take most of the
# room, so such a cap is left to lovia's runner (and the whole result crosses).
FIT_MIN: Final = 256
# lovia's split of the room between the text's head and its tail.
_HEAD_SHARE: Final = 0.8
# The _meta key of the sandbox's denials during a call (in MCPToolResult.meta and the gateway's results).
DENIED_META: Final = "lovia-mcp/sandbox_denied"

logger = logging.getLogger("lovia_mcp")


def default_renderer(result: Any, ctx: RunContext[Any]) -> str:
    _ = ctx
    if not isinstance(result, _LoviaMCPToolResult):
        return result if isinstance(result, str) else str(result)
    text = str(render_mcp_content(result.content, is_error=result.is_error))
    omitted = getattr(result, "omitted", 0)
    cap = getattr(result, "cap", None)
    lines = denial_lines(result)
    if not omitted or cap is None:
        return text + lines  # whole: lovia's runner applies the cap, exactly as under lovia's plugin
    return truncate_to_fit(text, max(FIT_MIN, cap - len(lines)), omitted=omitted) + lines


def denial_lines(result: Any) -> str:
    """One line per distinct sandbox denial in ``result.meta`` (each after a newline), or ``""``.

    ``[sandbox] blocked a connection to evil.example:443 (not in this server's network allowlist)``;
    one that came while other calls were in flight says it may be theirs.
    """
    meta = getattr(result, "meta", None)
    entries = meta.get(DENIED_META) if isinstance(meta, dict) else None
    if not entries:
        return ""
    out = []
    for entry in entries:
        try:
            why = words(msgspec.convert(entry, EgressRefusal), "model")
        except msgspec.ValidationError:  # not one of ours (a renderer's own meta): its reason as it is
            why = str(entry.get("reason", ""))
        line = f"[sandbox] blocked a connection to {entry.get('target', '?')} ({why})"
        count = entry.get("count", 1)
        if count > 1:
            line += f", {count} times"
        if entry.get("shared"):
            line += "; other calls were in flight on this server, so it may have been theirs"
        out.append("\n" + line)
    return "".join(out)


def denial_meta(denied: Denied) -> dict[str, Any]:
    """One entry of ``meta[DENIED_META]``: the denial's words and counts, then its facts."""
    refusal = denied.refusal
    return {
        "kind": refusal.kind,
        "target": refusal.target,
        "reason": words(refusal, "reason"),
        "count": denied.count,
        "shared": denied.shared,
        **msgspec.to_builtins(refusal),
    }


def output_cap(configured: int | None, ctx: RunContext[Any] | None) -> int | None:
    """The cap lovia's runner puts on a tool's output: its own, else the agent's; ``None`` if none or under :data:`FIT_MIN`."""
    cap = configured
    if cap is None:
        cap = getattr(getattr(ctx, "agent", None), "max_tool_output_chars", None)
    return cap if isinstance(cap, int) and cap >= FIT_MIN else None


def truncate_to_fit(text: str, limit: int, *, omitted: int = 0) -> str:
    """``text`` cut to at most ``limit`` characters, head and tail kept, as lovia's ``truncate_tool_output``.

    ``omitted`` characters were already left out somewhere in the middle (at
    least ``limit`` from either end): the marker counts them. The marker says
    how much was kept of the whole, as lovia's; the head takes 80% of the
    room left beside it.
    """
    length = len(text) + omitted
    if length <= limit:
        return text
    kept = limit
    while True:  # the marker's length depends on the count it shows; it shrinks with it
        marker = f"\n\n[... tool output truncated: kept {kept:,} of {length:,} chars ...]\n\n"
        room = max(1, limit - len(marker))
        if room >= kept:
            break
        kept = room
    head = max(1, int(kept * _HEAD_SHARE))
    tail = max(0, kept - head)
    logger.info("tool output %d chars > limit %d: cut to fit (%d left in the worker)", length, limit, omitted)
    return text[:head] + marker + (text[-tail:] if tail else "")


# Wire block type -> the name of the SDK model in mcp.types.
_SDK_MODELS = {
    "text": "TextContent",
    "image": "ImageContent",
    "audio": "AudioContent",
    "resource_link": "ResourceLink",
    "resource": "EmbeddedResource",
}


def sdk_content(content: list[Any]) -> list[Any]:
    """The blocks as the MCP SDK's models where they validate; others as they are."""
    try:
        import mcp.types as sdk
    except ImportError:
        return list(content)
    out: list[Any] = []
    for block in content:
        model = getattr(sdk, _SDK_MODELS.get(getattr(block, "type", None) or "", ""), None)
        if model is None or not hasattr(block, "__struct_fields__"):
            out.append(block)
            continue
        try:
            out.append(model.model_validate(to_json(block)))
        except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError; the block is kept as it came
            logging.getLogger("lovia_mcp").debug("kept a %s block as it came: %s", block.type, exc)
            out.append(block)
    return out


def with_sdk_models(renderer: Any) -> Any:
    """``renderer`` receiving an :class:`MCPToolResult` whose content is the SDK's models (see the module doc)."""

    @functools.wraps(renderer)
    def render(result: Any, ctx: RunContext[Any]) -> Any:
        lines = ""
        if isinstance(result, _LoviaMCPToolResult):
            structured = getattr(result, "structured_content", None)
            meta = getattr(result, "meta", None)
            lines = denial_lines(result)
            result = MCPToolResult(
                content=sdk_content(result.content), is_error=result.is_error, structured_content=structured, meta=meta
            )
        out = renderer(result, ctx)
        # The model reads the denials whatever the renderer makes of the rest (when it makes text).
        return out + lines if lines and isinstance(out, str) else out

    return render


def normalize_schema(schema: object) -> JsonObject:
    """Coerce a loose MCP input schema into a valid object schema.

    lovia's repair (``{}``, ``null``, an object without properties), plus: a
    top-level type other than ``object`` (function parameters must be an
    object) and a ``required`` that is not a list of names are dropped rather
    than sent to the provider, which would reject the whole request.
    """
    out = _lovia_normalize_schema(schema)
    if out.get("type") != "object":
        return {"type": "object", "properties": {}}
    required = out.get("required")
    if required is not None and not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        out = cast(JsonObject, {k: v for k, v in out.items() if k != "required"})
    return out


__all__ = [
    "DENIED_META",
    "FIT_MIN",
    "MCPToolResult",
    "default_renderer",
    "denial_lines",
    "denial_meta",
    "normalize_schema",
    "output_cap",
    "render_mcp_content",
    "sdk_content",
    "truncate_to_fit",
    "with_sdk_models",
]
