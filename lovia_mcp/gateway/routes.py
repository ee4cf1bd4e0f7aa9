"""What each path of the gateway is, the checks on an MCP request's headers, and where the request goes.

Paths:

- ``/healthz`` (the process answers) and ``/readyz`` (servers open, not
  draining): no credentials;
- ``/metrics`` (Prometheus text), for a principal the access section lets
  read it (anyone else gets the 404 of a path with no endpoint);
- ``/mcp``: every server's tools, named ``<server>__<tool>``;
  ``/servers/<name>/mcp``: one server's tools under their own names
  (:func:`endpoints`). A server the principal may not see has no endpoint
  for it.

An MCP request is checked before anything acts on it (:meth:`Routes.request`):
``Mcp-Session-Id`` or ``Mcp-Protocol-Version`` sent twice (400: the gateway
and the SDK must read the same one), a declared body over the cap (413), a
session id under a 2026-07-28 version (400: that era has no sessions, and
the SDK would serve it without looking at the id). What passes is an
:class:`McpRequest`, the facts admission (:mod:`.admission`) and dispatch
read.

Dispatch (:meth:`Routes.dispatch`): each endpoint has two session
managers on one Server, one in the SDK's default (SSE) mode and one in JSON
mode. A 2026-07-28 ``tools/call`` or ``tools/list`` goes to the JSON-mode one
through :mod:`.fastpath`. A request that may open a 2025 session goes
through the opening watch the gateway gives (the session id the SDK
answers is recorded for its token), to the manager its client's
``initialize`` chose: a client that declares a capability a server may ask
of it mid-call (:data:`ASKED`: sampling, elicitation, roots) gets the
SSE-mode manager, since JSON mode cannot carry such a request; any other
client's session lives in the JSON-mode manager, and its POSTs go through
:mod:`.fastpath` (one JSON body per answer, an event stream only when
something must go first). :mod:`.sessions` remembers which manager holds
each session, so every later request, GET stream and DELETE goes there; an
id it does not hold goes to the SSE-mode manager, which answers it as any
unknown session. A session's request is counted in :mod:`.sessions` while
in flight, and a ``DELETE`` the SDK accepted ends the session's servers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Final

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.jsonrpc import INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import Receive, Scope, Send

from ._http import RpcRefusal, answered
from .access import Access
from .fastpath import FAST_METHODS, accepts_both, declared, peeked, serve_fast
from .relay import SERVER_REQUESTS
from .sessions import Sessions
from .upstreams import Upstream

HEALTH: Final = "/healthz"
READY: Final = "/readyz"
METRICS: Final = "/metrics"
SESSION_HEADER: Final = b"mcp-session-id"
VERSION_HEADER: Final = b"mcp-protocol-version"
METHOD_HEADER: Final = b"mcp-method"
# Headers the gateway and the SDK both read: the SDK (through Starlette)
# reads the first of each, so a request that sends one twice is refused.
ONCE: Final = frozenset({SESSION_HEADER, VERSION_HEADER})
LISTEN: Final = b"subscriptions/listen"
# The client capabilities that let a server ask the client something in the
# middle of a call (.relay): a session whose client declares one of them
# lives in the SSE-mode manager.
ASKED: Final = frozenset(SERVER_REQUESTS.values())


def endpoints(servers: list[str]) -> dict[str, str | None]:
    """Each MCP endpoint's path, and the server it serves alone (``None``: ``/mcp``, every server)."""
    return {"/mcp": None, **{f"/servers/{name}/mcp": name for name in servers}}


def session_managers(
    servers: Mapping[str, Server[Any]], *, loopback: bool, max_body_bytes: int, max_sessions: int, session_idle: float
) -> dict[str, tuple[StreamableHTTPSessionManager, StreamableHTTPSessionManager]]:
    """Each endpoint's two session managers on its ``Server``: one in the SDK's default (SSE) mode for 2025
    sessions and everything else, one in JSON mode for the 2026-07-28 calls :mod:`.fastpath` serves."""
    security = None
    if loopback:
        # As the SDK's own streamable_http_app does for a loopback host.
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )

    def manager(app: Server[Any], json_response: bool) -> StreamableHTTPSessionManager:
        return StreamableHTTPSessionManager(
            app=app,
            security_settings=security,
            max_request_body_size=max_body_bytes,
            max_sessions=max_sessions,
            session_idle_timeout=session_idle,
            json_response=json_response,
        )

    return {path: (manager(app, False), manager(app, True)) for path, app in servers.items()}


