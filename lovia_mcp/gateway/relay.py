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
such a request the SDK's streaming way). A 2025 session held in JSON mode
(:mod:`.routes`) gets them on its POST's answer too, which
:func:`.fastpath.streamed` turns into an event stream for them.

Logging (``notifications/message``): ``logging`` is advertised on an
endpoint when one of its servers declares it (:class:`ProxyServer`). Who
hears a server's message, the rule:

- attributed to a request (it came while that request was the only one in
  flight on the server): that request's client, on the request's stream,
  when the server is that client's principal's alone (a per-session or
  per-principal server, or a shared one whose every request so far came
  from that principal: :meth:`.upstreams.Upstream.alone`); a shared server
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
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import mcp_types as types
import msgspec
from lovia.exceptions import LoviaError
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict

from .._names import PREFIX_SEP
from ..client.relay import Listener
from ..connection.live import MCPConnection
from ._http import UNAVAILABLE
from .access import Access
from .fastpath import progress_token, streamed
from .notify import ListChangedServer
from .principals import principal_of
from .sessions import Sessions
from .upstreams import Holder, PrincipalHolder, SessionHolder, Upstream, UpstreamRefused

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
RELAYED_CAPABILITIES: Final = ("logging", "resources", "prompts", "completions")
# MCP's "resource not found" (the spec's own code).
RESOURCE_NOT_FOUND: Final = -32002
# Pages of one server's listing the gateway reads for /mcp's union, at most:
# a server that pages forever must not hold the request.
MAX_PAGES: Final = 100
# A relayed request's wait for its server: the server's own timeout applies
# to its tools; these requests (a listing, a read, a prompt) get this long.
RELAY_WAIT: Final = 60.0
# The server-to-client notifications about resources and prompts, relayed.
LIST_CHANGED: Final = ("notifications/resources/list_changed", "notifications/prompts/list_changed")
UPDATED: Final = "notifications/resources/updated"
# A server's own requests the gateway asks its clients, by the client capability each needs.
SERVER_REQUESTS: Final = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
# The results 2026-07-28 gives cache hints (ttlMs, cacheScope).
CACHEABLE: Final = ("resources/list", "resources/templates/list", "resources/read", "prompts/list")

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

    def __init__(self, *args: Any, offers: Callable[[str, str | None], bool], **kwargs: Any) -> None:
        """``offers(capability, flag)``: whether a server of the endpoint declares ``capability`` (with ``flag``
        true in it, when given)."""
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
        update: dict[str, Any] = {name: None for name in RELAYED_CAPABILITIES if not self._offers(name, None)}
        # The list changes and updates a 2025 session hears (the gateway tells no listen stream of them).
        handshake = protocol_version is None or protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        if "resources" not in update:
            update["resources"] = types.ResourcesCapability(
                subscribe=handshake and self._offers("resources", "subscribe"),
                list_changed=handshake and self._offers("resources", "listChanged"),
            )
        if "prompts" not in update:
            update["prompts"] = types.PromptsCapability(
                list_changed=handshake and self._offers("prompts", "listChanged")
            )
        return capabilities.model_copy(update=update)


