#!/usr/bin/env python3
"""A raw JSON-RPC MCP server with one tool whose argument is mirrored in an HTTP header.

Standard library only. Tool ``route {region}``: ``region`` carries
``"x-mcp-header": "Region"`` in its schema, so a 2026-07-28 client sends it
as ``Mcp-Param-Region`` too and a server must reject a header that disagrees
with the body. Answers ``region``.
"""

from __future__ import annotations

import json
import sys

TOOL = {"name": "route", "description": "Answer the region.", "inputSchema": {
    "type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}}


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        method = msg.get("method")
        if method == "initialize":
            result: dict = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                            "serverInfo": {"name": "header", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [TOOL]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": str(msg["params"]["arguments"].get("region"))}]}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
