#!/usr/bin/env python3
"""A raw JSON-RPC MCP server with one tool that holds its call until the test lets it go.

Standard library only; calls are served on threads. Tools:

- ``latch {entered, release}``: writes a line to the FIFO ``entered`` (the
  test then knows the call is in flight at the server), reads a line from
  the FIFO ``release``, then answers ``released``;
- ``echo {text}``: returns text.
"""

from __future__ import annotations

from typing import Any

from rawloop import answer, serve

TOOLS = [
    {
        "name": "latch",
        "description": "Hold the call until released.",
        "inputSchema": {
            "type": "object",
            "properties": {"entered": {"type": "string"}, "release": {"type": "string"}},
            "required": ["entered", "release"],
        },
    },
    {
        "name": "echo",
        "description": "Echo text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
]


def call(rid: Any, name: str, args: dict[str, Any]) -> None:
    if name == "latch":
        with open(args["entered"], "w", encoding="utf-8") as entered:
            entered.write("in\n")
        with open(args["release"], encoding="utf-8") as release:
            release.readline()
        text = "released"
    else:
        text = str(args.get("text", ""))
    answer(rid, text)


if __name__ == "__main__":
    serve("latch", TOOLS, call, threaded=True)
