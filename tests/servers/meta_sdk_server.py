#!/usr/bin/env python3
"""An SDK ``MCPServer`` that reports the ``_meta`` each request brought: both protocol eras.

Over stdio (default) or streamable HTTP (``--http``: binds a free port and
prints ``PORT <n>`` once it serves, as ``http_server.py`` does). The SDK's own
server speaks the handshake era and 2026-07-28 alike, choosing by the
client's first request.

Tools:

- ``meta``: the ``_meta`` of this ``tools/call`` as JSON, with the protocol
  version the request was served at (``"version"``);
- ``echo {text}``: the text back;
- ``add_tool {name}``: adds a tool and announces it to ``subscriptions/listen``
  streams (the modern era's only route for it);
- ``crash``: exits the process mid-call (code 3).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from typing import Any

import uvicorn

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("meta")


@server.tool()
def meta(ctx: Context) -> str:
    """The _meta this request carried, as JSON."""
    seen: Any = ctx.request_context.meta
    return json.dumps({"meta": dict(seen or {}), "version": ctx.request_context.protocol_version}, default=str)


@server.tool()
def echo(text: str) -> str:
    """The text back."""
    return text


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool that echoes its text; announce it on subscriptions/listen streams (2026-07-28)."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"Added at run time: {name}.")
    await ctx.notify_tools_changed()
    return f"added {name}"


@server.tool()
def crash() -> str:
    """Exit the server process mid-call."""
    os._exit(3)


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        # Start-up done: requests are served from now on (the test's connect-back).
        assert sockets is not None
        print(f"PORT {sockets[0].getsockname()[1]}", flush=True)


async def serve_http() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app = server.streamable_http_app(host="127.0.0.1")
    await _Server(uvicorn.Config(app, log_level="warning", lifespan="on")).serve(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["--http"]:
        asyncio.run(serve_http())
    else:
        server.run("stdio")
