#!/usr/bin/env python3
"""A raw JSON-RPC MCP server for supervision tests: misbehaves without answering.

Standard library only. Unlike ``raw_server.py``'s tools, the greedy ones here
never answer: the only way a call ends is the supervisor stepping in, so a
test cannot pass by the call finishing before the guard looked.

Tools:

- ``wait``: never answers, but keeps reading stdin (a server that honours the
  protocol and would see a cancel notification).
- ``cancelled``: ``{"waiting": [ids of wait calls], "cancelled": [requestIds
  from notifications/cancelled]}`` as JSON text. Each cancel notification is
  also written to stderr as ``cancelled request <id>``.
- ``pid``: its pid.
- ``hold {mb}``: touches ``mb`` MB of memory one MB at a time, then blocks.
- ``fork {n, interval}``: forks up to ``n`` children, one every ``interval``
  seconds; the children ignore SIGTERM and block; then blocks.
- ``hold_in_children {n, mb}``: forks ``n`` children that each hold ``mb`` MB,
  then blocks (each process is small; the tree is not).
- ``burn_in_subprocesses {n, seconds}``: runs ``n`` short-lived child processes
  one after another, each burning ``seconds`` of CPU and reaped by this server,
  then answers ``"done"`` (if it gets that far).
- ``orphans {n}``: double-forks ``n`` children that exit at once (orphans that
  the worker, a subreaper, inherits and must reap), then answers.
- ``echo {text}``: returns text.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from rawloop import answer, error, serve

TOOLS = [
    {"name": n, "description": d, "inputSchema": {"type": "object", "properties": p}}
    for n, d, p in [
        ("wait", "Never answers; keeps reading.", {}),
        ("cancelled", "Cancel notifications received.", {}),
        ("pid", "Own pid.", {}),
        ("hold", "Hold memory, never answer.", {"mb": {"type": "integer"}}),
        ("fork", "Fork children, never answer.", {"n": {"type": "integer"}, "interval": {"type": "number"}}),
        (
            "hold_in_children",
            "Children hold memory, never answer.",
            {"n": {"type": "integer"}, "mb": {"type": "integer"}},
        ),
        ("burn_in_subprocesses", "Short-lived CPU burners.", {"n": {"type": "integer"}, "seconds": {"type": "number"}}),
        ("orphans", "Short-lived orphans.", {"n": {"type": "integer"}}),
        ("echo", "Echo.", {"text": {"type": "string"}}),
    ]
]

WAITING: list[object] = []
CANCELLED: list[object] = []
HELD: list[bytearray] = []


def block_forever() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def call(rid: object, name: str, args: dict) -> None:
    if name == "wait":
        WAITING.append(rid)
    elif name == "cancelled":
        answer(rid, json.dumps({"waiting": WAITING, "cancelled": CANCELLED}))
    elif name == "pid":
        answer(rid, str(os.getpid()))
    elif name == "echo":
        answer(rid, str(args.get("text", "")))
    elif name == "hold":
        for _ in range(int(args.get("mb", 100))):
            HELD.append(bytearray(b"\1" * (1 << 20)))
        block_forever()
    elif name == "hold_in_children":
        for _ in range(int(args.get("n", 4))):
            if os.fork() == 0:
                for _ in range(int(args.get("mb", 20))):
                    HELD.append(bytearray(b"\1" * (1 << 20)))
                block_forever()
        block_forever()
    elif name == "burn_in_subprocesses":
        burn = "import time\nend = time.process_time() + %f\nwhile time.process_time() < end: pass" % float(
            args.get("seconds", 0.5)
        )
        for _ in range(int(args.get("n", 4))):
            subprocess.run([sys.executable, "-c", burn], check=False)
        answer(rid, "done")
    elif name == "orphans":
        for _ in range(int(args.get("n", 5))):
            pid = os.fork()
            if pid == 0:
                if os.fork() == 0:
                    os._exit(0)  # the orphan: exits once its parent is gone
                os._exit(0)
            os.waitpid(pid, 0)
        answer(rid, "done")
    elif name == "fork":
        for _ in range(int(args.get("n", 10))):
            if os.fork() == 0:
                block_forever()
            time.sleep(float(args.get("interval", 0.0)))
        block_forever()
    else:
        error(rid, -32602, f"unknown tool {name}")


def cancelled(method: str, params: dict) -> None:
    if method == "notifications/cancelled":
        CANCELLED.append(params.get("requestId"))
        sys.stderr.write(f"cancelled request {CANCELLED[-1]}\n")
        sys.stderr.flush()


if __name__ == "__main__":
    serve("sup", TOOLS, call, notified=cancelled)
