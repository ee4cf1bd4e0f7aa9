"""The cheap way through the SDK for a 2026-07-28 ``tools/call`` or ``tools/list``: JSON mode, SSE only if it is slow.

The SDK answers a stateless request in one of two modes. In SSE mode
(its default) every request pays for an anyio task group, a memory stream,
a disconnect watcher and a cancel scope so that it can switch to
``text/event-stream`` if the handler emits a notification or runs past 15 s
(then it pings, so a proxy's idle timeout does not cut the call). In JSON mode
(``json_response=True``) it awaits the handler and writes one JSON response:
measured, about 0.15 ms of CPU less a call on this machine.

The gateway's handlers emit no notifications, so JSON mode loses only the
two things this module puts back, with plain asyncio:

- a call still running after :data:`SSE_WINDOW` commits to
  ``text/event-stream`` and pings, as the SDK does; the JSON answer, when it
  comes, is sent as the stream's one ``message`` event;
- a client that goes away cancels its call (the SDK's disconnect watcher).

Only requests that accept both media types take this path (one that accepts
no SSE is the SDK's to answer, with its 406), and only methods whose answers
the gateway's own handlers produce.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# As the SDK's own SSE mode: a call that has not answered in this long gets
# an event stream and a ping this often, so an idle proxy keeps it open.
SSE_WINDOW: Final = 15.0
SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
PING: Final = b": ping\r\n\r\n"
# Methods whose answers are the gateway's handlers' own (no notification
# stream, no subscription): the only ones sent this way.
FAST_METHODS: Final = frozenset({b"tools/call", b"tools/list"})


def accepts_both(accept: bytes) -> bool:
    """The SDK's rule (``check_accept_headers``): JSON and SSE both acceptable, wildcards counted."""
    kinds = {part.split(b";")[0].strip().lower() for part in accept.split(b",")}
    if b"*/*" in kinds:
        return True
    return bool(kinds & {b"application/json", b"application/*"}) and bool(kinds & {b"text/event-stream", b"text/*"})


async def serve_fast(handle: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve one stateless request through ``handle`` (a JSON-mode manager's), as SSE mode would answer it."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    watching: list[asyncio.Task[None]] = []
    committed = started = False

    async def watch() -> None:
        # After the body: the next message uvicorn has for this request is its disconnect.
        while (await receive())["type"] != "http.disconnect":
            pass
        if not gone.done():
            gone.set_result(None)

    async def body_then_watch() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not gone.done():
                gone.set_result(None)
        elif not message.get("more_body", False) and not watching:
            watching.append(asyncio.ensure_future(watch()))
        return message

    async def answer(message: Message) -> None:
        nonlocal started
        if not committed:
            started = True
            await send(message)
        elif message["type"] == "http.response.body":
            # The JSON answer as the stream's one event (what SSE mode sends last).
            body = message.get("body", b"")
            await send(
                {
                    "type": "http.response.body",
                    "body": b"event: message\r\ndata: " + body + b"\r\n\r\n",
                    "more_body": False,
                }
            )

    handler = asyncio.ensure_future(handle(scope, body_then_watch, answer))
    try:
        waiting: set[asyncio.Future[None]] = {handler, gone}
        done, _ = await asyncio.wait(waiting, timeout=SSE_WINDOW, return_when=asyncio.FIRST_COMPLETED)
        if not done and not started:
            committed = True
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            while not done:
                await send({"type": "http.response.body", "body": PING, "more_body": True})
                done, _ = await asyncio.wait(waiting, timeout=SSE_WINDOW, return_when=asyncio.FIRST_COMPLETED)
        elif not done:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not handler.done():
            # The client went away: its call is cancelled, as in SSE mode.
            handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler
    finally:
        handler.cancel()
        for task in watching:
            task.cancel()


__all__ = ["FAST_METHODS", "SSE_HEADERS", "SSE_WINDOW", "accepts_both", "serve_fast"]
