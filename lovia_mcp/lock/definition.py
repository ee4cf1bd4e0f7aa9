"""A tool's canonical definition, its hash, and what changed between two of them.

The definition is what a model reads, what decides how a call is
handled, and what the gateway hands its clients: the name, title,
description, input and output schema, the annotations (the server's
behaviour hints) and ``_meta`` (a client may act on it: an MCP App's UI
resource, say). ``_meta`` is in the definition only when the tool has one
(an empty object counts as none): a tool without it keeps the hash that
locks written before ``_meta`` was pinned hold for it.

Canonical JSON: object keys sorted, no insignificant whitespace, UTF-8
(not ``\\u`` escapes), fields that are absent left out (never ``null``).
Two listings of the same definition hash alike whatever order or spacing
the server wrote them in.

Caveats: the annotations are the hints lovia-mcp reads (``title``,
``readOnlyHint``, ``destructiveHint``, ``idempotentHint``,
``openWorldHint``); other keys in a server's annotations object are not
read, so not pinned. A server that puts changing values in ``_meta`` (a
timestamp, a counter) has that tool quarantined at each change: lock it
with ``pin="warn"`` or ``"off"``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

import msgspec
from lovia_mcp_worker.wire.mcpjson import ToolSpec

# The definition's fields, in the order a difference is shown.
FIELDS: Final = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "_meta")
HASH_PREFIX: Final = "sha256:"

_to_builtins = msgspec.to_builtins


def _schema(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        # The worker passes a schema on as the server wrote it; one that is
        # not JSON is pinned as its text, so that a change to it shows.
        return raw.decode("utf-8", "replace")


def definition(spec: ToolSpec) -> dict[str, Any]:
    """The tool's definition as a JSON object, the fields it does not have left out."""
    values: dict[str, Any] = {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "inputSchema": _schema(spec.input_schema),
        "outputSchema": _schema(spec.output_schema),
        "annotations": None if spec.annotations is None else _to_builtins(spec.annotations) or None,
        # Pinned as the server wrote it (the gateway forwards an object only).
        "_meta": _schema(spec.meta) or None,
    }
    return {k: v for k, v in values.items() if v is not None}


def canonical(value: dict[str, Any]) -> bytes:
    """``value`` as canonical JSON bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def definition_hash(value: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of a definition."""
    return HASH_PREFIX + hashlib.sha256(canonical(value)).hexdigest()


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The definition fields whose canonical values differ, in :data:`FIELDS` order."""
    keys = [*FIELDS, *sorted((old.keys() | new.keys()) - set(FIELDS))]
    return [k for k in keys if canonical({"v": old.get(k)}) != canonical({"v": new.get(k)})]


__all__ = ["FIELDS", "HASH_PREFIX", "canonical", "changed_fields", "definition", "definition_hash"]
