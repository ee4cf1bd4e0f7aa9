"""Results and schemas: what the model sees of an MCP tool.

Rendering is lovia's own (:func:`lovia.plugins.mcp.render_mcp_content`), so a
result reads the same with or without isolation: content blocks crossing the
pipe keep the SDK's attribute names. :class:`MCPToolResult` extends lovia's
with ``structured_content``, so ``isinstance`` checks against lovia's class
keep working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from lovia.plugins.mcp import MCPToolResult as _LoviaMCPToolResult
from lovia.plugins.mcp import normalize_schema as _lovia_normalize_schema
from lovia.plugins.mcp import render_mcp_content
from lovia.run_context import RunContext
from lovia.types import JsonObject


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


__all__ = ["MCPToolResult", "default_renderer", "normalize_schema", "render_mcp_content"]
