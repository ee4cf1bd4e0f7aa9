"""The servers behind the gateway: one shared connection, or one per client session.

Each upstream holds ordinary :class:`~lovia_mcp.MCPConnection` s opened from
the server's config, so every guarantee of the library holds per served
server: a worker per server, limits and sandbox, timeouts that kill,
restarts and the circuit (all the connection's own), and every process
gone when the connection closes.

- :class:`Shared`: one persistent connection serves every client's calls,
  concurrently (the connection multiplexes calls by id).
- :class:`PerSession`: a client session's first call takes a server of its
  own from warm spares (the library's pool, ``spares`` >= 1); it is closed
  when the client ends the session (HTTP DELETE), after ``idle`` seconds
  without a call, or when the gateway stops. At most ``max_sessions`` at once.
- :class:`PerPrincipal`: the same, keyed by principal instead of session:
  every session and stateless request of one principal shares its server,
  and no other principal's call ever reaches it.

Whose server a call uses is :meth:`Upstream.holder`'s to say: a
:class:`SessionHolder` or a :class:`PrincipalHolder` (a :data:`Holder`), or
``None`` for a shared server; every other method takes that holder.

Lifecycle: ``start`` opens (and lists) before the gateway says it is ready;
a request that comes meanwhile waits in :func:`wait_open` until the servers
it needs are open (or one of them failed); ``aclose`` closes every
connection, bounded and shielded.

Tool-list changes: an upstream tells :attr:`Upstream.on_tools_changed` when a
connection's tools change (:attr:`MCPConnection.on_tools_changed`), with the
holder whose server it is (``None`` for a shared server,
whose change is told to every principal that may see it).

The relay: every connection is opened with ``relay=True``; a server's
notification attributed to no request goes to :attr:`Upstream.on_notification`
with the holder whose server it is, as a tool-list change
does. :meth:`Upstream.alone` says whether a principal is the only one whose
requests a server has had (always, for a server of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar, Final

from lovia.exceptions import LoviaError, MCPError
from lovia_mcp_worker.wire.messages import Stats

from ..client.relay import Listener
from ..config.annotations import MCPTool
from ..connection.live import MCPConnection
from ..opening.servers import MCPServer
from ..opening.spares import close_spares, warm_spares
from ..render import MCPToolResult
from .options import Served
from .principals import DEFAULT_PRINCIPAL, share

logger = logging.getLogger("lovia_mcp.gateway")

# A scrape must not hang on a worker that is busy dying: stats that do not
# come back in this long are left out of that scrape.
STATS_WAIT: Final = 2.0
# How often idle per-session servers are looked for, at most: an idle expiry
# is honoured to within this (expiries are minutes; a finer sweep buys nothing).
IDLE_SWEEP: Final = 5.0
# A request waiting for a server to open gives up this long after the
# server's open_timeout: an open that passes its timeout is failed by the
# connection only after it has killed what it started (its close is bounded
# by a few seconds), and that failure is the answer the waiter should get.
OPEN_WAIT_SLACK: Final = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class SessionHolder:
    """A 2025 client session whose server of its own serves its calls (a per-session server)."""

    session: str


@dataclasses.dataclass(frozen=True, slots=True)
class PrincipalHolder:
    """A principal whose server of its own serves all its sessions and stateless requests (a per-principal one)."""

    principal: str


# Whose server a call uses (the glossary's holder): one type per kind, so a
# principal's name never meets a session id in one table.
Holder = SessionHolder | PrincipalHolder


class UpstreamRefused(Exception):
    """A call the gateway will not start (no session slot, no session): a clear error for the client."""

    def __init__(self, message: str, hint: str, share: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        # The cap whose share the principal held, when that is why (a metric's label).
        self.share = share


class Upstream:
    """One configured server as the gateway serves it."""

    def __init__(self, server: MCPServer, served: Served) -> None:
        self.name = server.name or "server"
        # Every connection relays what its server says besides tools (.relay).
        server = dataclasses.replace(server, relay=True)
        self.server = server
        self.served = served
        # Restarts of connections already closed: the counter never goes back.
        self.closed_restarts = 0
        # The gateway's listener: (this upstream, the holder whose server's
        # tools changed; None for a shared server). Called on the event loop.
        self.on_tools_changed: Callable[[Upstream, Holder | None], None] | None = None
        # The gateway's listener for notifications attributed to no request:
        # (this upstream, the holder whose server said it (None: a shared one),
        # the method, its params raw). Called on the event loop.
        self.on_notification: Callable[[Upstream, Holder | None, str, bytes | None], None] | None = None
        # Set once the upstream can serve a call, or failed to open; the
        # failure's message for a request that waited for it.
        self.settled = asyncio.Event()
        self.failure: str | None = None
        # Its open was cancelled (the gateway stops), not failed on its own.
        self.stopped = False
        # How many principals the gateway's token file names (the gateway
        # sets it): each may hold at most its share of a per-session cap.
        self.principals = 1

    async def start(self) -> None:
        """Open the server (``_start``); whoever waits in :func:`wait_open` hears how it went."""
        try:
            await self._start()
        except asyncio.CancelledError:
            self.failure, self.stopped = "the gateway stopped before it opened", True
            raise
        except BaseException as exc:
            # The message, not the hint: a hint may quote the server's stderr,
            # which is the operator's to read (in the logs), not a client's.
            self.failure = str(exc.args[0]) if isinstance(exc, LoviaError) and exc.args else str(exc) or repr(exc)
            raise
        finally:
            self.settled.set()

    def holder(self, session: str | None, principal: str) -> Holder | None:
        """Whose server serves a call of ``session`` by ``principal``: the key the other methods take (``None``:
        a shared server, everyone's)."""
        return None

    def _servable(self) -> None:
        """The upstream can serve calls from now, before ``_start`` has finished (its spares still warming)."""
        self.settled.set()

    async def _start(self) -> None:
        raise NotImplementedError

    def tools(self, holder: Holder | None = None) -> list[MCPTool]:
        """The tools ``holder`` sees (its server's own once it holds one)."""
        raise NotImplementedError

    def knows(self, raw_name: str, holder: Holder | None = None) -> bool:
        """True if ``raw_name`` is a tool ``holder`` is listed: a name a metric may carry."""
        try:
            return any(t.raw_name == raw_name for t in self.tools(holder))
        except (UpstreamRefused, MCPError):  # not open (any more): no listing to hold it against
            return False

    def _changed(self, holder: Holder | None) -> None:
        if self.on_tools_changed is not None:
            self.on_tools_changed(self, holder)

    def _heard(self, holder: Holder | None, method: str, params: bytes | None) -> None:
        """A notification of ``holder``'s server attributed to no request."""
        if self.on_notification is not None:
            self.on_notification(self, holder, method, params)

    def connection(self, holder: Holder | None) -> MCPConnection | None:
        """The live connection serving ``holder``, if one does now."""
        raise NotImplementedError

    def capabilities(self) -> dict[str, Any]:
        """The server's capabilities as it declared them (the first open's, for a server per holder)."""
        raise NotImplementedError

    def alone(self, principal: str) -> bool:
        """Whether ``principal`` is the only principal whose requests this server has had: a server per session
        or per principal is one principal's."""
        return True

    async def call(
        self,
        holder: Holder | None,
        raw_name: str,
        arguments: dict[str, Any],
        principal: str = DEFAULT_PRINCIPAL,
        listener: Listener | None = None,
    ) -> MCPToolResult:
        """Call ``raw_name`` on the server of ``holder``, for a client of ``principal``;
        ``listener`` hears the call's progress."""
        raise NotImplementedError

    async def take(self, holder: Holder | None, principal: str = DEFAULT_PRINCIPAL) -> MCPConnection:
        """The connection serving ``holder`` for a relayed request of ``principal`` (a server of its own taken
        as a call takes one): :mod:`.relay`'s way to the server."""
        raise NotImplementedError

    async def end_session(self, session: str) -> None:
        """The client ended ``session``: nothing to do for a shared server."""

    def connections(self) -> list[MCPConnection]:
        raise NotImplementedError

    def sessions(self) -> int:
        return 0

    async def aclose(self) -> None:
        raise NotImplementedError

    async def stats(self) -> list[Stats]:
        """The live connections' stats, each bounded by ``STATS_WAIT``."""

        async def one(conn: MCPConnection) -> Stats | None:
            try:
                return await asyncio.wait_for(conn.stats(), STATS_WAIT)
            except (MCPError, asyncio.TimeoutError):
                return None

        got = await asyncio.gather(*(one(c) for c in self.connections()))
        return [s for s in got if s is not None]


def _tools_of(conn: MCPConnection) -> list[MCPTool]:
    return [t for t in conn.tools() if isinstance(t, MCPTool)]


def _shape(tools: list[MCPTool]) -> list[tuple[Any, ...]]:
    """What a client's listing shows of ``tools``: two listings that differ here are a change to it."""
    return [(t.raw_name, t.description, t.parameters, t.annotations, t.meta) for t in tools]


class Shared(Upstream):
    """One contained server for every client."""

    def __init__(self, server: MCPServer, served: Served) -> None:
        super().__init__(server, served)
        self._conn: MCPConnection | None = None
        # The principals whose requests the server has had (.alone).
        self._callers: set[str] = set()

    async def _start(self) -> None:
        # Persistent: the connection's own restarts replace a crashed server
        # (and keep a standby one if the config asks for spares).
        self._conn = await dataclasses.replace(self.server, close_after_run=False).open()
        self._conn.on_tools_changed = lambda _conn: self._changed(None)
        self._conn.on_notification = lambda method, params: self._heard(None, method, params)

    def _live(self) -> MCPConnection:
        if self._conn is None:
            raise UpstreamRefused(f"server {self.name!r} is not open", hint="Wait for /readyz to answer 200.")
        return self._conn

    def tools(self, holder: Holder | None = None) -> list[MCPTool]:
        return _tools_of(self._live())

    async def call(
        self,
        holder: Holder | None,
        raw_name: str,
        arguments: dict[str, Any],
        principal: str = DEFAULT_PRINCIPAL,
        listener: Listener | None = None,
    ) -> MCPToolResult:
        conn = self._live()
        self._callers.add(principal)
        return await conn.call_tool(raw_name, arguments, timeout=self.server.timeout, listener=listener)

    async def take(self, holder: Holder | None, principal: str = DEFAULT_PRINCIPAL) -> MCPConnection:
        conn = self._live()
        self._callers.add(principal)
        return conn

    def connections(self) -> list[MCPConnection]:
        return [] if self._conn is None else [self._conn]

    def connection(self, holder: Holder | None) -> MCPConnection | None:
        return self._conn

    def capabilities(self) -> dict[str, Any]:
        return {} if self._conn is None else self._conn.server_capabilities

    def alone(self, principal: str) -> bool:
        # Whatever a shared server says outside a request may come of any
        # principal's earlier one: only one principal's requests make it theirs.
        return self._callers <= {principal}

    def used_by(self, principal: str) -> None:
        """A request of ``principal`` reaches the server (:meth:`alone`)."""
        self._callers.add(principal)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class _Held:
    """A session's server, and when it was last used."""

    def __init__(self, conn: MCPConnection) -> None:
        self.conn = conn
        self.used = time.monotonic()
        self.in_flight = 0


class PerSession(Upstream):
    """A contained server for each client session."""

    # What holds a server of its own, as an error message counts them.
    HOLDERS: ClassVar[str] = "sessions"

    def __init__(self, server: MCPServer, served: Served) -> None:
        super().__init__(server, served)
        # Per-run opens of this config take the library's warm spares.
        self.config = dataclasses.replace(self.server, spares=max(1, server.spares), close_after_run=True)
        self._held: dict[Holder, _Held] = {}
        self._opening: dict[Holder, asyncio.Task[_Held]] = {}
        # Whose client each holder (held or opening) is.
        self._principal_of: dict[Holder, str] = {}
        self._spare: MCPConnection | None = None
        self._listing: list[MCPTool] = []
        self._capabilities: dict[str, Any] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._closing = False

    async def _start(self) -> None:
        # One open learns the tool list; its server is kept as the first spare.
        first = await self.config.open()
        self._listing = _tools_of(first)
        self._capabilities = first.server_capabilities
        self._spare = first
        # A session's first call can take that server now; the spares warm meanwhile.
        self._servable()
        await warm_spares(self.config)
        self._sweeper = asyncio.ensure_future(self._sweep())

    def holder(self, session: str | None, principal: str) -> Holder | None:
        return None if session is None else SessionHolder(session)

    def tools(self, holder: Holder | None = None) -> list[MCPTool]:
        # The holder's own server, with its list changes; the first open's
        # listing for a holder that holds none yet (or none at all).
        held = None if holder is None else self._held.get(holder)
        return _tools_of(held.conn) if held is not None else list(self._listing)

    def sessions(self) -> int:
        return len(self._held) + len(self._opening)

    @staticmethod
    def _who(holder: Holder) -> dict[str, str]:
        """A holder as a log line shows it: a session id's first characters (the rest lets one in)."""
        if isinstance(holder, SessionHolder):
            return {"session": holder.session[:16]}
        return {"principal": holder.principal}

    def connections(self) -> list[MCPConnection]:
        return [h.conn for h in self._held.values()]

    def connection(self, holder: Holder | None) -> MCPConnection | None:
        held = None if holder is None else self._held.get(holder)
        return None if held is None else held.conn

    def capabilities(self) -> dict[str, Any]:
        return dict(self._capabilities)

    async def _take(self, holder: Holder, principal: str) -> _Held:
        held = self._held.get(holder)
        if held is not None:
            return held
        task = self._opening.get(holder)
        if task is None:
            if self._closing:
                raise UpstreamRefused("the gateway is shutting down", hint="Retry on another replica.")
            if self.sessions() >= self.served.max_sessions:
                raise UpstreamRefused(
                    f"server {self.name!r} already serves {self.served.max_sessions} {self.HOLDERS} (its max_sessions)",
                    hint="End a session you no longer use (HTTP DELETE), wait for idle ones to expire, "
                    "or raise max_sessions in the config file.",
                )
            mine = sum(1 for who in self._principal_of.values() if who == principal)
            if mine >= (allowed := share(self.served.max_sessions, self.principals)):
                raise UpstreamRefused(
                    f"server {self.name!r} already serves {allowed} {self.HOLDERS} of principal {principal!r}, "
                    f"its share of the server's max_sessions ({self.served.max_sessions}, split among the token "
                    "file's principals)",
                    hint="End a session you no longer use (HTTP DELETE), wait for idle ones to expire, "
                    "or raise max_sessions in the config file.",
                    share="server_slots",
                )
            self._principal_of[holder] = principal
            task = self._opening[holder] = asyncio.ensure_future(self._open(holder))
        # Shielded: one caller cancelled (its client went away) must not
        # abandon a server half-open that the session's other calls wait for.
        return await asyncio.shield(task)

    async def _open(self, holder: Holder) -> _Held:
        try:
            spare, self._spare = self._spare, None
            conn = spare if spare is not None else await self.config.open()
        except BaseException:
            self._principal_of.pop(holder, None)
            raise
        finally:
            self._opening.pop(holder, None)
        if self._closing:
            self._principal_of.pop(holder, None)
            await conn.close()
            raise UpstreamRefused("the gateway is shutting down", hint="Retry on another replica.")
        held = self._held[holder] = _Held(conn)
        # Only this holder lists this server: only it hears of its changes.
        conn.on_tools_changed = lambda _conn: self._changed(holder)
        conn.on_notification = lambda method, params: self._heard(holder, method, params)
        if _shape(_tools_of(conn)) != _shape(self._listing):
            self._changed(holder)  # the holder listed the first open's tools until now
        logger.info("session opened", extra={"server": self.name, **self._who(holder)})
        return held

    async def call(
        self,
        holder: Holder | None,
        raw_name: str,
        arguments: dict[str, Any],
        principal: str = DEFAULT_PRINCIPAL,
        listener: Listener | None = None,
    ) -> MCPToolResult:
        if holder is None:
            raise UpstreamRefused(
                f"server {self.name!r} gives each client session a server of its own, and this request "
                "belongs to no session",
                hint="Connect with a stateful session (an initialize handshake; the SDK's Client(mode='legacy')), "
                'or serve the server with "session": "shared".',
            )
        held = await self._take(holder, principal)
        held.in_flight += 1
        try:
            return await held.conn.call_tool(raw_name, arguments, timeout=self.server.timeout, listener=listener)
        finally:
            held.in_flight -= 1
            held.used = time.monotonic()

    async def take(self, holder: Holder | None, principal: str = DEFAULT_PRINCIPAL) -> MCPConnection:
        if holder is None:
            raise UpstreamRefused(
                f"server {self.name!r} gives each client session a server of its own, and this request "
                "belongs to no session",
                hint="Connect with a stateful session (an initialize handshake; the SDK's Client(mode='legacy')), "
                'or serve the server with "session": "shared".',
            )
        held = await self._take(holder, principal)
        held.used = time.monotonic()
        return held.conn

    async def end_session(self, session: str) -> None:
        held = self._held.pop(SessionHolder(session), None)
        if held is not None:
            self._principal_of.pop(SessionHolder(session), None)
            await self._close(held, "ended")

    async def _close(self, held: _Held, why: str) -> None:
        with contextlib.suppress(MCPError, asyncio.TimeoutError):
            self.closed_restarts += (await asyncio.wait_for(held.conn.stats(), STATS_WAIT)).restarts
        await held.conn.close()
        logger.info("session closed", extra={"server": self.name, "why": why})

    async def _sweep(self) -> None:
        idle = self.served.idle
        while True:
            await asyncio.sleep(min(IDLE_SWEEP, idle / 2))
            now = time.monotonic()
            for holder, held in list(self._held.items()):
                if held.in_flight == 0 and now - held.used >= idle and self._held.get(holder) is held:
                    del self._held[holder]
                    self._principal_of.pop(holder, None)
                    # From now on the holder lists the first open's tools
                    # (and its next call gets a fresh server that lists them).
                    if _shape(_tools_of(held.conn)) != _shape(self._listing):
                        self._changed(holder)
                    await self._close(held, "idle")

    async def aclose(self) -> None:
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in list(self._opening.values()):
            with contextlib.suppress(BaseException):
                await task
        held, self._held = list(self._held.values()), {}
        self._principal_of.clear()
        spare, self._spare = self._spare, None
        closing = [h.conn.close() for h in held] + ([spare.close()] if spare is not None else [])
        await asyncio.gather(*closing, return_exceptions=True)
        await close_spares(self.config)


async def wait_open(upstreams: list[Upstream]) -> None:
    """Return once every one of ``upstreams`` can serve; :class:`UpstreamRefused` naming the first that failed to open.

    Bounded by the longest ``open_timeout`` among those still opening (each
    open is bounded by its own), plus :data:`OPEN_WAIT_SLACK`.
    """
    loop = asyncio.get_running_loop()
    pending = [b for b in upstreams if not b.settled.is_set()]
    deadline = loop.time() + max((b.server.open_timeout for b in pending), default=0.0) + OPEN_WAIT_SLACK
    while True:
        # A server that failed on its own first: the others were stopped because of it.
        failed = min((b for b in upstreams if b.failure is not None), key=lambda b: b.stopped, default=None)
        if failed is not None and failed.stopped:
            raise UpstreamRefused(
                f"the gateway is shutting down before server {failed.name!r} opened",
                hint="Retry shortly (on another replica behind a load balancer).",
            )
        if failed is not None:
            raise UpstreamRefused(
                f"server {failed.name!r} failed to open: {failed.failure}",
                hint="Read the gateway's log for the server's stderr; fix its command or config and "
                "restart the gateway.",
            )
        pending = [b for b in pending if not b.settled.is_set()]
        left = deadline - loop.time()
        if not pending:
            return
        if left <= 0:
            raise UpstreamRefused(
                f"server {pending[0].name!r} is still opening after its open_timeout "
                f"({pending[0].server.open_timeout:g} s)",
                hint="Retry once /readyz answers 200, or raise the server's open_timeout.",
            )
        waits = [asyncio.ensure_future(b.settled.wait()) for b in pending]
        try:
            await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()


class PerPrincipal(PerSession):
    """A contained server for each principal: a :class:`PerSession` whose holder is the principal."""

    HOLDERS: ClassVar[str] = "principals"

    def holder(self, session: str | None, principal: str) -> Holder | None:
        return PrincipalHolder(principal)

    async def end_session(self, session: str) -> None:
        """A session ended: the principal's server stays for its other sessions (``idle`` closes it)."""


def upstream_for(server: MCPServer, served: Served) -> Upstream:
    if served.session == "per-session":
        return PerSession(server, served)
    if served.session == "per-principal":
        return PerPrincipal(server, served)
    return Shared(server, served)


__all__ = [
    "IDLE_SWEEP",
    "OPEN_WAIT_SLACK",
    "STATS_WAIT",
    "Upstream",
    "Holder",
    "PerPrincipal",
    "PerSession",
    "PrincipalHolder",
    "SessionHolder",
    "UpstreamRefused",
    "Shared",
    "upstream_for",
    "wait_open",
]
