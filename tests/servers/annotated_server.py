#!/usr/bin/env python3
"""A raw JSON-RPC MCP server whose tools carry annotations, and whose tool list changes at run time.

Standard library only. Calls are served on threads, so calls the client
sends together run together. Tools:

- ``read``: ``readOnlyHint`` true, with a ``_meta`` object and a title;
- ``write``: ``destructiveHint`` true (not read-only);
- ``put``: ``idempotentHint`` true, ``destructiveHint`` false;
- ``sneaky``: ``readOnlyHint`` and ``destructiveHint`` both true;
- ``plain``: no annotations;
- ``add_tool {name}``: adds a tool ``name`` (which echoes its ``text``),
  sends ``notifications/tools/list_changed``, then answers.

Every tool but ``add_tool`` takes optional arguments:

- ``crash_once``: a path; if it does not exist, the server creates it and
  exits with code 3 mid-call (so a retry on a fresh server succeeds);
- ``peer``: seconds to wait for another call with ``peer`` set to arrive
  while this one runs; answers ``met`` or ``alone``.

Flag ``--log PATH``: every tools/call received appends ``<name>`` to PATH.
"""

from __future__ import annotations

import os
import sys
import threading

from rawloop import error, result, send, serve, text

ARGS = sys.argv[1:]
LOG = ARGS[ARGS.index("--log") + 1] if "--log" in ARGS else None
LOCK = threading.Lock()
PEERS = threading.Condition()
ARRIVALS = [0]
INSIDE = [0]


def tool(name: str, annotations: dict | None = None, **extra: object) -> dict:
    entry: dict = {
        "name": name,
        "description": f"The {name} tool.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "crash_once": {"type": "string"},
                "peer": {"type": "number"},
                "text": {"type": "string"},
            },
        },
    }
    if annotations is not None:
        entry["annotations"] = annotations
    entry.update(extra)
    return entry


TOOLS = [
    tool("read", {"title": "Read it", "readOnlyHint": True}, _meta={"example.com/ui": {"icon": "eye"}}),
    tool("write", {"destructiveHint": True}),
    tool("put", {"idempotentHint": True, "destructiveHint": False}),
    tool("sneaky", {"readOnlyHint": True, "destructiveHint": True}),
    tool("plain"),
    tool("add_tool"),
]


def wait_for_peer(seconds: float) -> str:
    """Met: another call was running when this one arrived, or arrived while this one waited."""
    with PEERS:
        mine = ARRIVALS[0]
        ARRIVALS[0] += 1
        others = INSIDE[0] > 0
        INSIDE[0] += 1
        PEERS.notify_all()
        met = others or PEERS.wait_for(lambda: ARRIVALS[0] > mine + 1, timeout=seconds)
        INSIDE[0] -= 1
        return "met" if met else "alone"


def call(rid: object, name: str, args: dict) -> None:
    if LOG:
        with LOCK, open(LOG, "a") as f:
            f.write(name + "\n")
    crash = args.get("crash_once")
    if crash and not os.path.exists(crash):
        open(crash, "w").close()
        sys.stderr.write(f"crashing in {name}\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "add_tool":
        with LOCK:
            TOOLS.append(tool(str(args["text"])))
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        answer = f"added {args['text']}"
    elif "peer" in args:
        answer = wait_for_peer(float(args["peer"]))
    elif any(t["name"] == name for t in TOOLS):
        answer = f"{name}: {args.get('text', 'ok')}"
    else:
        error(rid, -32602, f"unknown tool {name}")
        return
    result(rid, text(answer))


def tools() -> list:
    with LOCK:
        return list(TOOLS)


if __name__ == "__main__":
    serve("annotated", tools, call, capabilities={"tools": {"listChanged": True}}, threaded=True)
