#!/usr/bin/env python3
"""A minimal, fast raw JSON-RPC MCP server over stdio, for scripts/bench.py.

Standard library only, so it starts in milliseconds and costs next to nothing
per message: the benchmark then measures the *client* side. Answers are built
from pre-encoded byte templates; only the request id is spliced in.

Tools: ``echo {text}`` (returns text) and ``big {size}`` (a text result of
``size`` bytes of "x"; the encoded body is cached per size).
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "big",
        "description": "A text result of `size` bytes.",
        "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
    },
]

_BIG: dict[int, bytes] = {}


def _answer(rid: object, result_json: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + json.dumps(rid).encode() + b',"result":' + result_json + b"}\n"


def _text(s: str) -> bytes:
    return b'{"content":[{"type":"text","text":' + json.dumps(s).encode() + b"}]}"


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        msg = json.loads(line)
        method = msg.get("method")
        rid = msg.get("id")
        if rid is None:
            continue  # notifications (initialized, cancelled)
        if method == "tools/call":
            params = msg["params"]
            args = params.get("arguments") or {}
            name = params["name"]
            if name == "echo":
                body = _text(str(args.get("text", "")))
            elif name == "big":
                size = int(args.get("size", 1000))
                body = _BIG.get(size)
                if body is None:
                    body = _BIG[size] = _text("x" * size)
            else:
                err = {"code": -32602, "message": f"unknown tool {name}"}
                out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "error": err}).encode() + b"\n")
                out.flush()
                continue
        elif method == "initialize":
            version = msg["params"].get("protocolVersion", "2025-06-18")
            body = json.dumps(
                {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "bench", "version": "1"},
                }
            ).encode()
        elif method == "tools/list":
            body = json.dumps({"tools": TOOLS}).encode()
        elif method == "ping":
            body = b"{}"
        else:
            err = {"code": -32601, "message": "method not found"}
            out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "error": err}).encode() + b"\n")
            out.flush()
            continue
        out.write(_answer(rid, body))
        out.flush()


if __name__ == "__main__":
    main()
