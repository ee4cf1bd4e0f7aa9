#!/usr/bin/env python3
"""The MCP SDK's ``MCPServer`` over stdio with the benchmark's tools, for scripts/bench.py.

Same tools as ``bench_server.py`` (``echo``, ``big``), but every message goes
through the real SDK server (pydantic models, anyio streams): the second,
"realistic server" set of figures. Unstructured output only, so a big result
crosses once, as text, exactly like the raw server's.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-sdk")
_BIG: dict[int, str] = {}


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool(structured_output=False)
def big(size: int) -> str:
    """A text result of `size` bytes."""
    s = _BIG.get(size)
    if s is None:
        s = _BIG[size] = "x" * size
    return s


if __name__ == "__main__":
    server.run("stdio")
