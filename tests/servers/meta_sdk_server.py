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

import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from sdk_http import serve_http

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


if __name__ == "__main__":
    if sys.argv[1:] == ["--http"]:
        serve_http(server)
    else:
        server.run("stdio")
