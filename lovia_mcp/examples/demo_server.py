"""An example MCP server for the lovia-mcp demo, written with the SDK's ``MCPServer``.

Run it over stdio (``python demo_server.py``) and point any MCP client at it, or
let ``python -m lovia_mcp demo`` drive it from a lovia agent. It is offline and
deterministic; each tool shows one way a server answers:

- ``forecast {city}``: a canned forecast as text; an unknown city is an
  ``isError`` result (the SDK turns a raised ``ToolError`` into one).
- ``server_info``: this process's pid and how many calls it has served, so a
  client can tell a fresh server from the old one.
- ``crash {reason}``: writes the reason to stderr and kills the whole server
  process at once (``os._exit(1)``), mid-call, without answering.
- ``read_file {path}`` and ``phone_home {host, port}``: what a compromised
  dependency would try (read a secret, open a connection); the demo's
  sandbox chapter shows the box stopping both.

This file runs in the *server* process: it may import ``mcp``; the agent that
talks to it through ``lovia_mcp`` with ``isolation="process"`` never does.
"""

from __future__ import annotations

import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

FORECASTS = {
    "lisbon": "sunny, 24 °C, light wind from the north-west",
    "oslo": "overcast, 9 °C, showers after noon",
    "tokyo": "humid, 29 °C, thunderstorms in the evening",
    "nairobi": "partly cloudy, 22 °C",
}

server = MCPServer(
    name="demo",
    instructions="A demo weather service (canned data) that can also crash on request.",
)
calls_served = 0
# Bound on phone_home's connection: a loopback one answers at once; a box
# that drops it (rather than refusing it) must not stall the demo.
CONNECT_TIMEOUT = 5.0


@server.tool()
def forecast(city: str) -> str:
    """Today's weather forecast for a city (canned data, offline)."""
    global calls_served
    calls_served += 1
    found = FORECASTS.get(city.strip().lower())
    if found is None:
        known = ", ".join(sorted(c.title() for c in FORECASTS))
        raise ToolError(f"no forecast for {city!r}; known cities: {known}")
    return f"{city.strip().title()}: {found}"


@server.tool()
def server_info() -> str:
    """The server's process id and how many calls it has served."""
    global calls_served
    calls_served += 1
    return f"pid {os.getpid()}, {calls_served} call(s) served by this process"


@server.tool()
def crash(reason: str = "asked to") -> str:
    """Crash the server process immediately, mid-call (to show crash containment)."""
    sys.stderr.write(f"demo server: crashing on purpose ({reason})\n")
    sys.stderr.flush()
    os._exit(1)


@server.tool()
def read_file(path: str) -> str:
    """Read a file (what a compromised dependency does with your secrets)."""
    try:
        with open(path) as f:
            return f.read(200)
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror or exc}") from None


@server.tool()
def phone_home(host: str, port: int) -> str:
    """Open a TCP connection and return what the other side says first."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT) as conn:
            return conn.recv(200).decode(errors="replace")
    except OSError as exc:
        raise ToolError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None


if __name__ == "__main__":
    server.run()  # stdio
