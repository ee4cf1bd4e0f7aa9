"""The gateway as an MCP proxy beyond tools: what a server says reaches the client it belongs to, and no other.

Every served connection relays (``relay=True``): the worker hands on what
its server says besides tools (:mod:`lovia_mcp_worker.wire.messages`'s
``ServerNotification``, attributed to the request in flight on the server
when it came, if there was only one), and :meth:`MCPConnection.relay`
carries any other request as raw JSON.

Progress: a ``tools/call`` gets a :class:`ClientRelay`; the connection's
core hands it the call's progress as the worker coalesced it
(:mod:`..client.relay`), and the relay sends each through the SDK's public
``ServerSession.report_progress`` of that request, which puts the client's
own token on it and writes it on the request's stream (a 2025 session's
POST stream, a 2026-07-28 request's event stream: :mod:`.fastpath` sends
such a request the SDK's streaming way).

Logging (``notifications/message``): ``logging`` is advertised on an
endpoint when one of its servers declares it (:class:`ProxyServer`). Who
hears a server's message, the rule:

- attributed to a request (it came while that request was the only one in
  flight on the server): that request's client, on the request's stream,
  when the server is that client's principal's alone (a per-session or
  per-principal server, or a shared one whose every request so far came
  from that principal: :meth:`.backends.Backend.alone`); a shared server
  used by several principals keeps its messages in the gateway's log, since
  what it says while one request runs may come of another's earlier work;
- attributed to none: a per-session server's session, on its standalone
  stream (a 2025 session: the server is the session's); nobody otherwise;
- at or above the client's level: a 2025 session's ``logging/setLevel``
  (default: every level), a 2026-07-28 request's own ``_meta`` opt-in
  (default: none, the SDK's rule).

``logging/setLevel`` is answered and forwarded: to a server of the
session's (or principal's) own as asked; to a shared server the most
verbose level any client asked for (never less verbose again), so one
principal's level never silences what another asked to hear. Every message
also stays in the gateway's log (``lovia_mcp.server.<name>``), as before.

Order and bounds: the core calls a relay synchronously, in the order the
worker sent; one task per request sends in that order, each send bounded by
:data:`SEND_WAIT` (a client that stopped reading holds nothing up), and at
most :data:`HELD` messages wait (older ones are dropped first). Before the
call's answer goes out, :func:`relayed` waits for what is queued (bounded by
:data:`SEND_WAIT`), so the client sees every progress before its result; a
call that fails or is cancelled drops what is left.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import mcp_types as types
import msgspec
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions
from mcp.server.session import ServerSession
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from ..client.relay import Listener
from .access import Access
from .backends import Backend
from .notify import ListChangedServer
from .principals import principal_of
from .sessions import Sessions

logger = logging.getLogger("lovia_mcp.gateway")

# One send to a client, at most: a client that stopped reading its stream
# fills it; its messages are dropped rather than holding the call's answer
# (the SDK bounds its other writes by its stream buffers alike).
SEND_WAIT: Final = 5.0
# Messages waiting to be sent to one request's client, at most: the worker
# sends ten progress updates a second per call at most, so this is seconds
# of a client that reads slowly.
HELD: Final = 64
# MCP's log levels, least severe first.
LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# The capabilities the gateway has only when a server behind it has them.
RELAYED_CAPABILITIES: Final = ("logging",)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode


class _Level(msgspec.Struct):
    level: str = ""


def _level_of(params: bytes | None) -> str:
    """A ``notifications/message``'s level (``""`` if it has none that MCP names)."""
    try:
        level = msgspec.json.decode(params or b"{}", type=_Level).level
    except (msgspec.DecodeError, RecursionError):
        return ""
    return level if level in LEVELS else ""


def _at_least(level: str, floor: str | None) -> bool:
    return floor is None or (level in LEVELS and LEVELS.index(level) >= LEVELS.index(floor))


def _notification(method: str, params: bytes | None) -> Any:
    """The SDK's model of a server notification (the SDK sends models only); ``None`` if it is not one."""
    body: dict[str, Any] = {"method": method}
    if params is not None:
        body["params"] = _decode(params)
    try:
        return types.server_notification_adapter.validate_python(body)
    except ValueError:
        return None


