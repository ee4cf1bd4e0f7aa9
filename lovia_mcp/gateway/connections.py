"""What an HTTP client holds before its request is known: the gateway's bounds on its connections.

uvicorn's HTTP protocol (httptools) keeps a connection that never finishes
its request head for ever, caps no connections (its ``limit_concurrency``
answers 503 once a head is complete, so it caps nothing a flood of
unfinished heads holds), and a byte now and then keeps an idle keep-alive
connection open. A client needs no token for any of this, and each
connection costs a descriptor: at the process's limit ``accept`` fails, and
``/healthz`` stops answering with everything else.

:class:`BoundedHttp` is uvicorn's httptools protocol with these bounds
(:class:`ConnectionLimits` holds their values, set by ``lovia-mcp serve``):

- a request head is complete within ``head_timeout`` seconds of the
  connection (on a keep-alive connection, of the first byte after the last
  response) and within :data:`MAX_HEAD_BYTES`, or the connection is closed;
- at most ``max_connections`` connections: one more displaces the
  connection that has waited longest with no request in progress (an
  unfinished head or an idle keep-alive one: nothing is lost but the wait),
  so a flood of heads never shuts out a client that sends a whole one;
  only when every connection has a request in progress is the new one closed;
- an idle keep-alive connection is closed after :data:`KEEP_ALIVE_IDLE`
  seconds (uvicorn's own timer), and a byte sent to keep it open starts the
  head timer instead;
- a response sent before its request's body was read (a 401, a ``/healthz``
  with a body) closes the connection: the rest of the body would hold it.

:func:`connection_cap` keeps the cap below the descriptor limit, with room
for the burst asyncio accepts before any protocol sees it.

Non-goals: what an authenticated request holds once its head is complete
(its body, its call, a session's GET stream) is bounded by the body cap,
the server's timeouts and the session limits, not here.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from lovia.exceptions import UserError
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from .options import DEFAULT_MAX_CONNECTIONS

# Longer than uvicorn's 5 s default would let idle clients hold more; shorter
# would make a client that pauses between calls reconnect. A load balancer
# that reuses connections should idle-time them out sooner than this.
KEEP_ALIVE_IDLE: Final = 5
# A request head with a bearer token and the MCP headers is well under
# 2 KiB; h11 allows 16 KiB and nginx 32 KiB. Room for long Mcp-Param-*
# headers, and a bound on what an unfinished head can make the process hold.
MAX_HEAD_BYTES: Final = 64 * 1024
# Descriptors the gateway needs besides client connections: the listening
# socket, the event loop's, logs, and a channel per server worker.
FD_RESERVE: Final = 64
# Why a bound closes a connection (ConnectionLimits.closed): each is exported from
# the start, at 0, so a rate over it has a series before the first close.
CLOSE_REASONS: Final = ("head_timeout", "head_too_large", "displaced", "refused", "body_unread")


@dataclass(kw_only=True)
class ConnectionLimits:
    """The bounds every connection of one gateway shares, and what they closed."""

    max_connections: int
    head_timeout: float
    # Connections with no request in progress, longest waiting first: the
    # ones a new connection may displace.
    waiting: dict[BoundedHttp, None] = field(default_factory=dict)
    # Connections closed by a bound, by reason (``head_timeout``,
    # ``head_too_large``, ``displaced``, ``refused``, ``body_unread``).
    closed: dict[str, int] = field(default_factory=dict)
    connections: int = 0

    def count(self, reason: str) -> None:
        self.closed[reason] = self.closed.get(reason, 0) + 1


def connection_cap(requested: int | None) -> int:
    """The connection cap: ``requested``, or the default, checked against the descriptor limit.

    Half of what the limit leaves after :data:`FD_RESERVE`: asyncio accepts
    up to the listen backlog (set to the cap) in one turn of the loop before
    a protocol can close any, so the held ones and one burst both fit.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = DEFAULT_MAX_CONNECTIONS * 4 if soft == resource.RLIM_INFINITY else (soft - FD_RESERVE) // 2
    if requested is None:
        if room < 1:
            raise UserError(
                f"the open-file limit ({soft}) leaves no room for connections",
                hint=f"Raise it (`ulimit -n {2 * DEFAULT_MAX_CONNECTIONS + FD_RESERVE}`) before starting the gateway.",
            )
        return min(DEFAULT_MAX_CONNECTIONS, room)
    if requested > room:
        raise UserError(
            f"--max-connections {requested} does not fit the open-file limit ({soft}): at most {max(room, 0)} do",
            hint=f"Raise the limit (`ulimit -n {2 * requested + FD_RESERVE}`) or lower --max-connections.",
        )
    return requested


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounded as the module says; :func:`bounded` gives it its :class:`ConnectionLimits`."""

    limits: ClassVar[ConnectionLimits]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._awaiting_head = True

    # -- the connection --------------------------------------------------- #
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        limits = self.limits
        limits.connections += 1
        limits.waiting[self] = None
        self._head_timer = self.loop.call_later(limits.head_timeout, self._head_late)
        if len(self.connections) > limits.max_connections:
            # Taken out of `waiting` at once: the next arrival of this burst
            # displaces another one (connection_lost comes a turn later).
            oldest = next((c for c in limits.waiting if c is not self), None)
            if oldest is None:
                self._close("refused")
            else:
                oldest._close("displaced")

    def connection_lost(self, exc: Exception | None) -> None:
        self.limits.connections -= 1
        self.limits.waiting.pop(self, None)
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_head:
            if self._head_timer is None:
                # A keep-alive connection's next head: timed from its first byte.
                self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_late)
            self._head_bytes += len(data)
        super().data_received(data)
        if self._awaiting_head and self._head_bytes > MAX_HEAD_BYTES:
            self._close("head_too_large")

    # -- a request's head, and its response ------------------------------- #
    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self.limits.waiting.pop(self, None)
        self._stop_head_timer()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        # With a pipelined request queued, `cycle` is that one's, and the one
        # answered was whole (another followed it).
        idle = not self.pipeline
        unread = idle and self.cycle.more_body
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if unread:
            self._close("body_unread")
        elif idle:
            self._awaiting_head = True
            self._head_bytes = 0
            self.limits.waiting[self] = None

    # -- bounds ------------------------------------------------------------ #
    def _head_late(self) -> None:
        self._head_timer = None
        if self._awaiting_head:
            self._close("head_timeout")

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _close(self, reason: str) -> None:
        self.limits.waiting.pop(self, None)
        if not self.transport.is_closing():
            self.limits.count(reason)
            self.transport.close()


def bounded(limits: ConnectionLimits) -> type[BoundedHttp]:
    """The protocol class uvicorn makes each connection with (``Config(http=...)``), bound to ``limits``."""
    return type("BoundedHttp", (BoundedHttp,), {"limits": limits})


__all__ = [
    "CLOSE_REASONS",
    "FD_RESERVE",
    "KEEP_ALIVE_IDLE",
    "MAX_HEAD_BYTES",
    "BoundedHttp",
    "ConnectionLimits",
    "bounded",
    "connection_cap",
]
