#!/usr/bin/env python3
"""A raw JSON-RPC MCP server with one tool that holds its call until the test lets it go.

Standard library only; calls are served on threads. Tools:

- ``latch {entered, release}``: writes a line to the FIFO ``entered`` (the
  test then knows the call is in flight at the server), reads a line from
  the FIFO ``release``, then answers ``released``;
- ``echo {text}``: returns text.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

_out = threading.Lock()

TOOLS = [
    {"name": "latch", "description": "Hold the call until released.",
     "inputSchema": {"type": "object", "properties": {"entered": {"type": "string"}, "release": {"type": "string"}},
                     "required": ["entered", "release"]}},
    {"name": "echo", "description": "Echo text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
]


def send(msg: dict[str, Any]) -> None:
    with _out:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def call(rid: Any, name: str, args: dict[str, Any]) -> None:
    if name == "latch":
        with open(args["entered"], "w", encoding="utf-8") as entered:
            entered.write("in\n")
        with open(args["release"], encoding="utf-8") as release:
            release.readline()
        text = "released"
    else:
        text = str(args.get("text", ""))
    send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "latch", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            params = msg["params"]
            threading.Thread(target=call, args=(rid, params["name"], params.get("arguments") or {}),
                             daemon=True).start()
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
