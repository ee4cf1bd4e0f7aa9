#!/usr/bin/env python3
"""A raw JSON-RPC MCP server that logs (``notifications/message``) and declares the ``logging`` capability.

Standard library only. It keeps the level ``logging/setLevel`` last set
(none: every level) and sends only messages at or above it. Tools:

- ``log {text, level}``: sends ``text`` at ``level`` (default ``info``)
  while the call runs, then answers ``logged``;
- ``after {text, level, gate}``: answers ``later``, then sends ``text``
  once a line can be read from the FIFO ``gate`` (on a thread: a message
  that comes while no request is in flight);
- ``wait {gate}``: answers ``waited`` once a line can be read from ``gate``;
- ``level``: answers the level it was last set to (``none``).
"""

from __future__ import annotations

import threading

from rawloop import answer, result, send, serve

LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
TOOLS = [
    {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "level": {"type": "string"}, "gate": {"type": "string"}},
        },
    }
    for name, description in [
        ("log", "Log while the call runs."),
        ("after", "Log once the call has answered."),
        ("wait", "Answer once the gate opens."),
        ("level", "The level the server was last set to."),
    ]
]
state = {"level": None}


def log(level: str, text: str) -> None:
    floor = state["level"]
    if floor is None or LEVELS.index(level) >= LEVELS.index(floor):
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": level, "data": text, "logger": "log"},
            }
        )


def later(gate: str, level: str, text: str) -> None:
    with open(gate) as lines:
        lines.readline()
    log(level, text)


def call(rid: object, name: str, args: dict) -> None:
    level = args.get("level", "info")
    if name == "log":
        log(level, args.get("text", ""))
        answer(rid, "logged")
    elif name == "after":
        answer(rid, "later")
        threading.Thread(target=later, args=(args["gate"], level, args.get("text", "")), daemon=True).start()
    elif name == "wait":
        with open(args["gate"]) as lines:
            lines.readline()
        answer(rid, "waited")
    elif name == "level":
        answer(rid, state["level"] or "none")


def other(rid: object, method: str, params: dict) -> None:
    if method == "logging/setLevel" and params.get("level") in LEVELS:
        state["level"] = params["level"]
        result(rid, {})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    serve("log", TOOLS, call, capabilities={"tools": {}, "logging": {}}, other=other)
