"""The answers the gateway writes itself, not through the SDK: plain text, JSON, and its refusals.

Every refusal the gateway makes itself is a JSON-RPC error (``id`` null, a
hint in ``data``) with an HTTP status (:class:`RpcRefusal`): the MCP SDK's
client reads such a body at any status and raises it, message and data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# JSON-RPC error code for "try again elsewhere" (the server-defined range):
# a draining gateway, a full session table, a server not open.
UNAVAILABLE: Final = -32000

Headers = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class RpcRefusal:
    """A request the gateway answers itself with HTTP ``status`` and a JSON-RPC error: ``code``, what happened,
    what to do, and any headers of the answer (a challenge, ``Retry-After``)."""

    status: int
    code: int
    message: str
    hint: str
    headers: Headers = ()

    async def send(self, send: Send) -> None:
        error = {"code": self.code, "message": self.message, "data": {"hint": self.hint}}
        await json_answer(send, self.status, {"jsonrpc": "2.0", "id": None, "error": error}, self.headers)


async def plain(send: Send, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def json_answer(send: Send, status: int, value: Any, headers: Headers = ()) -> None:
    body = json.dumps(value).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def answered(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> int:
    """Run the ASGI ``app``; the HTTP status it answered with (0 if none)."""
    status = 0

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    await app(scope, receive, watch)
    return status


__all__ = ["UNAVAILABLE", "Headers", "RpcRefusal", "answered", "json_answer", "plain"]