class ProxyServer(ListChangedServer):
    """The endpoint's SDK Server, advertising a relayed capability only when one of its servers has it."""

    def __init__(self, *args: Any, offers: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._offers = offers

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        return capabilities.model_copy(update={name: None for name in RELAYED_CAPABILITIES if not self._offers(name)})


class ClientRelay(Listener):
    """One request's relay to its client: what the core hears of it, sent in order from a task of its own."""

    def __init__(self, proxy: Proxy, ctx: ServerRequestContext[Any, Any], backend: Backend, principal: str) -> None:
        self._proxy = proxy
        self._ctx = ctx
        self._backend = backend
        self._principal = principal
        self._queue: collections.deque[Callable[[], Awaitable[None]]] = collections.deque(maxlen=HELD)
        self._sender: asyncio.Task[None] | None = None
        self.dropped = 0

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self._put(lambda: self._ctx.session.report_progress(progress, total, message))

    def notified(self, method: str, params: bytes | None) -> None:
        if method != "notifications/message":
            # Not a request's own: routed as one attributed to no request.
            self._proxy.heard(self._backend, None, None, method, params)
            return
        if not self._backend.alone(self._principal):
            return  # a shared server several principals used: its words may be another's (the module's rule)
        if not self._proxy.hears(self._ctx, _level_of(params)):
            return
        notification = _notification(method, params)
        if notification is not None:
            request = self._ctx.request_id
            self._put(lambda: self._ctx.session.send_notification(notification, related_request_id=request))

    def _put(self, send: Callable[[], Awaitable[None]]) -> None:
        if len(self._queue) == HELD:
            self.dropped += 1
        self._queue.append(send)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        while self._queue:
            send = self._queue.popleft()
            try:
                await asyncio.wait_for(send(), SEND_WAIT)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a client gone or stuck loses its message, nothing else
                logger.debug("not relayed: %r", exc)

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


class Proxy:
    """The gateway's relay: the log levels clients asked for, and where a server's words go."""

    def __init__(
        self,
        backends: dict[str, Backend],
        *,
        access: Access,
        sessions: Sessions,
        session_of: Callable[[ServerRequestContext[Any, Any]], str | None],
    ) -> None:
        """``session_of``: the gateway's reading of the session a request belongs to (one it saw the SDK open)."""
        self._backends = backends
        self._access = access
        self._sessions = sessions
        self._session_of = session_of
        # A 2025 session's logging/setLevel, by session id.
        self._levels: dict[str, str] = {}
        # The level last forwarded to each shared connection (the most verbose asked).
        self._forwarded: dict[int, str] = {}
        self._sending: set[asyncio.Task[None]] = set()
        for backend in backends.values():
            backend.on_notification = self.heard

    # -- capabilities ---------------------------------------------------------- #
    def offers(self, only: str | None, capability: str) -> bool:
        """Whether a server the endpoint serving ``only`` serves declares ``capability``."""
        return any(
            capability in backend.capabilities() for name, backend in self._backends.items() if only in (None, name)
        )

    # -- logging ----------------------------------------------------------------- #
    def hears(self, ctx: ServerRequestContext[Any, Any], level: str) -> bool:
        """Whether ``ctx``'s client hears a message at ``level``: its 2025 session's level, or its 2026-07-28
        request's own opt-in."""
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return level in allowed_log_levels(ctx.protocol_version, ctx.meta)
        session = self._session_of(ctx)
        return _at_least(level, None if session is None else self._levels.get(session))

    async def set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams, only: str | None
    ) -> dict[str, Any]:
        """``logging/setLevel`` on an endpoint serving ``only``: the session's level, forwarded to its servers."""
        session = self._session_of(ctx)
        principal = principal_of(getattr(ctx.request, "scope", None))
        if session is not None:
            # Sessions the gateway forgot hold no level (the table stays as small as the sessions).
            self._levels = {sid: level for sid, level in self._levels.items() if sid in self._sessions}
            self._levels[session] = params.level
        for name, backend in self._backends.items():
            if only not in (None, name) or not self._access.sees(principal, name):
                continue
            if "logging" not in backend.capabilities():
                continue
            conn = backend.connection(backend.holder(session, principal))
            if conn is None:
                continue
            level = params.level
            if backend.served.session == "shared":
                before = self._forwarded.get(id(conn))
                if before is not None and LEVELS.index(before) <= LEVELS.index(level):
                    continue  # as verbose already: another client asked for it
                self._forwarded[id(conn)] = level
            try:
                await conn.relay("logging/setLevel", _encode({"level": level}), timeout=SEND_WAIT)
            except Exception as exc:  # noqa: BLE001 - the client's level holds in the gateway whatever the server said
                logger.info("logging/setLevel not forwarded", extra={"server": name, "error": str(exc)})
        return {}

    # -- words of no request ----------------------------------------------------- #
    def heard(
        self, backend: Backend, session: str | None, principal: str | None, method: str, params: bytes | None
    ) -> None:
        """A notification of ``backend``'s server attributed to no request (of ``session``'s or ``principal``'s
        server; neither: a shared one)."""
        if method == "notifications/message" and session is not None:
            floor = self._levels.get(session)
            listener = self._sessions.listener(session)
            if listener is not None and _at_least(_level_of(params), floor):
                notification = _notification(method, params)
                if notification is not None:
                    self._spawn(self._send(listener, notification))

    async def _send(self, session: ServerSession, notification: Any) -> None:
        try:
            await asyncio.wait_for(session.send_notification(notification), SEND_WAIT)
        except Exception as exc:  # noqa: BLE001 - a session gone or stuck loses its message, nothing else
            logger.debug("not relayed: %r", exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def server(self, only: str | None, **options: Any) -> ProxyServer:
        """The SDK Server of the endpoint serving ``only`` (every server: ``None``), with the relay's handlers."""
        server = ProxyServer(offers=lambda capability: self.offers(only, capability), **options)

        async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> dict[str, Any]:
            return await self.set_level(ctx, params, only)

        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
        return server


def wants_progress(params: Mapping[str, Any] | None) -> bool:
    """Whether a request's params ask for progress (a ``progressToken`` in its ``_meta``)."""
    return progress_token_from_params(params) is not None


@contextlib.asynccontextmanager
async def relayed(
    proxy: Proxy, ctx: ServerRequestContext[Any, Any], backend: Backend, principal: str
) -> AsyncIterator[ClientRelay]:
    """The relay for one request of ``principal`` to ``backend``; what it holds is sent before the block's answer
    goes, and dropped if the block fails."""
    relay = ClientRelay(proxy, ctx, backend, principal)
    try:
        yield relay
    except BaseException:
        relay.abort()
        raise
    await relay.flushed()


__all__ = [
    "HELD",
    "LEVELS",
    "RELAYED_CAPABILITIES",
    "SEND_WAIT",
    "ClientRelay",
    "Proxy",
    "ProxyServer",
    "relayed",
    "wants_progress",
]