class ClientRelay(Listener):
    """One request's relay to its client: what the core hears of it, sent in order from a task of its own."""

    def __init__(self, proxy: Proxy, ctx: ServerRequestContext[Any, Any], backend: Upstream, principal: str) -> None:
        self._proxy = proxy
        self._given = ctx
        self._streamed: ServerRequestContext[Any, Any] | None = None
        self._backend = backend
        self._principal = principal
        self._queue: collections.deque[Callable[[], Awaitable[None]]] = collections.deque(maxlen=HELD)
        self._sender: asyncio.Task[None] | None = None
        self.dropped = 0

    @property
    def _ctx(self) -> ServerRequestContext[Any, Any]:
        # Made on first use: most calls hear nothing, and need no context of their own.
        # A request answered through .fastpath (a JSON-mode session's) writes its own messages on its answer,
        # which they turn into an event stream; the SDK's JSON mode would drop them.
        if self._streamed is None:
            self._streamed = streamed(self._given)
        return self._streamed

    def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self._put(lambda: self._ctx.session.report_progress(progress, total, message))

    def notified(self, method: str, params: bytes | None) -> None:
        if method != "notifications/message":
            # Not a request's own: routed as one attributed to no request, of the server it came from.
            holder = self._backend.holder(self._proxy.session_of(self._ctx), self._principal)
            if holder is None and self._backend.served.session == "per-session":
                return  # no session, so no server of its own to speak for
            self._proxy.heard(self._backend, holder, method, params)
            return
        if not self._backend.alone(self._principal):
            return  # a shared server several principals used: its words may be another's (the module's rule)
        if not self._proxy.hears(self._ctx, _level_of(params)):
            return
        notification = _notification(method, params)
        if notification is not None:
            request = self._ctx.request_id
            self._put(lambda: self._ctx.session.send_notification(notification, related_request_id=request))

    def requested(self, method: str, params: bytes | None) -> Awaitable[tuple[bytes | None, bytes | None]] | None:
        """A request of the server during this client's request: asked of this client when it declared the
        capability and the server is its principal's alone (:meth:`.upstreams.Upstream.alone`); refused otherwise,
        with the reason."""
        capability = SERVER_REQUESTS.get(method)
        if capability is None:
            return _refused(METHOD_NOT_FOUND, f"Method not found: {method}")
        if not self._backend.alone(self._principal):
            # A shared server several principals used: its request may come of another's work (the module's rule).
            return _refused(
                METHOD_NOT_FOUND,
                f"{method} is not relayed from a server several principals use (lovia-mcp serve): serve it "
                '"session": "per-principal" or "per-session" to let its clients answer',
            )
        declared = self._ctx.session.check_client_capability(types.ClientCapabilities.model_validate({capability: {}}))
        if not declared:
            return _refused(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"the client did not declare the {capability!r} capability, so it is not asked {method} "
                "(relayed by lovia-mcp serve)",
            )
        return self._ask(method, params)

    async def _ask(self, method: str, params: bytes | None) -> tuple[bytes | None, bytes | None]:
        body: dict[str, Any] = {"method": method}
        if params is not None:
            body["params"] = _decode(params)
        try:
            request = types.server_request_adapter.validate_python(body)
            result = await self._ctx.session.send_request(
                request, _AnyResult, metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id)
            )
        except MCPError as exc:
            return None, _encode(exc.error.model_dump(by_alias=True, mode="json", exclude_none=True))
        except Exception as exc:  # noqa: BLE001 - the server gets an answer whatever the client did
            return None, _encode({"code": INTERNAL_ERROR, "message": f"{method}: {exc}"})
        return _encode(result.model_dump(by_alias=True, mode="json", exclude_none=True)), None

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
        backends: dict[str, Upstream],
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
        # (server, resource URI) -> the 2025 sessions subscribed to it.
        self._subscribed: dict[tuple[str, str], set[str]] = {}
        self._sending: set[asyncio.Task[None]] = set()
        for backend in backends.values():
            backend.on_notification = self.heard

    # -- capabilities ---------------------------------------------------------- #
    def offers(self, only: str | None, capability: str, flag: str | None = None) -> bool:
        """Whether a server the endpoint serving ``only`` serves declares ``capability`` (with ``flag`` true)."""
        return any(
            _declares(backend, capability, flag) for name, backend in self._backends.items() if only in (None, name)
        )

    # -- resources, prompts, completion ------------------------------------------ #
    def _visible(self, only: str | None, principal: str, capability: str) -> list[Upstream]:
        """The servers of the endpoint serving ``only`` that ``principal`` may see and that declare ``capability``,
        in the config's order."""
        return [
            backend
            for name, backend in self._backends.items()
            if only in (None, name) and self._access.sees(principal, name) and _declares(backend, capability, None)
        ]

    async def forward(
        self, ctx: ServerRequestContext[Any, Any], backend: Upstream, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``method`` with ``params`` to ``backend``'s server for ``ctx``'s client: the server's result; its error
        raised as the client's JSON-RPC error. What the server says meanwhile reaches the client (:func:`relayed`)."""
        principal = principal_of(getattr(ctx.request, "scope", None))
        holder = backend.holder(self._session_of(ctx), principal)
        body = None if params is None else _encode({k: v for k, v in params.items() if k != "_meta"})
        try:
            async with relayed(self, ctx, backend, principal) as relay:
                conn: MCPConnection = await backend.take(holder, principal)
                reply = await conn.relay(method, body, timeout=RELAY_WAIT, listener=relay)
        except UpstreamRefused as exc:
            raise MCPError(UNAVAILABLE, f"{exc} (hint: {exc.hint})") from None
        except LoviaError as exc:
            raise MCPError(UNAVAILABLE, f"server {backend.name!r}: {exc.args[0] if exc.args else exc}") from None
        if reply.error is not None:
            error = _decode(reply.error)
            if not isinstance(error, dict):
                error = {}
            raise MCPError(int(error.get("code", UNAVAILABLE)), str(error.get("message", "")), error.get("data"))
        result = _decode(reply.result or b"{}")
        if not isinstance(result, dict):
            result = {}
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            result.pop("resultType", None)  # a 2026-07-28 server's (the SDK does not sieve every 2025 answer)
            return result
        # 2026-07-28 requires it of a result (a handshake-era server sends none).
        result.setdefault("resultType", "complete")
        if method in CACHEABLE:
            # 2026-07-28 requires cache hints of these: a handshake-era server gives none. What the gateway
            # serves is the principal's (its access rules): private, and not to be reused without asking again.
            result.setdefault("ttlMs", 0)
            result.setdefault("cacheScope", "private")
        return result

    async def _pages(self, ctx: ServerRequestContext[Any, Any], backend: Upstream, method: str, key: str) -> list[Any]:
        """Every page of ``backend``'s listing ``method`` (its items under ``key``), at most :data:`MAX_PAGES`."""
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self.forward(ctx, backend, method, None if cursor is None else {"cursor": cursor})
            found = page.get(key)
            items += found if isinstance(found, list) else []
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return items

    async def listing(
        self,
        ctx: ServerRequestContext[Any, Any],
        only: str | None,
        method: str,
        key: str,
        params: BaseModel | None,
    ) -> dict[str, Any]:
        """A ``resources/list``, ``resources/templates/list`` or ``prompts/list`` (items under ``key``).

        One server's endpoint: the server's answer as it is (its pages and
        cursors). ``/mcp``: the union of every server the principal may see,
        each read whole; resources keep their URIs, prompts are named
        ``<server>__<prompt>`` as tools are; a server that fails is left out
        (and logged), so one broken server does not hide the others.
        """
        capability = "prompts" if key == "prompts" else "resources"
        principal = principal_of(getattr(ctx.request, "scope", None))
        backends = self._visible(only, principal, capability)
        if only is not None:
            if not backends:
                raise _not_found(method)
            return await self.forward(ctx, backends[0], method, _params(params))
        items: list[Any] = []
        for backend in backends:
            try:
                found = await self._pages(ctx, backend, method, key)
            except MCPError as exc:
                logger.warning("not listed", extra={"server": backend.name, "method": method, "error": str(exc)})
                continue
            if key == "prompts":
                found = [
                    {**p, "name": f"{backend.name}{PREFIX_SEP}{p.get('name')}"} for p in found if isinstance(p, dict)
                ]
            items += found
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            return {key: items}
        return {key: items, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}

    async def owner_of(self, ctx: ServerRequestContext[Any, Any], only: str | None, uri: str) -> Upstream:
        """The server a resource URI belongs to, for ``ctx``'s principal: on ``/mcp``, the first server (in the
        config's order) that lists the URI or has a template matching it, or the only server with resources."""
        principal = principal_of(getattr(ctx.request, "scope", None))
        backends = self._visible(only, principal, "resources")
        if len(backends) == 1:
            return backends[0]
        for backend in backends:
            try:
                listed = await self._pages(ctx, backend, "resources/list", "resources")
                if any(isinstance(r, dict) and r.get("uri") == uri for r in listed):
                    return backend
                templates = await self._pages(ctx, backend, "resources/templates/list", "resourceTemplates")
            except MCPError:
                continue
            if any(isinstance(t, dict) and _matches(str(t.get("uriTemplate", "")), uri) for t in templates):
                return backend
        raise MCPError(
            RESOURCE_NOT_FOUND,
            f"Resource not found: {uri}",
            {"uri": uri, "hint": "List the resources (resources/list, resources/templates/list) and use one listed."},
        )

    def prompt_of(self, only: str | None, principal: str, name: str) -> tuple[Upstream, str]:
        """The server and raw name of prompt ``name`` (``<server>__<prompt>`` on ``/mcp``); a prompt of a server
        the principal may not see is answered as one that does not exist."""
        backends = {b.name: b for b in self._visible(only, principal, "prompts")}
        if only is not None and only in backends:
            return backends[only], name
        if only is None:
            for server in sorted(self._backends, key=len, reverse=True):
                if name.startswith(server + PREFIX_SEP):
                    if server in backends:
                        return backends[server], name[len(server) + len(PREFIX_SEP) :]
                    break
        hint = "" if only is not None else f": prompts here are named <server>{PREFIX_SEP}<prompt>"
        raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r}{hint}")

    async def read(self, ctx: ServerRequestContext[Any, Any], only: str | None, method: str, params: Any) -> Any:
        """``resources/read``: to the server the URI belongs to."""
        backend = await self.owner_of(ctx, only, str(params.uri))
        return await self.forward(ctx, backend, method, _params(params))

    async def get_prompt(self, ctx: ServerRequestContext[Any, Any], only: str | None, params: Any) -> dict[str, Any]:
        principal = principal_of(getattr(ctx.request, "scope", None))
        backend, raw = self.prompt_of(only, principal, params.name)
        return await self.forward(ctx, backend, "prompts/get", {**_params(params), "name": raw})

    async def complete(self, ctx: ServerRequestContext[Any, Any], only: str | None, params: Any) -> dict[str, Any]:
        """``completion/complete``: to the prompt's server (its raw name) or the resource template's."""
        principal = principal_of(getattr(ctx.request, "scope", None))
        body = _params(params)
        ref = dict(body.get("ref") or {})
        if ref.get("type") == "ref/prompt":
            backend, ref["name"] = self.prompt_of(only, principal, str(ref.get("name")))
        else:
            backend = await self.owner_of(ctx, only, str(ref.get("uri")))
        if not _declares(backend, "completions", None):
            raise _not_found("completion/complete")
        return await self.forward(ctx, backend, "completion/complete", {**body, "ref": ref})

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], only: str | None, method: str, params: Any) -> Any:
        """``resources/subscribe`` / ``unsubscribe`` of a 2025 session: recorded (updates go to the sessions
        subscribed), and forwarded; a shared server is subscribed while one session is, and unsubscribed after
        the last."""
        session = self._session_of(ctx)
        if session is None:
            raise MCPError(
                INVALID_REQUEST,
                f"{method} needs a 2025 session: updates go to a session's stream",
                {"hint": "Connect with an initialize handshake (the SDK's Client(mode='legacy'))."},
            )
        uri = str(params.uri)
        backend = await self.owner_of(ctx, only, uri)
        key = (backend.name, uri)
        subscribed = {s for s in self._subscribed.get(key, set()) if s in self._sessions}
        others = subscribed - {session}
        if method == "resources/subscribe":
            subscribed.add(session)
        else:
            subscribed.discard(session)
        self._subscribed[key] = subscribed
        if not subscribed:
            del self._subscribed[key]
        if backend.served.session == "shared" and others:
            return {}  # the server already tells of it, and goes on telling the others
        return await self.forward(ctx, backend, method, _params(params))

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
    def heard(self, backend: Upstream, holder: Holder | None, method: str, params: bytes | None) -> None:
        """A notification of ``backend``'s server attributed to no request (of ``holder``'s server; ``None``: a
        shared one)."""
        if method == "notifications/message" and isinstance(holder, SessionHolder):
            floor = self._levels.get(holder.session)
            listener = self._sessions.listener(holder.session)
            if listener is not None and _at_least(_level_of(params), floor):
                notification = _notification(method, params)
                if notification is not None:
                    self._spawn(self._send(listener, notification))
        elif method in LIST_CHANGED or method == UPDATED:
            notification = _notification(method, params)
            if notification is not None:
                for listener in self._told(backend, holder, method, params):
                    self._spawn(self._send(listener, notification))

    def _told(self, backend: Upstream, holder: Holder | None, method: str, params: bytes | None) -> list[ServerSession]:
        """The 2025 sessions that hear a list change or a resource's update of ``holder``'s server (everyone's:
        ``None``): of a principal that may see the server (and whose server it is), on an endpoint that serves
        it; an update only those subscribed."""
        name = backend.name
        principal = holder.principal if isinstance(holder, PrincipalHolder) else None

        def hears(who: str) -> bool:
            return (principal is None or who == principal) and self._access.sees(who, name)

        if isinstance(holder, SessionHolder):
            owner = self._sessions.principal(holder.session)
            listener = self._sessions.listener(holder.session)
            candidates = (
                {holder.session: listener} if listener is not None and owner is not None and hears(owner) else {}
            )
        else:
            candidates = self._sessions.listening(name, hears)
        if method == UPDATED:
            uri = _uri_of(params)
            subscribed = self._subscribed.get((name, uri), set())
            candidates = {sid: listener for sid, listener in candidates.items() if sid in subscribed}
        return list(candidates.values())

    async def _send(self, session: ServerSession, notification: Any) -> None:
        try:
            await asyncio.wait_for(session.send_notification(notification), SEND_WAIT)
        except Exception as exc:  # noqa: BLE001 - a session gone or stuck loses its message, nothing else
            logger.debug("not relayed: %r", exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def session_of(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        return self._session_of(ctx)

    def server(self, only: str | None, **options: Any) -> ProxyServer:
        """The SDK Server of the endpoint serving ``only`` (every server: ``None``), with the relay's handlers."""
        server = ProxyServer(offers=lambda capability, flag: self.offers(only, capability, flag), **options)

        async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> dict[str, Any]:
            return await self.set_level(ctx, params, only)

        server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)

        def offered(method: str, capability: str, serve: Callable[..., Awaitable[Any]]) -> Any:
            async def handler(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
                if not self.offers(only, capability):
                    raise _not_found(method)  # as before the relay: the endpoint has no such capability
                return await serve(ctx, params)

            return handler

        for method, key in (
            ("resources/list", "resources"),
            ("resources/templates/list", "resourceTemplates"),
            ("prompts/list", "prompts"),
        ):
            capability = "prompts" if key == "prompts" else "resources"
            server.add_request_handler(
                method,
                types.PaginatedRequestParams,
                offered(method, capability, lambda ctx, params, m=method, k=key: self.listing(ctx, only, m, k, params)),
            )
        server.add_request_handler(
            "resources/read",
            types.ReadResourceRequestParams,
            offered("resources/read", "resources", lambda ctx, p: self.read(ctx, only, "resources/read", p)),
        )
        for method, kind in (
            ("resources/subscribe", types.SubscribeRequestParams),
            ("resources/unsubscribe", types.UnsubscribeRequestParams),
        ):
            server.add_request_handler(
                method,
                kind,
                offered(method, "resources", lambda ctx, p, m=method: self.subscribe(ctx, only, m, p)),
            )
        server.add_request_handler(
            "prompts/get",
            types.GetPromptRequestParams,
            offered("prompts/get", "prompts", lambda ctx, p: self.get_prompt(ctx, only, p)),
        )
        server.add_request_handler(
            "completion/complete",
            types.CompleteRequestParams,
            offered("completion/complete", "completions", lambda ctx, p: self.complete(ctx, only, p)),
        )
        return server


class _AnyResult(BaseModel):
    """A client's result as it sent it (the server checks it against its own model)."""

    model_config = ConfigDict(extra="allow")


async def _refusal(code: int, message: str) -> tuple[bytes | None, bytes | None]:
    return None, _encode({"code": code, "message": message})


def _refused(code: int, message: str) -> Awaitable[tuple[bytes | None, bytes | None]]:
    return _refusal(code, message)


def _declares(backend: Upstream, capability: str, flag: str | None) -> bool:
    """Whether ``backend``'s server declares ``capability`` (with ``flag`` true in it, when given)."""
    declared = backend.capabilities().get(capability)
    if declared is None:
        return False
    return flag is None or (isinstance(declared, dict) and declared.get(flag) is True)


def _not_found(method: str) -> MCPError:
    return MCPError(METHOD_NOT_FOUND, "Method not found", method)


def _params(params: BaseModel | None) -> dict[str, Any]:
    """A request's params as the client sent them (the SDK parsed them), its ``_meta`` left to the worker."""
    if params is None:
        return {}
    body = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    body.pop("_meta", None)
    return body


class _Uri(msgspec.Struct):
    uri: str = ""


def _uri_of(params: bytes | None) -> str:
    try:
        return msgspec.json.decode(params or b"{}", type=_Uri).uri
    except (msgspec.DecodeError, RecursionError):
        return ""


_EXPRESSION = re.compile(r"\{([+#./;?&]?)[^}]*\}")


def _matches(template: str, uri: str) -> bool:
    """Whether ``uri`` is one of RFC 6570 ``template``'s: a simple ``{var}`` is one path segment, ``{+var}`` and
    ``{#var}`` anything, a query form (``{?a,b}``) an optional query."""
    pattern, at = "", 0
    for found in _EXPRESSION.finditer(template):
        pattern += re.escape(template[at : found.start()])
        operator = found.group(1)
        pattern += {"": "[^/?#]+", "+": ".*", "#": "(#.*)?", "?": r"(\?.*)?", "&": "(&.*)?"}.get(operator, "[^/?#]*")
        at = found.end()
    pattern += re.escape(template[at:])
    return re.fullmatch(pattern, uri) is not None


def wants_progress(params: Mapping[str, Any] | None) -> bool:
    """Whether a request's params ask for progress (a ``progressToken`` in its ``_meta``)."""
    return progress_token(params) is not None


@contextlib.asynccontextmanager
async def relayed(
    proxy: Proxy, ctx: ServerRequestContext[Any, Any], backend: Upstream, principal: str
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
    "MAX_PAGES",
    "RELAY_WAIT",
    "RESOURCE_NOT_FOUND",
    "LEVELS",
    "RELAYED_CAPABILITIES",
    "SEND_WAIT",
    "ClientRelay",
    "Proxy",
    "ProxyServer",
    "relayed",
    "wants_progress",
]
