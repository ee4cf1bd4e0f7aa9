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
as the wire :class:`~lovia_mcp_worker.protocol.ContentBlock`, which has the
same attribute names. A wire block turns back into MCP JSON through the
protocol's codec (:func:`~lovia_mcp_worker.protocol.to_json`), so no name is
mapped here.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, cast

from lovia.plugins.mcp import MCPToolResult as _LoviaMCPToolResult
from lovia.plugins.mcp import normalize_schema as _lovia_normalize_schema
from lovia.plugins.mcp import render_mcp_content
from lovia.run_context import RunContext
from lovia.types import JsonObject
from lovia_mcp_worker.protocol import to_json


@dataclass
class MCPToolResult(_LoviaMCPToolResult):
    """What an MCP tool's ``invoke`` returns; a custom ``result_renderer`` receives it.

    ``content`` holds the content blocks (``type``, ``text``, ``mime_type``,
    ``data``, ``uri``, ``resource`` as on the SDK's models), ``is_error`` the
    ``isError`` flag, ``structured_content`` the parsed ``structuredContent``.
    """

    structured_content: Any = None


def default_renderer(result: Any, ctx: RunContext[Any]) -> str:
    _ = ctx
    if isinstance(result, _LoviaMCPToolResult):
        return str(render_mcp_content(result.content, is_error=result.is_error))
    return result if isinstance(result, str) else str(result)


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
        if isinstance(result, _LoviaMCPToolResult):
            structured = getattr(result, "structured_content", None)
            result = MCPToolResult(content=sdk_content(result.content), is_error=result.is_error,
                                   structured_content=structured)
        return renderer(result, ctx)

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
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        out = cast(JsonObject, {k: v for k, v in out.items() if k != "required"})
    return out


__all__ = [
    "MCPToolResult",
    "default_renderer",
    "normalize_schema",
    "render_mcp_content",
    "sdk_content",
    "with_sdk_models",
]
