#!/usr/bin/env python3
"""A raw JSON-RPC MCP server over stdio that is legal but unusual, or hostile.

Standard library only; one JSON object per line each way; every request id is
echoed back exactly as it was received. It answers ``initialize``,
``tools/list``, ``tools/call`` and ``ping``, and ignores notifications (except
that it records ``notifications/cancelled``). Requests are served in the order
they arrive, one at a time.

Flags:

- ``--int-ids``: like servers written against an SDK that types ids as
  numbers: a request whose id is not a JSON integer is never answered
  (``initialize`` included).
- ``--id-last``: every reply is written ``{"result"|"error": ..., "jsonrpc":
  "2.0", "id": ...}`` (the TypeScript SDK's key order).
- ``--version V``: answer ``initialize`` with protocolVersion V instead of the
  client's offer.
- ``--repeat-cursor``: ``tools/list`` always returns the tools plus
  ``"nextCursor": "again"``, the same cursor for ever.

Tools:

- ``echo {text}``: returns text.
- ``show_id``: the request id it received, as JSON ``{"id": ..., "type": ...}``.
- ``big_id_last {size}``: a text result of ``size`` bytes, its reply line
  written with ``id`` last whatever the flags.
- ``big_nested_id {size, decoy}``: a text result of ``size`` bytes whose result
  object starts with a nested ``"id": decoy``, before the real id.
- ``deep {depth}``: ``structuredContent`` nested ``depth`` arrays deep, plus a
  text block.
- ``surrogate``: a text block holding a lone surrogate escape (``\\ud800``).
- ``close_stdin``: closes its stdin, answers "closing", then lives on without
  reading again (SIGTERM still ends it).
- ``ask_sampling``: sends the client a ``sampling/createMessage`` request (id
  ``"s-1"``), waits for the response, and returns it as JSON text.
- ``ask_ping``: the same with a ``ping`` request (id 77).
- ``wait_cancel``: never answers.
- ``last_cancel``: the ``requestId`` of the last ``notifications/cancelled``
  received, its type, and whether it names a ``wait_cancel`` request received,
  as JSON (``null`` if none came).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

ARGS = sys.argv[1:]
INT_IDS = "--int-ids" in ARGS
ID_LAST = "--id-last" in ARGS
REPEAT_CURSOR = "--repeat-cursor" in ARGS
VERSION = ARGS[ARGS.index("--version") + 1] if "--version" in ARGS else None

LAST_CANCEL: dict[str, Any] | None = None
# Ids of the wait_cancel requests received, exactly as received.
WAITING: list[object] = []


def write_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def send(obj: dict[str, Any]) -> None:
    write_line(json.dumps(obj))


def reply(rid: object, key: str, value: object) -> None:
    """A response, its keys in the order the flags ask for."""
    if ID_LAST:
        send({key: value, "jsonrpc": "2.0", "id": rid})
    else:
        send({"jsonrpc": "2.0", "id": rid, key: value})


def result(rid: object, res: object) -> None:
    reply(rid, "result", res)


def error(rid: object, code: int, message: str) -> None:
    reply(rid, "error", {"code": code, "message": message})


def text(s: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": s}]}


def tool(name: str, desc: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "description": desc, "inputSchema": {"type": "object", "properties": props or {}}}


INT = {"type": "integer"}
TOOLS = [
    tool("echo", "Echo the text back.", {"text": {"type": "string"}}),
    tool("show_id", "The request id as received."),
    tool("big_id_last", "A large result with its id written last.", {"size": INT}),
    tool("big_nested_id", "A large result with a nested id before the real one.", {"size": INT, "decoy": {}}),
    tool("deep", "Deeply nested structured content.", {"depth": INT}),
    tool("surrogate", "Text with a lone surrogate escape."),
    tool("close_stdin", "Close stdin and live on."),
    tool("ask_sampling", "Ask the client for sampling; return its response."),
    tool("ask_ping", "Ping the client; return its response."),
    tool("wait_cancel", "Never answers."),
    tool("last_cancel", "The last cancellation received."),
]


def read_message() -> dict[str, Any] | None:
    """The next JSON object from stdin; None at end of input."""
    while True:
        line = sys.stdin.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if isinstance(msg, dict):
            return msg


def ask_client(rid: object, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Send the client a request, serve what arrives meanwhile, return its response."""
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        msg = read_message()
        if msg is None:
            sys.exit(0)
        if "method" not in msg and msg.get("id") == rid:
            return msg
        handle(msg)


