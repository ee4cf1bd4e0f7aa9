#!/usr/bin/env python3
"""An MCP SDK ``MCPServer`` whose tool reports progress with ``ctx.report_progress``.

Over stdio by default; with ``--http`` it serves streamable HTTP on a free
port of 127.0.0.1 and prints ``PORT <n>`` once it serves (as
``http_server.py`` does).

Tool: ``report {steps, gate}``: ``report_progress(i, steps, "step i")`` per
step; with ``gate`` (a FIFO path), after the first one it waits until a line
can be read from the FIFO; then answers ``done``.
"""

from __future__ import annotations

import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from sdk_http import serve_http

server = MCPServer("progress-sdk")


def _wait_gate(path: str) -> None:
    with open(path) as gate:
        gate.readline()


@server.tool()
async def report(ctx: Context, steps: int = 3, gate: str = "") -> str:
    """Report progress once per step."""
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
        if i == 1 and gate:
            await anyio.to_thread.run_sync(_wait_gate, gate)
    return "done"


if __name__ == "__main__":
    if "--http" in sys.argv:
        serve_http(server)
    else:
        server.run("stdio")
