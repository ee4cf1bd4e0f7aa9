#!/usr/bin/env python3
"""A small MCP SDK ``MCPServer`` over stdio: the real SDK on the server side.

Tools: ``greet {name}`` (text), ``divide {a, b}`` (structured output, with a
text rendering of it), ``pixel`` (a PNG image), ``whoami`` (its own pid).
Startup imports the SDK (~0.7 s), so tests use it sparingly; the raw server
covers everything else.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from pydantic import BaseModel

# A 1x1 transparent PNG (67 bytes): small, valid, and recognisable by size.
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)

server = MCPServer("sdk")


class Quotient(BaseModel):
    quotient: float
    remainder: int


@server.tool()
def greet(name: str) -> str:
    """Greet someone by name."""
    return f"Hello, {name}!"


@server.tool()
def divide(a: int, b: int) -> Quotient:
    """Integer division with remainder, as structured output."""
    return Quotient(quotient=a / b, remainder=a % b)


@server.tool()
def pixel() -> Image:
    """A one-pixel PNG image."""
    return Image(data=PIXEL_PNG, format="png")


@server.tool()
def whoami() -> str:
    """This server process's pid."""
    return str(os.getpid())


if __name__ == "__main__":
    server.run("stdio")
