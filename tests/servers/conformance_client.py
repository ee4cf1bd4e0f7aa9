#!/usr/bin/env python3
"""lovia-mcp's client side as the official conformance suite's client under test.

``conformance client --command "python conformance_client.py"`` starts a test
server of its own for a scenario, then runs this with the server's URL as the
last argument and the scenario's name in ``MCP_CONFORMANCE_SCENARIO``. This
opens the URL as an ``MCPServerStreamableHTTP`` through lovia-mcp (process
isolation by default: the worker speaks HTTP; ``--isolation none`` in this
process), which makes the handshake and lists the tools, then does what the
scenario asks of a tools client:

- ``initialize``: nothing more;
- ``tools_call``: calls ``add_numbers {a: 5, b: 3}``;
- ``sse-retry``: calls ``test_reconnection``, whose answer comes on a resumed
  stream after the server closed the first one;
- ``elicitation-sep1034-client-defaults``: calls
  ``test_client_elicitation_defaults`` (the server asks for elicitation).

Prints each result's text; exits 1 with the error when the open or a call fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from lovia_mcp import MCPError, MCPServerStreamableHTTP

CALLS: dict[str, tuple[str, dict[str, object]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}
# A call's bound: the suite's own timeout per scenario is 30 s.
CALL_TIMEOUT = 20.0


async def main(url: str, scenario: str, isolation: str) -> int:
    server = MCPServerStreamableHTTP(name="conformance", url=url, timeout=CALL_TIMEOUT, isolation=isolation)
    try:
        async with server.session() as conn:
            print("tools:", ", ".join(sorted(t.name for t in conn.tools())), flush=True)
            if scenario in CALLS:
                name, arguments = CALLS[scenario]
                result = await conn.call_tool(name, arguments)
                print(f"{name}:", result.content, flush=True)
    except MCPError as exc:
        print(f"conformance_client: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--isolation", choices=["process", "none"], default="process")
    ap.add_argument("url")
    ns = ap.parse_args()
    sys.exit(asyncio.run(main(ns.url, os.environ.get("MCP_CONFORMANCE_SCENARIO", ""), ns.isolation)))
