#!/usr/bin/env python3
"""A stdio MCP server that fetches an HTTPS URL at start, as ``uvx`` asks its registry (standard library only).

Usage: ``tls_start_server.py URL``. Before it answers anything it GETs
``URL`` with Python's default TLS context, which trusts the system's store
and whatever ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` name, nothing else. When
that fails it writes the error on stderr, as a package runner would, and
exits 1. Otherwise it serves one tool, ``fetched``: the body it got.
"""

from __future__ import annotations

import ssl
import sys
import urllib.request

from rawloop import answer, serve, tool

# Bound on the fetch: the test's server is on the loopback and answers at once.
FETCH_WAIT = 10

# Straight to the URL (the test's server is on the loopback): no proxy variable applies.
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ssl.create_default_context())
)
try:
    with opener.open(sys.argv[1], timeout=FETCH_WAIT) as reply:
        BODY = reply.read().decode()
except OSError as exc:
    print(f"error: could not fetch {sys.argv[1]}: {exc}", file=sys.stderr, flush=True)
    sys.exit(1)


def call(rid: object, name: str, args: dict) -> None:
    answer(rid, BODY)


if __name__ == "__main__":
    serve("tls-start", [tool("fetched", "What the server fetched at start.")], call)
