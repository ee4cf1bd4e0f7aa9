#!/usr/bin/env python3
"""A raw JSON-RPC MCP server over stdio whose tool names no provider accepts as they are.

Standard library only. It lists names with a space, an accent, a dot, a
300-character name, a name that only differs from another by a dot, and one
name twice (:data:`TOOLS`). Every call answers with a text naming the raw
tool name it was called with, so a test sees which name reached the server.
Request ids are echoed back exactly as received, whatever their type.
"""

from __future__ import annotations

import json
import sys

RAW_NAMES = ["get weather", "héllo", "a.b", "a_b", "x" * 300, "dup", "dup", "ok_name"]

TOOLS = [
    {"name": name, "description": f"Tool {i}, raw name {name!r}.", "inputSchema": {"type": "object", "properties": {}}}
    for i, name in enumerate(RAW_NAMES)
]


def send(obj: dict) -> None:
    # Unescaped UTF-8 bytes, as most servers send non-ASCII names, whatever
    # locale the server was started under.
    sys.stdout.buffer.write((json.dumps(obj, ensure_ascii=False) + "\n").encode())
    sys.stdout.buffer.flush()


def main() -> None:
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        msg = json.loads(line)
        method = msg.get("method")
        if "id" not in msg:
            continue  # a notification (initialized, cancelled) or a response
        rid = msg["id"]
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "names", "version": "1"},
            }})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name in RAW_NAMES:
                result = {"content": [{"type": "text", "text": f"called {name}"}]}
                send({"jsonrpc": "2.0", "id": rid, "result": result})
            else:
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"unknown tool {name!r}"}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
