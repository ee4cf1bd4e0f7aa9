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
the gateway's own handlers produce. A request that asks for what a server
says while it runs (a ``progressToken`` or a log level in its ``_meta``: :mod:`.relay`)
needs the event stream JSON mode has not: its body is read first (at most
the body cap), and it goes to the SDK's streaming manager instead, its body
handed on as it came.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import msgspec
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


class _Params(msgspec.Struct):
    meta: dict[str, msgspec.Raw] | None = msgspec.field(name="_meta", default=None)


class _Request(msgspec.Struct):
    params: _Params | None = None


_request = msgspec.json.Decoder(_Request)
# The _meta keys that ask for messages on the request's own stream.
STREAMED_META: Final = frozenset({"progressToken", "io.modelcontextprotocol/logLevel"})


def streams(body: bytes) -> bool:
    """Whether a request body asks for messages on its own stream (its ``_meta`` names a :data:`STREAMED_META`
    key); a body that is not such JSON does not (the SDK answers it)."""
    try:
        meta = _request.decode(body).params
    except (msgspec.DecodeError, RecursionError):
        return False
    return meta is not None and meta.meta is not None and not STREAMED_META.isdisjoint(meta.meta)


async def _peeked(receive: Receive, cap: int) -> tuple[bytes, bool, Receive]:
    """Read a request's body (stopping past ``cap`` bytes): the bytes read, whether that was all of it, and a
    ``receive`` that hands the same messages on, then the rest."""
    read: list[Message] = []
    size, whole = 0, False
    while size <= cap:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            whole = True
            break
    body = b"".join(m.get("body", b"") for m in read if m["type"] == "http.request")

    async def replay() -> Message:
        return read.pop(0) if read else await receive()

    return body, whole, replay


def accepts_both(accept: bytes) -> bool:
    """The SDK's rule (``check_accept_headers``): JSON and SSE both acceptable, wildcards counted."""
    kinds = {part.split(b";")[0].strip().lower() for part in accept.split(b",")}
    if b"*/*" in kinds:
        return True
    return bool(kinds & {b"application/json", b"application/*"}) and bool(kinds & {b"text/event-stream", b"text/*"})


async def serve_fast(
    handle: ASGIApp, scope: Scope, receive: Receive, send: Send, *, streamed: ASGIApp | None = None, cap: int = 0
) -> None:
    """Serve one stateless request through ``handle`` (a JSON-mode manager's), as SSE mode would answer it.

    With ``streamed`` (the SDK-mode manager's handler): a body of at most
    ``cap`` bytes that asks for messages on its stream (:func:`streams`)
    goes there instead.
    """
    if streamed is not None:
        body, whole, receive = await _peeked(receive, cap)
        if whole and streams(body):
            await streamed(scope, receive, send)
            return
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


__all__ = ["FAST_METHODS", "SSE_HEADERS", "SSE_WINDOW", "STREAMED_META", "accepts_both", "serve_fast", "streams"]
