#!/usr/bin/env python3
"""A raw JSON-RPC MCP server that reports progress (``notifications/progress``).

Standard library only. Tools:

- ``report {steps, total, gate}``: one progress notification per step
  (``i/total``, message ``step i``) for the call's ``progressToken``; with
  ``gate`` (a FIFO path), after the first one it blocks until a line can be
  read from the FIFO, so a test sees progress while the call is running;
  then answers ``done``. Without a token it answers ``no token``.
- ``paced {steps, gate}``: progress ``i/steps`` (message ``step i``) per
  step, each sent only once a line can be read from the FIFO ``gate`` after
  the one before (the first opens it), so every step reaches a client that
  writes a line per update it gets, whatever the coalescing on the way;
  then answers ``paced``.
- ``flood {n}``: ``n`` progress notifications as fast as it can write them,
  then answers ``flooded n``.
- ``meta``: answers the ``_meta`` its call carried, as JSON.
"""

from __future__ import annotations

import json
import sys

from rawloop import answer, send, serve

TOOLS = [
    {
        "name": "report",
        "description": "Progress per step.",
        "inputSchema": {
            "type": "object",
            "properties": {"steps": {"type": "integer"}, "total": {"type": "number"}, "gate": {"type": "string"}},
        },
    },
    {
        "name": "paced",
        "description": "Progress per step, each once the client has the one before.",
        "inputSchema": {
            "type": "object",
            "properties": {"steps": {"type": "integer"}, "gate": {"type": "string"}},
        },
    },
    {
        "name": "flood",
        "description": "Many progress notifications.",
        "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
    {"name": "meta", "description": "The call's _meta.", "inputSchema": {"type": "object", "properties": {}}},
]


def progress(token: object, value: float, total: float | None, message: str | None) -> None:
    params: dict = {"progressToken": token, "progress": value}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


def call(rid: object, name: str, args: dict, meta: dict) -> None:
    token = meta.get("progressToken")
    if name == "meta":
        answer(rid, json.dumps(meta))
    elif token is None:
        answer(rid, "no token")
    elif name == "report":
        steps = int(args.get("steps", 3))
        total = args.get("total", steps)
        for i in range(1, steps + 1):
            progress(token, i, total, f"step {i}")
            if i == 1 and args.get("gate"):
                with open(args["gate"]) as gate:
                    gate.readline()
        answer(rid, "done")
    elif name == "paced":
        steps = int(args.get("steps", 3))
        gate = None
        for i in range(1, steps + 1):
            progress(token, i, steps, f"step {i}")
            if gate is None:
                gate = open(args["gate"])  # a line per step; closed below
            gate.readline()
        if gate is not None:
            gate.close()
        answer(rid, "paced")
    elif name == "flood":
        n = int(args.get("n", 10000))
        out = sys.stdout
        for i in range(1, n + 1):
            out.write(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": i, "total": n},
                    }
                )
                + "\n"
            )
        out.flush()
        answer(rid, f"flooded {n}")


if __name__ == "__main__":
    serve("progress", TOOLS, call, meta=True)
