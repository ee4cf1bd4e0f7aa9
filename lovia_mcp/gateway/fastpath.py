"""The cheap way through the SDK: JSON mode, an event stream only when something must go before the answer.

The SDK answers a request in one of two modes. In SSE mode (its default)
every request pays for an anyio task group, a memory stream, a disconnect
watcher and a cancel scope (sse-starlette's ``EventSourceResponse``) so that
it can write messages before the answer and ping a call that runs past 15 s
(so a proxy's idle timeout does not cut it). In JSON mode
(``json_response=True``) it awaits the handler and writes one JSON response:
measured (scripts/bench_gateway.py --only peers), about a quarter less CPU
per call for the whole tree on a 2025 session, 0.15 ms less on a 2026-07-28
request.

What JSON mode drops, this module puts back, with plain asyncio, so that a
request is answered in JSON unless something must go first:

- a call still running after :data:`SSE_WINDOW` commits to
  ``text/event-stream`` and pings, as the SDK does; the JSON answer, when it
  comes, is sent as the stream's last ``message`` event;
- a message for the request's own client (a call's progress, a server's log
  message, :mod:`.relay`) commits to the stream too and goes on it as an
  event, before the answer: :func:`streamed` gives a handler a context whose
  session writes request-scoped messages there (the SDK's JSON mode would
  drop them);
- a client that goes away cancels the request (the SDK's disconnect watcher).

Who comes this way: every POST of a 2025 session that lives in the
JSON-mode manager (its client declared none of the capabilities a server
may ask of it mid-call: :func:`declared`, :mod:`.routes`), and a 2026-07-28
``tools/call`` or ``tools/list`` that accepts both media types (one that
accepts no SSE is the SDK's to answer, with its 406). What a server says
while the call runs for its client (progress, log messages: :mod:`.relay`)
goes ahead of the answer on the same :class:`Answer`, which it turns into
an event stream.

Caveat: JSON mode cannot carry a request from the server to the client in
the middle of a call (the SDK refuses ``send_request`` there: a JSON body
holds only the answer). A session whose client declared sampling,
elicitation or roots is therefore the SDK's SSE-mode manager's, from its
``initialize`` on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Final, cast

import mcp_types as types
import msgspec
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
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
# Where a request's :class:`Answer` waits for its handler, in the request's ASGI scope.
ANSWER_KEY: Final = "lovia_mcp.answer"
_encode = msgspec.json.Encoder().encode


class _InitializeParams(msgspec.Struct):
    capabilities: dict[str, msgspec.Raw] = {}


class _Initialize(msgspec.Struct):
    method: str = ""
    params: _InitializeParams | None = None


_initialize = msgspec.json.Decoder(_Initialize)


def declared(body: bytes) -> frozenset[str] | None:
    """The client capabilities an ``initialize`` request body declares (by name); ``None`` if the body is not one
    (another method, a batch, not JSON)."""
    try:
        request = _initialize.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if request.method != "initialize":
        return None
    return frozenset(() if request.params is None else request.params.capabilities)


async def peeked(receive: Receive, cap: int) -> tuple[bytes, bool, Receive]:
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


class Answer:
    """One request's answer through a JSON-mode manager: its JSON body as it comes, or, once something must go
    before it (a ping, a message for the request's client), an event stream that the JSON answer ends.

    Every write goes through one lock, in the order asked; nothing goes ahead of
    an answer already started.
    """

    def __init__(self, send: Send, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        """``headers``: added to the event stream's head (a 2025 session's ``Mcp-Session-Id``, as the SDK sends)."""
        self._send = send
        self._head = [*SSE_HEADERS, *(headers or [])]
        self._lock = asyncio.Lock()
        self._held: list[bytes] = []
        # The JSON answer's head went out; the answer went as an event stream; the stream has ended.
        self.started = self.committed = self.ended = False

    async def _write(self, chunk: bytes) -> bool:
        async with self._lock:
            if self.started or self.ended:
                return False  # the JSON answer is on its way (or gone): too late for anything before it
            if not self.committed:
                self.committed = True
                await self._send({"type": "http.response.start", "status": 200, "headers": self._head})
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
            return True

    async def event(self, message: bytes) -> bool:
        """Send one JSON-RPC ``message`` before the answer, as an event; False if the answer had started."""
        return await self._write(b"event: message\r\ndata: " + message + b"\r\n\r\n")

    async def ping(self) -> bool:
        return await self._write(PING)

    async def __call__(self, message: Message) -> None:
        """The handler's ``send``."""
        async with self._lock:
            if not self.committed:
                self.started = True
                await self._send(message)
            elif message["type"] == "http.response.body":
                # The JSON answer as the stream's last event (what SSE mode sends last).
                self._held.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self.ended = True
                    await self._send(
                        {
                            "type": "http.response.body",
                            "body": b"event: message\r\ndata: " + b"".join(self._held) + b"\r\n\r\n",
                            "more_body": False,
                        }
                    )


