#!/usr/bin/env python3
"""A raw JSON-RPC MCP server that crash-loops on demand, and counts its own starts.

Standard library only. Every start appends a line (its pid) to the file
named by ``--starts`` before anything else, so a test counts the processes
started, whoever started them and however they ended.

Flags:

- ``--starts PATH`` (required): the file each start appends its pid to;
- ``--serve N``: the first ``N`` starts (counted in that file) serve; every
  later one writes a stderr line and exits with code 5 before answering the
  MCP handshake (default 1: only the open's own start serves);
- ``--calls K``: a serving start answers ``K`` tools/calls, then exits with
  code 3 on the next one without answering it (default: answers them all).

Tools: ``echo {text}``, ``pid``.
"""

from __future__ import annotations

import os
import sys

from rawloop import answer, serve, tool

ARGS = sys.argv[1:]


def flag(name: str, default: str | None = None) -> str | None:
    return ARGS[ARGS.index(name) + 1] if name in ARGS else default


STARTS = flag("--starts")
SERVE = int(flag("--serve", "1") or 1)
CALLS = flag("--calls")
TOOLS = [tool("echo", "Echo the text back.", {"text": {"type": "string"}}), tool("pid", "Own pid.")]
served = [0]


def call(rid: object, name: str, args: dict) -> None:
    if CALLS is not None and served[0] >= int(CALLS):
        print(f"crashloop: exiting on call {served[0] + 1}", file=sys.stderr, flush=True)
        os._exit(3)
    served[0] += 1
    answer(rid, str(os.getpid()) if name == "pid" else str(args.get("text", "")))


def main() -> None:
    if STARTS is None:
        sys.exit("crashloop_server.py: --starts PATH is required")
    with open(STARTS, "a") as f:
        f.write(f"{os.getpid()}\n")
    with open(STARTS) as f:
        start = sum(1 for _ in f)
    if start > SERVE:
        print(f"crashloop: start {start} dies before the handshake", file=sys.stderr, flush=True)
        sys.exit(5)
    serve("crashloop", TOOLS, call)


if __name__ == "__main__":
    main()
