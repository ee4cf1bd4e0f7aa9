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

import asyncio
import socket
import sys

import anyio

from mcp.server.mcpserver import Context, MCPServer

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


async def _serve_http() -> None:
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            assert sockets is not None
            print(f"PORT {sockets[0].getsockname()[1]}", flush=True)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), log_level="warning", lifespan="on")
    await _Server(config).serve(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        try:
            asyncio.run(_serve_http())
        except KeyboardInterrupt:
            sys.exit(0)
    else:
        server.run("stdio")
