"""Serve an SDK ``MCPServer`` over streamable HTTP on a free port of 127.0.0.1.

Shared by the SDK test servers (``http_server.py``, ``meta_sdk_server.py``,
``progress_sdk_server.py``), which import it from their own folder. It binds
port 0 itself and prints ``PORT <n>`` on stdout once uvicorn has finished
start-up (lifespan included), so a test synchronises on that line, never on
sleep. Runs until terminated; Ctrl-C exits 0.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any


async def _serve(server: Any, options: dict[str, Any]) -> None:
    # Imported here: a server that also speaks stdio starts without uvicorn.
    import uvicorn

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            # Start-up done: requests are served from now on (the test's connect-back).
            assert sockets is not None
            print(f"PORT {sockets[0].getsockname()[1]}", flush=True)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app = server.streamable_http_app(host="127.0.0.1", **options)
    await Announcing(uvicorn.Config(app, log_level="warning", lifespan="on")).serve(sockets=[sock])


def serve_http(server: Any, **options: Any) -> None:
    """Serve ``server`` (an ``MCPServer``) until terminated; ``options`` go to its ``streamable_http_app``."""
    try:
        asyncio.run(_serve(server, options))
    except KeyboardInterrupt:
        sys.exit(0)


__all__ = ["serve_http"]