def progress_token(params: Mapping[str, Any] | None) -> types.ProgressToken | None:
    """The ``progressToken`` of a request's ``_meta``, ``None`` without one."""
    match params:
        # A bool is an int to Python; JSON's true is no token.
        case {"_meta": {"progressToken": str() | int() as token}} if not isinstance(token, bool):
            return token
        case _:
            return None


class _StreamedSession:
    """A request's SDK session whose messages for that request go on its :class:`Answer`; the rest as before."""

    def __init__(self, session: ServerSession, answer: Answer, token: types.ProgressToken | None) -> None:
        self._session = session
        self._answer = answer
        self._token = token

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        # As the SDK's own: nothing unless the request gave a token, then that token.
        if self._token is None:
            return
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._answer.event(_encode({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}))

    async def send_notification(
        self, notification: types.ServerNotification, related_request_id: types.RequestId | None = None
    ) -> None:
        if related_request_id is None:
            await self._session.send_notification(notification)
            return
        data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._answer.event(_encode({"jsonrpc": "2.0", **data}))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def streamed(ctx: ServerRequestContext[Any, Any]) -> ServerRequestContext[Any, Any]:
    """``ctx``, its session writing the request's own messages (progress, request-scoped notifications) on the
    request's :class:`Answer` when it came this way (JSON mode would drop them); as it is otherwise."""
    scope = getattr(ctx.request, "scope", None)
    answer = scope.get(ANSWER_KEY) if isinstance(scope, dict) else None
    if not isinstance(answer, Answer):
        return ctx
    session = _StreamedSession(ctx.session, answer, progress_token(ctx.params))
    return dataclasses.replace(ctx, session=cast(ServerSession, session))


async def serve_fast(
    handle: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Serve one request through ``handle`` (a JSON-mode manager's), as SSE mode would answer it.

    ``headers`` go on the head of an event stream (:class:`Answer`).
    """
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    watching: list[asyncio.Task[None]] = []
    answer = Answer(send, headers)
    scope[ANSWER_KEY] = answer

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

    handler = asyncio.ensure_future(handle(scope, body_then_watch, answer))
    try:
        waiting: set[asyncio.Future[None]] = {handler, gone}
        done, _ = await asyncio.wait(waiting, timeout=SSE_WINDOW, return_when=asyncio.FIRST_COMPLETED)
        while not done and await answer.ping():
            done, _ = await asyncio.wait(waiting, timeout=SSE_WINDOW, return_when=asyncio.FIRST_COMPLETED)
        if not done:
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


__all__ = [
    "ANSWER_KEY",
    "FAST_METHODS",
    "SSE_HEADERS",
    "SSE_WINDOW",
    "Answer",
    "accepts_both",
    "declared",
    "peeked",
    "progress_token",
    "serve_fast",
    "streamed",
]
