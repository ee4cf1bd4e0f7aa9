#!/usr/bin/env python3
"""A raw JSON-RPC MCP server whose one tool returns every content block type, annotated.

Standard library only. ``blocks``: a text block with ``annotations`` and
``_meta``, an image, an audio clip, an embedded text resource with ``_meta``,
an embedded blob resource and a resource link; with ``{"unknown": true}``
also a block of a type MCP does not define (``"widget"``), which the SDK's
client refuses.
"""

from __future__ import annotations

from rawloop import result, serve

BLOCKS = [
    {
        "type": "text",
        "text": "hello",
        "annotations": {"audience": ["user"], "priority": 0.75},
        "_meta": {"example.com/trace": "t-1"},
    },
    {"type": "image", "data": "aGVsbG8gd29ybGQ=", "mimeType": "image/png", "annotations": {"priority": 0.1}},
    {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
    {
        "type": "resource",
        "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inline text"},
        "_meta": {"example.com/source": "disk"},
    },
    {
        "type": "resource",
        "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream", "blob": "AAAAAAAA"},
    },
    {"type": "resource_link", "uri": "file:///c.txt", "name": "c.txt", "annotations": {"audience": ["assistant"]}},
]
UNKNOWN = {"type": "widget", "knobs": 3}
TOOLS = [
    {
        "name": "blocks",
        "description": "Every block type.",
        "inputSchema": {"type": "object", "properties": {"unknown": {"type": "boolean"}}},
    }
]


def call(rid: object, name: str, args: dict) -> None:
    result(rid, {"content": BLOCKS + [UNKNOWN] if args.get("unknown") else BLOCKS, "isError": False})


if __name__ == "__main__":
    serve("blocks", TOOLS, call)