def owner(scope: Scope) -> str | None:
    """Which credential let the request in (:attr:`.auth.authenticator.Identity.owner`), ``None`` without credentials."""
    user = scope.get("user")
    return user.username if isinstance(user, AuthenticatedUser) else None


def first(scope: Scope, name: bytes) -> bytes | None:
    """The first ``name`` header of the request, as the SDK reads it."""
    return next((value for key, value in scope.get("headers", ()) if key == name), None)


@dataclass(frozen=True, kw_only=True)
class McpRequest:
    """A request for an MCP endpoint that passed the header checks: what admission and dispatch read."""

    path: str
    # The server the endpoint serves alone (None: /mcp).
    only: str | None
    principal: str
    # The HTTP method.
    method: str
    session: str | None
    version: str | None
    # The Mcp-Method header (2026-07-28), raw.
    mcp_method: bytes | None
    accept: bytes

    @property
    def stateless(self) -> bool:
        """A 2026-07-28 request: self-contained, in no session."""
        return self.version in MODERN_PROTOCOL_VERSIONS

    @property
    def handshake(self) -> bool:
        """Of the 2025 era (or no version yet): a request without a session may open one."""
        return self.version is None or self.version in HANDSHAKE_PROTOCOL_VERSIONS

    @property
    def listen(self) -> bool:
        return self.mcp_method == LISTEN

    @property
    def fast(self) -> bool:
        """A 2026-07-28 call or listing that :mod:`.fastpath` serves."""
        return self.stateless and self.mcp_method in FAST_METHODS and accepts_both(self.accept)


class Opener:
    """The handler of a request that may open a 2025 session: an ``initialize`` POST's body is read to choose the
    endpoint's manager (the module's rule), and :attr:`json_mode` says which it chose (once it has)."""

    def __init__(self, sse: StreamableHTTPSessionManager, json: StreamableHTTPSessionManager, accept: bytes) -> None:
        self._sse = sse
        self._json = json
        self._accept = accept
        self.json_mode = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self._sse
        if scope["method"] == "POST" and accepts_both(self._accept):
            body, whole, receive = await peeked(receive, self._json.max_request_body_size)
            capabilities = declared(body) if whole else None
            if capabilities is not None and capabilities.isdisjoint(ASKED):
                manager, self.json_mode = self._json, True
        await manager.handle_request(scope, receive, send)


# The opening watch (:meth:`.admission.Admission.opening`): serves a request that may open a 2025 session
# through the opener, recording the id the SDK answers (and the manager that holds it).
Opening = Callable[[Opener, Scope, Receive, Send, McpRequest], Awaitable[None]]


