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

import json
import os
import signal
import sys
import time

TOOLS = [
    {"name": "stall", "description": "Block forever, ignoring cancellation.", "inputSchema": {"type": "object"}},
    {"name": "pid", "description": "Own pid.", "inputSchema": {"type": "object"}},
]


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wedge", "version": "1"},
            }})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "tools/call" and msg["params"]["name"] == "stall":
            sys.stderr.write(f"stalling request {rid}\n")
            sys.stderr.flush()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(3600)
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": str(os.getpid())}]}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
