#!/usr/bin/env python3
"""A raw JSON-RPC MCP server that keeps one value for whoever calls it: a session's state, in one process.

Standard library only. Tools:

- ``put {value}``: keeps ``value`` (replacing the last one), answers ``kept``;
- ``get``: answers the value kept (empty if none) and this process's pid, as JSON.
"""

from __future__ import annotations

import json
import os

from rawloop import answer, serve, tool

KEPT = [""]
TOOLS = [
    tool("put", "Keep a value.", {"value": {"type": "string"}}),
    tool("get", "The value kept, and this process's pid."),
]


def call(rid: object, name: str, args: dict[str, object]) -> None:
    if name == "put":
        KEPT[0] = str(args.get("value", ""))
        answer(rid, "kept")
    else:
        answer(rid, json.dumps({"value": KEPT[0], "pid": os.getpid()}))


if __name__ == "__main__":
    serve("store", TOOLS, call)
