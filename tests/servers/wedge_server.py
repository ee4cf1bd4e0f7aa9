#!/usr/bin/env python3
"""A single-threaded raw JSON-RPC MCP server that wedges: it blocks inside a tool.

Standard library only. ``stall`` writes ``stalling request <id>`` to stderr
(the test's signal that the call reached the server), then blocks its only
thread for good: it never reads stdin again, so it ignores
``notifications/cancelled`` and never answers a ping or another call. SIGTERM
is ignored too (only the tree kill ends it). ``pid`` answers its pid. Pings
are answered while it is not stalled.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from rawloop import answer, serve

TOOLS = [
    {"name": "stall", "description": "Block forever, ignoring cancellation.", "inputSchema": {"type": "object"}},
    {"name": "pid", "description": "Own pid.", "inputSchema": {"type": "object"}},
]


def call(rid: object, name: str, args: dict) -> None:
    if name == "stall":
        sys.stderr.write(f"stalling request {rid}\n")
        sys.stderr.flush()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    answer(rid, str(os.getpid()))


if __name__ == "__main__":
    serve("wedge", TOOLS, call)  # not threaded: the stall holds the one thread that reads stdin