class Routes:
    """The MCP endpoints: each one's session managers, the header checks, the dispatch."""

    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        managers: Mapping[str, tuple[StreamableHTTPSessionManager, StreamableHTTPSessionManager]],
        *,
        access: Access,
        sessions: Sessions,
        max_body_bytes: int,
        opening: Opening,
    ) -> None:
        """``managers``: by endpoint path, its manager in the SDK's default (SSE) mode and its JSON-mode one on
        the same Server; ``opening``: the watch a request that may open a session is served through (its
        :class:`Opener` chooses the manager)."""
        self._upstreams = upstreams
        self._access = access
        self._sessions = sessions
        self._max_body_bytes = max_body_bytes
        self._opening = opening
        self.managers = {path: pair[0] for path, pair in managers.items()}
        self.fast = {path: pair[1] for path, pair in managers.items()}
        self.paths = endpoints(list(upstreams))

    async def enter(self, stack: AsyncExitStack) -> None:
        """Start every endpoint's session managers; ``stack`` stops them."""
        for m in [*self.managers.values(), *self.fast.values()]:
            await stack.enter_async_context(m.run())

    def request(self, scope: Scope, principal: str) -> McpRequest | RpcRefusal:
        """The request for an MCP endpoint ``scope`` is, or why the gateway refuses it as it stands."""
        path: str = scope["path"]
        path = path.rstrip("/") or path
        manager, only = self.managers.get(path), self.paths.get(path)
        if manager is None or (only is not None and not self._access.sees(principal, only)):
            # A server the principal may not see has no endpoint for it.
            return RpcRefusal(
                404,
                INVALID_REQUEST,
                f"no endpoint {path}",
                "Use /mcp (every server) or /servers/<name>/mcp; servers: "
                + ", ".join(s for s in sorted(self._upstreams) if self._access.sees(principal, s)),
            )
        headers = self._headers(scope)
        if isinstance(headers, RpcRefusal):
            return headers
        session = headers[SESSION_HEADER].decode("latin-1") if SESSION_HEADER in headers else None
        version = headers[VERSION_HEADER].decode("latin-1") if VERSION_HEADER in headers else None
        if session is not None and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # The SDK serves such a request as self-contained (2026-07-28 has no
            # sessions) without looking at the id: refused rather than served
            # sessionless, so a client that believes it is in a session learns
            # at once that it is not, and no id the SDK did not check goes further.
            return RpcRefusal(
                400,
                INVALID_REQUEST,
                f"Mcp-Session-Id names a 2025 session, and a {version} request belongs to no session",
                "Drop the Mcp-Session-Id header (a 2026-07-28 request is self-contained), or send "
                "the session's own Mcp-Protocol-Version (the one its initialize agreed) to use it.",
            )
        return McpRequest(
            path=path,
            only=only,
            principal=principal,
            method=scope["method"],
            session=session,
            version=version,
            mcp_method=headers.get(METHOD_HEADER),
            accept=headers.get(b"accept", b""),
        )

    def _headers(self, scope: Scope) -> dict[bytes, bytes] | RpcRefusal:
        """The first of each header, as the SDK reads them; refused if one of :data:`ONCE` is twice, or the
        declared body is over the cap."""
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers", ()):
            if key in ONCE and key in headers:
                return RpcRefusal(
                    400,
                    INVALID_REQUEST,
                    f"the request has two {key.decode().title()} headers",
                    "Send each of Mcp-Session-Id and Mcp-Protocol-Version at most once.",
                )
            headers.setdefault(key, value)
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self._max_body_bytes:
            # The SDK would answer the same status in plain text; its cap still
            # stops a chunked body that grows past it.
            return RpcRefusal(
                413,
                INVALID_REQUEST,
                f"the request body is {int(declared)} bytes, over this gateway's cap of {self._max_body_bytes}",
                "Send smaller arguments (a file's path or URL, not its content); the operator sets the cap "
                "with --max-body-bytes.",
            )
        return headers

    async def dispatch(self, request: McpRequest, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve an admitted request through its endpoint's session manager."""
        manager = self.managers[request.path]
        if request.fast:
            await serve_fast(self.fast[request.path].handle_request, scope, receive, send)
        elif request.session is not None:
            await self._in_session(request, request.session, scope, receive, send)
        elif request.handshake:
            opener = Opener(manager, self.fast[request.path], request.accept)
            await self._opening(opener, scope, receive, send, request)
        else:
            await manager.handle_request(scope, receive, send)

    async def _in_session(self, request: McpRequest, session: str, scope: Scope, receive: Receive, send: Send) -> None:
        json_mode = self._sessions.json_mode(session)
        manager = (self.fast if json_mode else self.managers)[request.path]
        # Every request of a session is seen (its GET stream for as long as it
        # is open): the table forgets a session as the SDK expires it.
        self._sessions.began(session)
        ended = False
        try:
            if request.method == "DELETE":
                # Only a DELETE the SDK accepted ends the session: another
                # token's gets the 404 of an unknown session and ends nothing.
                ended = 200 <= await answered(manager.handle_request, scope, receive, send) < 300
            elif json_mode and request.method == "POST" and accepts_both(request.accept):
                # JSON, or an event stream once something must go before the answer (.fastpath).
                header = [(SESSION_HEADER, session.encode("latin-1"))]
                await serve_fast(manager.handle_request, scope, receive, send, headers=header)
            else:
                await manager.handle_request(scope, receive, send)
        finally:
            self._sessions.ended(session)
        if ended and self._sessions.owned(session, owner(scope)) is not None:
            self._sessions.forget(session)
            for upstream in self._upstreams.values():
                await upstream.end_session(session)


__all__ = [
    "ASKED",
    "HEALTH",
    "LISTEN",
    "METHOD_HEADER",
    "METRICS",
    "ONCE",
    "READY",
    "SESSION_HEADER",
    "VERSION_HEADER",
    "McpRequest",
    "Opener",
    "Opening",
    "Routes",
    "endpoints",
    "first",
    "owner",
    "session_managers",
]