def call(rid: object, name: str, args: dict[str, Any]) -> None:
    if name == "echo":
        result(rid, text(str(args.get("text", ""))))
    elif name == "show_id":
        result(rid, text(json.dumps({"id": rid, "type": type(rid).__name__})))
    elif name == "big_id_last":
        body = json.dumps(text("x" * int(args.get("size", 1000))))
        write_line('{"jsonrpc":"2.0","result":' + body + ',"id":' + json.dumps(rid) + "}")
    elif name == "big_nested_id":
        content = json.dumps(text("x" * int(args.get("size", 1000)))["content"])
        res = '{"id":' + json.dumps(args.get("decoy")) + ',"content":' + content + "}"
        write_line('{"jsonrpc":"2.0","result":' + res + ',"id":' + json.dumps(rid) + "}")
    elif name == "deep":
        depth = int(args.get("depth", 1000))
        res = '{"content":[{"type":"text","text":"deep"}],"structuredContent":' + "[" * depth + "]" * depth + "}"
        if ID_LAST:
            write_line('{"result":' + res + ',"jsonrpc":"2.0","id":' + json.dumps(rid) + "}")
        else:
            write_line('{"jsonrpc":"2.0","id":' + json.dumps(rid) + ',"result":' + res + "}")
    elif name == "surrogate":
        # json.dumps escapes the lone surrogate as the six characters \ud800.
        result(rid, text("bad " + chr(0xD800) + " char"))
    elif name == "close_stdin":
        # Closed before answering: once the client has the answer, any write
        # to this server's stdin meets a pipe without a reader.
        os.close(0)
        result(rid, text("closing"))
        while True:
            signal.pause()
    elif name == "ask_sampling":
        response = ask_client(
            "s-1",
            "sampling/createMessage",
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
                "maxTokens": 10,
            },
        )
        result(rid, text(json.dumps(response)))
    elif name == "ask_ping":
        result(rid, text(json.dumps(ask_client(77, "ping", {}))))
    elif name == "wait_cancel":
        WAITING.append(rid)  # never answered
    elif name == "last_cancel":
        result(rid, text(json.dumps(LAST_CANCEL)))
    else:
        error(rid, -32602, f"unknown tool {name}")


def handle(msg: dict[str, Any]) -> None:
    global LAST_CANCEL
    method = msg.get("method")
    if not isinstance(method, str):
        return  # a response nobody asked for
    if "id" not in msg:
        if method == "notifications/cancelled":
            request_id = (msg.get("params") or {}).get("requestId")
            LAST_CANCEL = {
                "requestId": request_id,
                "type": type(request_id).__name__,
                # Names a wait_cancel request, same JSON type and value (1 is not "1" or 1.0).
                "names_waiting_call": any(type(w) is type(request_id) and w == request_id for w in WAITING),
            }
        return
    rid = msg["id"]
    if INT_IDS and (not isinstance(rid, int) or isinstance(rid, bool)):
        return  # dropped, as a server that types ids as numbers does
    if method == "initialize":
        offer = (msg.get("params") or {}).get("protocolVersion", "2025-06-18")
        result(
            rid,
            {
                "protocolVersion": VERSION if VERSION is not None else offer,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            },
        )
    elif method == "tools/list":
        page: dict[str, Any] = {"tools": TOOLS}
        if REPEAT_CURSOR:
            page["nextCursor"] = "again"
        result(rid, page)
    elif method == "tools/call":
        params = msg.get("params") or {}
        call(rid, params.get("name", ""), params.get("arguments") or {})
    elif method == "ping":
        result(rid, {})
    else:
        error(rid, -32601, "method not found")


def main() -> None:
    while True:
        msg = read_message()
        if msg is None:
            return
        handle(msg)


if __name__ == "__main__":
    main()
