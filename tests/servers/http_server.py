#!/usr/bin/env python3
"""An MCP SDK ``MCPServer`` served over streamable HTTP on 127.0.0.1.

Binds a free port itself (port 0) and prints ``PORT <n>`` on stdout once
uvicorn has finished start-up, so a test can connect at once: synchronise on
that line, never on sleep. Runs until terminated.

Tools: ``echo {text}``, ``add {a, b}`` (structured output), ``pixel`` (a PNG
image), ``pid`` (this process's pid: many connections share one server),
``look`` (annotated read-only, with a ``_meta``), ``add_tool {name}`` (adds a
tool ``name`` that echoes its ``text``, then notifies the client that the
tool list changed, on the call's own stream, before answering).
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp.types import ToolAnnotations, ToolListChangedNotification
from pydantic import BaseModel
from sdk_http import serve_http

PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)

mcp = MCPServer("http")


class Sum(BaseModel):
    sum: float


@mcp.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@mcp.tool()
def add(a: float, b: float) -> Sum:
    """Add two numbers, as structured output."""
    return Sum(sum=a + b)


@mcp.tool()
def pixel() -> Image:
    """A one-pixel PNG image."""
    return Image(data=PIXEL_PNG, format="png")


@mcp.tool()
def pid() -> str:
    """This server process's pid."""
    return str(os.getpid())


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False), meta={"example.com/k": 1})
def look() -> str:
    """A read-only tool."""
    return "looked"


@mcp.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool that echoes its text, and say the tool list changed."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    mcp.add_tool(added, name=name, description=f"Added at run time: {name}.")
    await ctx.session.send_notification(ToolListChangedNotification(), related_request_id=ctx.request_id)
    return f"added {name}"


if __name__ == "__main__":
    serve_http(mcp)
