#!/usr/bin/env python3
"""A raw MCP server that speaks only 2026-07-28 (stateless): standard library only.

Over stdio (default), or streamable HTTP with ``--http`` (one JSON response
per POST; prints ``PORT <n>`` once it serves). It refuses ``initialize`` with
-32022 naming the versions it speaks, answers ``server/discover``, and
refuses any other request whose ``_meta`` lacks the per-request envelope
(``io.modelcontextprotocol/protocolVersion``, ``clientInfo``,
``clientCapabilities``) with -32602, as the revision requires.

- ``tools/list`` carries ``ttlMs`` (``--ttl-ms N``, default 60000) and
  ``cacheScope``; ``resultType`` is on every result;
- ``subscriptions/listen`` (stdio only) is acknowledged and held open; a
  tool-list change is announced on it;
- ``--supported V1,V2``: the versions it claims (default ``2026-07-28``);
- ``--first-probe CODE``: answers the first ``server/discover`` with the
  JSON-RPC error CODE (-32022 names the versions it speaks), as a server
  still starting up might; ``probes`` counts them;
- ``--legacy``: the opposite, a handshake-era server that refuses
  ``server/discover`` with -32601 but only once ``initialize`` has arrived:
  a client that waits for the probe's answer before sending the handshake
  never opens it (pipelining is what it checks).

Tools: ``echo {text}``; ``meta`` (the ``_meta`` of this call, as JSON);
``ask`` (answers ``InputRequiredResult``: an elicitation and a sampling
request); ``add_tool {name}`` (adds a tool and announces the change on the
listen stream before answering); ``listings`` (how many ``tools/list``
requests this process has served); ``exit`` (exits mid-call, code 3).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ARGS = sys.argv[1:]
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
ENVELOPE = (VERSION_KEY, "io.modelcontextprotocol/clientInfo", "io.modelcontextprotocol/clientCapabilities")
SUBSCRIPTION_KEY = "io.modelcontextprotocol/subscriptionId"


def flag(name: str, default: str) -> str:
    return ARGS[ARGS.index(name) + 1] if name in ARGS else default


SUPPORTED = flag("--supported", "2026-07-28").split(",")
TTL_MS = int(flag("--ttl-ms", "60000"))
HTTP = "--http" in ARGS
FIRST_PROBE = int(flag("--first-probe", "0"))
LEGACY = "--legacy" in ARGS


def schema(**props: str) -> dict[str, Any]:
    return {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}}


TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": "Echo the text back.", "inputSchema": schema(text="string")},
    {"name": "meta", "description": "The _meta of this call.", "inputSchema": schema()},
    {"name": "ask", "description": "Needs input from the client.", "inputSchema": schema()},
    {"name": "add_tool", "description": "Add a tool.", "inputSchema": schema(name="string")},
    {"name": "listings", "description": "tools/list requests served.", "inputSchema": schema()},
    {"name": "exit", "description": "Exit mid-call (code 3).", "inputSchema": schema()},
    {"name": "probes", "description": "server/discover requests received.", "inputSchema": schema()},
]
state = {"listings": 0, "probes": 0}
held: list[object] = []  # --legacy: server/discover ids not yet refused
listeners: list[object] = []
lock = threading.Lock()


def send(obj: dict[str, Any]) -> None:
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def error(rid: object, code: int, message: str, data: object = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": err}


def ok(rid: object, res: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", **res}}


def text(s: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": s}], "isError": False}


def call(rid: object, params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "echo":
        return ok(rid, text(str(args.get("text", ""))))
    if name == "meta":
        return ok(rid, text(json.dumps(meta)))
    if name == "listings":
        return ok(rid, text(str(state["listings"])))
    if name == "probes":
        return ok(rid, text(str(state["probes"])))
    if name == "exit":
        sys.stdout.flush()
        os._exit(3)
    if name == "ask":
        return {
            "jsonrpc": "2.0",
            "id": rid,
            "result": {
                "resultType": "input_required",
                "inputRequests": {
                    "confirm": {
                        "method": "elicitation/create",
                        "params": {
                            "mode": "form",
                            "message": "Really delete every file?",
                            "requestedSchema": {"type": "object", "properties": {"yes": {"type": "boolean"}}},
                        },
                    },
                    "draft": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 10}},
                },
                "requestState": "opaque-1",
            },
        }
    if name == "add_tool":
        TOOLS.append({"name": str(args["name"]), "description": "Added.", "inputSchema": schema(text="string")})
        for sub in listeners:
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/tools/list_changed",
                    "params": {"_meta": {SUBSCRIPTION_KEY: sub}},
                }
            )
        return ok(rid, text(f"added {args['name']}"))
    if any(t["name"] == name for t in TOOLS):
        return ok(rid, text(f"{name}: {args.get('text', '')}"))
    return error(rid, -32602, f"Unknown tool: {name}")


def handle(msg: dict[str, Any]) -> dict[str, Any] | None:
    method, rid = msg.get("method"), msg.get("id")
    params = msg.get("params") or {}
    meta = params.get("_meta") or {}
    if rid is None:
        if method == "notifications/cancelled" and params.get("requestId") in listeners:
            listeners.remove(params["requestId"])
            send(ok(params["requestId"], {}))  # the stream's graceful close
        return None
    if method == "initialize":
        return error(
            rid,
            -32022,
            "Unsupported protocol version: this server speaks only the stateless revision",
            {"supported": SUPPORTED, "requested": params.get("protocolVersion")},
        )
    if method == "server/discover":
        state["probes"] += 1
        if state["probes"] == 1 and FIRST_PROBE:
            data = {"supported": SUPPORTED, "requested": meta.get(VERSION_KEY)} if FIRST_PROBE == -32022 else None
            return error(rid, FIRST_PROBE, "Not now", data)
    requested = meta.get(VERSION_KEY)
    if requested not in SUPPORTED:
        if method == "server/discover" or requested is not None:
            return error(
                rid,
                -32022,
                f"Unsupported protocol version: {requested!r}",
                {"supported": SUPPORTED, "requested": requested},
            )
    missing = [k for k in ENVELOPE if k not in meta]
    if missing:
        return error(rid, -32602, f"Missing the request envelope in _meta: {', '.join(missing)}")
    if method == "server/discover":
        return ok(
            rid,
            {
                "supportedVersions": SUPPORTED,
                "capabilities": {"tools": {"listChanged": not HTTP}},
                "ttlMs": TTL_MS,
                "cacheScope": "private",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "modern", "version": "1"}},
            },
        )
    if method == "tools/list":
        state["listings"] += 1
        return ok(rid, {"tools": TOOLS, "ttlMs": TTL_MS, "cacheScope": "private"})
    if method == "tools/call":
        return call(rid, params, meta)
    if method == "subscriptions/listen" and not HTTP:
        listeners.append(rid)
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/subscriptions/acknowledged",
                "params": {"notifications": {"toolsListChanged": True}, "_meta": {SUBSCRIPTION_KEY: rid}},
            }
        )
        return None
    return error(rid, -32601, f"Method not found: {method}")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = handle(json.loads(body))
        data = b"" if reply is None else json.dumps(reply).encode()
        self.send_response(202 if reply is None else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def handle_legacy(msg: dict[str, Any]) -> dict[str, Any] | None:
    method, rid = msg.get("method"), msg.get("id")
    if method == "server/discover":
        held.append(rid)
        return None
    if method == "initialize":
        for probe in held:
            send(error(probe, -32601, "Method not found: server/discover"))
        return {
            "jsonrpc": "2.0",
            "id": rid,
            "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "legacy", "version": "1"},
            },
        }
    if method == "tools/list":
        state["listings"] += 1
        return {"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}}
    if method == "tools/call":
        params = msg.get("params") or {}
        return call(rid, params, params.get("_meta") or {})
    return None if rid is None else error(rid, -32601, f"Method not found: {method}")


def main() -> None:
    if LEGACY:
        for line in sys.stdin:
            if line.strip():
                reply = handle_legacy(json.loads(line))
                if reply is not None:
                    send(reply)
        return
    if HTTP:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        print(f"PORT {httpd.server_address[1]}", flush=True)
        httpd.serve_forever()
        return
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = handle(json.loads(line))
        if reply is not None:
            send(reply)


if __name__ == "__main__":
    main()
