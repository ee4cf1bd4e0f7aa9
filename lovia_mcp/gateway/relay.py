"""What a server says while a client's request runs, relayed to that client on the request's own stream.

A ``tools/call`` whose client asked for progress (a ``progressToken`` in
its ``_meta``) gets a :class:`ClientRelay`: the connection's core hands it
the call's progress as the worker coalesced it (:mod:`..client.relay`), and
the relay sends each to the client through the SDK's public
``ServerSession.report_progress`` of that request, which puts the client's
own token on it and writes it on the request's stream (a 2025 session's
POST stream, a 2026-07-28 request's event stream: :mod:`.fastpath` sends
such a request the SDK's streaming way).

Order and bounds: the core calls the relay synchronously, in the order the
worker sent; one task sends them in that order, each send bounded by
:data:`SEND_WAIT` (a client that stopped reading holds nothing up), and at
most :data:`HELD` updates wait (older ones are dropped first: the newest
progress is the one that matters). Before the call's answer goes out,
:func:`relayed` waits for what is queued (bounded by :data:`SEND_WAIT`), so
the client sees every progress before its result; a call that fails or is
cancelled drops what is left.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from mcp.server.session import ServerSession
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from ..client.relay import Listener

logger = logging.getLogger("lovia_mcp.gateway")

# One send to a client, at most: a client that stopped reading its stream
# fills it; its updates are dropped rather than holding the call's answer
# (the SDK bounds its other writes by its stream buffers alike).
SEND_WAIT: Final = 5.0
# Updates waiting to be sent, at most: the worker sends ten a second per
# call at most, so this is seconds of a client that reads slowly.
HELD: Final = 64


class ClientRelay(Listener):
    """One request's relay to its client: what the core hears, sent in order from a task of its own."""

    def __init__(self, session: ServerSession) -> None:
        self._session = session
        self._queue: collections.deque[tuple[float, float | None, str | None]] = collections.deque(maxlen=HELD)
        self._sender: asyncio.Task[None] | None = None
        self.dropped = 0

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if len(self._queue) == HELD:
            self.dropped += 1
        self._queue.append((progress, total, message))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        while self._queue:
            progress, total, message = self._queue.popleft()
            try:
                await asyncio.wait_for(self._session.report_progress(progress, total, message), SEND_WAIT)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a client gone or stuck loses its update, nothing else
                logger.debug("progress not relayed: %r", exc)

    async def flushed(self) -> None:
        """Wait (bounded) until what is queued has been sent."""
        sender = self._sender
        if sender is not None and not sender.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(sender), SEND_WAIT)
        self.abort()

    def abort(self) -> None:
        """Send nothing more."""
        self._queue.clear()
        if self._sender is not None:
            self._sender.cancel()


def wants_progress(params: Mapping[str, Any] | None) -> bool:
    """Whether a request's params ask for progress (a ``progressToken`` in its ``_meta``)."""
    return progress_token_from_params(params) is not None


@contextlib.asynccontextmanager
async def relayed(session: ServerSession, params: Mapping[str, Any] | None) -> AsyncIterator[ClientRelay | None]:
    """The relay for one request (``None`` when its client asked for nothing); what it holds is sent before the
    block's answer goes, and dropped if the block fails."""
    if not wants_progress(params):
        yield None
        return
    relay = ClientRelay(session)
    try:
        yield relay
    except BaseException:
        relay.abort()
        raise
    await relay.flushed()


__all__ = ["HELD", "SEND_WAIT", "ClientRelay", "relayed", "wants_progress"]
