#!/usr/bin/env python3
"""A raw MCP stdio server whose calls run together (one thread each): for denials during overlapping calls.

- ``hold {path}``: opens the FIFO ``path`` (the test made it in the server's
  cwd) and answers ``released`` once the test writes a line to it: a call
  that stays in flight exactly as long as the test wants;
- ``proxy_get {url}``: GET the URL through the proxy named by ``HTTP_PROXY``,
  as escape_server.py's tool (``ok STATUS BODY``).
"""

from __future__ import annotations

from escape_server import attempt, proxy_get
from rawloop import answer, serve, tool

TOOLS = [
    tool("hold", "wait for a line on a FIFO", {"path": {"type": "string"}}),
    tool("proxy_get", "GET through the proxy", {"url": {"type": "string"}}),
]


def hold(path: str) -> str:
    with open(path, encoding="utf-8") as gate:
        gate.readline()
    return "released"


def call_tool(rid: object, name: str, args: dict) -> None:
    if name == "hold":
        answer(rid, attempt(lambda: hold(args["path"])))
    elif name == "proxy_get":
        answer(rid, attempt(lambda: proxy_get(args["url"])))
    else:
        answer(rid, f"unknown tool {name}")


if __name__ == "__main__":
    serve("overlap", TOOLS, call_tool, threaded=True)
