#!/usr/bin/env python3
"""A raw JSON-RPC MCP server over stdio whose tool names no provider accepts as they are.

Standard library only. It lists names with a space, an accent, a dot, a
300-character name, a name that only differs from another by a dot, and one
name twice (:data:`TOOLS`). Every call answers with a text naming the raw
tool name it was called with, so a test sees which name reached the server.
Request ids are echoed back exactly as received, whatever their type.
"""

from __future__ import annotations

from rawloop import answer, error, serve

RAW_NAMES = ["get weather", "héllo", "a.b", "a_b", "x" * 300, "dup", "dup", "ok_name"]

TOOLS = [
    {"name": name, "description": f"Tool {i}, raw name {name!r}.", "inputSchema": {"type": "object", "properties": {}}}
    for i, name in enumerate(RAW_NAMES)
]


def call(rid: object, name: str, args: dict) -> None:
    if name in RAW_NAMES:
        answer(rid, f"called {name}")
    else:
        error(rid, -32602, f"unknown tool {name!r}")


if __name__ == "__main__":
    # Unescaped UTF-8 bytes, as most servers send non-ASCII names, whatever
    # locale the server was started under.
    serve("names", TOOLS, call, utf8=True)
