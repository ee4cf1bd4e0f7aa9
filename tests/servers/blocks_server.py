#!/usr/bin/env python3
"""A raw JSON-RPC MCP server whose one tool returns every content block type, annotated.

Standard library only. ``blocks``: a text block with ``annotations`` and
``_meta``, an image, an audio clip, an embedded text resource with ``_meta``,
an embedded blob resource and a resource link; with ``{"unknown": true}``
also a block of a type MCP does not define (``"widget"``), which the SDK's
client refuses.
"""

from __future__ import annotations

import json
import sys

BLOCKS = [
    {"type": "text", "text": "hello", "annotations": {"audience": ["user"], "priority": 0.75},
     "_meta": {"example.com/trace": "t-1"}},
    {"type": "image", "data": "aGVsbG8gd29ybGQ=", "mimeType": "image/png", "annotations": {"priority": 0.1}},
    {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
    {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inline text"},
     "_meta": {"example.com/source": "disk"}},
    {"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream", "blob": "AAAAAAAA"}},
    {"type": "resource_link", "uri": "file:///c.txt", "name": "c.txt", "annotations": {"audience": ["assistant"]}},
]
UNKNOWN = {"type": "widget", "knobs": 3}
TOOLS = [{"name": "blocks", "description": "Every block type.",
          "inputSchema": {"type": "object", "properties": {"unknown": {"type": "boolean"}}}}]


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "blocks", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            unknown = bool(((msg.get("params") or {}).get("arguments") or {}).get("unknown"))
            content = BLOCKS + [UNKNOWN] if unknown else BLOCKS
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": content, "isError": False}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
