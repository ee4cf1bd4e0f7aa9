"""MCP results and tool listings as wire structs: pure conversion, lenient by design.

A server's JSON is copied field by field into the structs of
:mod:`~lovia_mcp_worker.protocol` with the SDK's attribute names. A
malformed field becomes ``None`` instead of failing the result, and one
malformed tool entry is skipped (with a warning) instead of failing the
listing: one loose schema must not sink a whole server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ..protocol import ContentBlock, Resource, ToolAnnotations, ToolSpec

_json_encode = msgspec.json.Encoder().encode


def _str(d: dict[str, Any], key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _object(d: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = d.get(key)
    return value if isinstance(value, dict) else None


def blocks(raw: object) -> list[ContentBlock]:
    """Content blocks; an unknown block type keeps its JSON in ``extra``.

    Every block keeps its ``annotations`` and ``_meta`` objects.
    """
    if not isinstance(raw, list):
        return []
    out: list[ContentBlock] = []
    for b in raw:
        if not isinstance(b, dict):
            out.append(ContentBlock(type="unknown", extra=_json_encode(b)))
            continue
        out.append(_block(b))
    return out


def _block(b: dict[str, Any]) -> ContentBlock:
    btype = _str(b, "type") or "unknown"
    common: dict[str, Any] = {"annotations": _object(b, "annotations"), "meta": _object(b, "_meta")}
    if btype == "text":
        return ContentBlock(type="text", text=_str(b, "text") or "", **common)
    if btype in ("image", "audio"):
        return ContentBlock(type=btype, data=_str(b, "data"), mime_type=_str(b, "mimeType"), **common)
    if btype == "resource_link":
        return ContentBlock(
            type=btype,
            uri=_str(b, "uri") or "",
            name=_str(b, "name"),
            title=_str(b, "title"),
            description=_str(b, "description"),
            mime_type=_str(b, "mimeType"),
            **common,
        )
    if btype == "resource" and isinstance(b.get("resource"), dict):
        res = b["resource"]
        return ContentBlock(
            type=btype,
            resource=Resource(
                uri=_str(res, "uri") or "",
                mime_type=_str(res, "mimeType"),
                text=_str(res, "text"),
                blob=_str(res, "blob"),
            ),
            **common,
        )
    return ContentBlock(type=btype, extra=_json_encode(b), **common)


def call_result(result: dict[str, Any]) -> tuple[list[ContentBlock], bool, bytes | None]:
    """``tools/call`` result fields: content blocks, ``isError``, raw ``structuredContent``."""
    structured = result.get("structuredContent")
    return (
        blocks(result.get("content")),
        bool(result.get("isError")),
        None if structured is None else _json_encode(structured),
    )


def tool_specs(page: dict[str, Any], warn: Callable[[str], None]) -> list[ToolSpec]:
    """The tools of one ``tools/list`` page; malformed entries are skipped with a warning."""
    out: list[ToolSpec] = []
    entries = page.get("tools")
    if not isinstance(entries, list):
        if entries is not None:
            warn(f"tools/list answered 'tools' with a {type(entries).__name__}, not a list; no tools read")
        return out
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            warn(f"skipped a malformed tool entry: {str(entry)[:200]!r}")
            continue
        desc = entry.get("description")
        meta = entry.get("_meta")
        out.append(
            ToolSpec(
                name=entry["name"],
                description=desc if isinstance(desc, str) else None,
                input_schema=_json_encode(entry.get("inputSchema")),
                annotations=tool_annotations(entry.get("annotations")),
                meta=_json_encode(meta) if isinstance(meta, dict) else None,
            )
        )
    return out


# The MCP annotation keys, as the SDK's ToolAnnotations names its attributes.
_HINTS = (
    ("readOnlyHint", "read_only_hint"),
    ("destructiveHint", "destructive_hint"),
    ("idempotentHint", "idempotent_hint"),
    ("openWorldHint", "open_world_hint"),
)


def tool_annotations(raw: object) -> ToolAnnotations | None:
    """A tool's ``annotations``; a hint that is not a boolean is taken as not given."""
    if not isinstance(raw, dict):
        return None
    hints = {attr: raw[key] for key, attr in _HINTS if isinstance(raw.get(key), bool)}
    title = _str(raw, "title")
    if not hints and title is None:
        return None
    return ToolAnnotations(title=title, **hints)


__all__ = ["blocks", "call_result", "tool_annotations", "tool_specs"]
