#!/usr/bin/env python3
"""A raw JSON-RPC MCP server with one tool whose argument is mirrored in an HTTP header.

Standard library only. Tool ``route {region}``: ``region`` carries
``"x-mcp-header": "Region"`` in its schema, so a 2026-07-28 client sends it
as ``Mcp-Param-Region`` too and a server must reject a header that disagrees
with the body. Answers ``region``.
"""

from __future__ import annotations

from rawloop import answer, empty_result, serve

TOOL = {
    "name": "route",
    "description": "Answer the region.",
    "inputSchema": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
}


def call(rid: object, name: str, args: dict) -> None:
    answer(rid, str(args.get("region")))


if __name__ == "__main__":
    serve("header", [TOOL], call, other=empty_result)
