"""The gateway's ASGI app: MCP endpoints through the SDK's server side, plus health, readiness and metrics.

Routes:

- ``/mcp``: every server's tools, named ``<server>__<tool>``;
- ``/servers/<name>/mcp``: one server's tools under their own names;
- ``/healthz`` (the process answers), ``/readyz`` (servers open, not draining),
  ``/metrics`` (Prometheus text).

Each MCP endpoint is a low-level ``mcp.server.lowlevel.Server`` behind its own
``StreamableHTTPSessionManager`` (public SDK API). The manager speaks both
eras: a 2025 client's initialize handshake opens a stateful session
(``Mcp-Session-Id``); a 2026-07-28 request is self-contained and needs no
session, so shared servers need no affinity between replicas. A 2026-07-28
``tools/call`` or ``tools/list`` goes to a second manager on the same Server,
in JSON mode, through :mod:`.fastpath` (cheaper; the same answers).

Tool-list changes reach the clients through :mod:`.notify`: a 2025 session
gets ``notifications/tools/list_changed``, a 2026-07-28 client holding a
``subscriptions/listen`` stream a ``ToolsListChanged`` event.

Per call, nothing is done twice: the tool's input schema comes from the
gateway's listing (the SDK would otherwise run ``tools/list`` per call to
check ``Mcp-Param-*`` headers) and the result goes to the SDK as its MCP
JSON (validated once, by the SDK, on the way out).

Security: every route but ``/healthz``, ``/readyz`` and the authentication
scheme's public documents (OAuth: ``/.well-known/oauth-protected-resource``)
passes the scheme :mod:`.auth` picked (a token file's bearer tokens, an
OAuth issuer's access tokens, or none on loopback); a refusal is a 401, 403
or 503 with the scheme's ``WWW-Authenticate`` challenge. Every refusal the
gateway makes itself is a JSON-RPC error (``id`` null, a hint in ``data``),
which the MCP SDK's client raises with its message and data. A session
answers only to the credential that opened it (a token file's line, an
OAuth token's client and subject), in every era: a 2025 request for another token's session gets the 404 of
an unknown session (the SDK's own binding), a 2026-07-28 request carrying
``Mcp-Session-Id`` is refused (400: that era has no sessions, and the SDK
would serve it without looking at the id), and a handler acts only on
session ids :mod:`.sessions` saw the SDK issue to the request's token. A
request with two ``Mcp-Session-Id`` or ``Mcp-Protocol-Version`` headers is
refused (400): the gateway and the SDK must read the same one. Request
bodies over the cap get a 413 and sessions over the cap a 503 (the SDK's
own limits); with several principals, each may hold at most its share of
an endpoint's sessions (:func:`.principals.share`), and a new session past
it is a 503 too, so that no principal can fill the cap for the others. On
loopback, the SDK's DNS rebinding protection checks ``Host`` and
``Origin``. What a client can hold before any of this is checked
(connections, request heads) is bounded by :mod:`.connections`.

Principals: ``_authenticate`` leaves the principal the scheme named in
the request's scope (``default`` without credentials). What a principal may
call on a server is one set, :meth:`Gateway.callable_tools`: the tools the
server's connection offers (its ``include_tools`` / ``exclude_tools`` and
the lock's quarantine applied) that the access section (:mod:`.access`)
allows. A principal lists only that set, can call only it, and gets the
input schema the SDK checks ``Mcp-Param-*`` headers against only for it;
it reaches only the endpoints of servers it may use. A tool or endpoint
outside them is answered exactly as one that does not exist
(:meth:`Gateway._unknown`, the same 404). Every call (refused ones too) is
one line of the audit log (:mod:`.audit`).

Before ready: a request for an MCP endpoint waits until the servers that
endpoint serves to its principal are open (:func:`.upstreams.wait_open`),
then is served; only one of those that failed to open (or the gateway
stopping) makes it an error.

Failure semantics: a call that fails on the server's side (a crash, a
limit, a timeout, an open circuit) is that call's ``isError`` result,
with ``_meta["lovia-mcp/error"]`` naming the kind; an unknown tool or a
refused session slot is a JSON-RPC error; a new session while draining
is an HTTP 503. The
server's own ``isError`` results and annotations pass through unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from contextlib import AsyncExitStack
from contextvars import ContextVar
from typing import Any, Final

import mcp_types as types
from lovia.exceptions import MCPError as LoviaMCPError
from lovia_mcp_worker.wire.mcpjson import block_json
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import Receive, Scope, Send

from .._names import PREFIX_SEP
from ..config.annotations import MCPTool, as_json
from ..render import DENIED_META, MCPToolResult, denial_lines
from .access import Access
from .audit import AuditLog, Caller, trace_id
from .auth.anonymous import Anonymous
from .auth.base import AUTH_REFUSED, Authenticator, Refusal
from .connections import CLOSE_REASONS, ConnectionLimits
from .fastpath import FAST_METHODS, accepts_both, serve_fast
from .metrics import CONTENT_TYPE, UNKNOWN_TOOL, Labels, Metrics
from .notify import Notifier
from .principals import DEFAULT_PRINCIPAL, SCOPE_KEY, principal_of, share
from .relay import ClientRelay, Proxy, relayed
from .sessions import Sessions
from .upstreams import Holder, Upstream, UpstreamRefused, wait_open

logger = logging.getLogger("lovia_mcp.gateway")


SESSION_HEADER: Final = b"mcp-session-id"
VERSION_HEADER: Final = b"mcp-protocol-version"
METHOD_HEADER: Final = b"mcp-method"
# Headers the gateway and the SDK both read: the SDK (through Starlette)
# reads the first of each, so a request that sends one twice is refused.
ONCE: Final = frozenset({SESSION_HEADER, VERSION_HEADER})
LISTEN: Final = b"subscriptions/listen"
# JSON-RPC error code for "try again elsewhere" (the server-defined range):
# a draining gateway or a full session table.
UNAVAILABLE: Final = -32000
ERROR_META: Final = "lovia-mcp/error"
TRACEPARENT_HEADER: Final = b"traceparent"
# The request's principal where no handler argument carries it (the SDK's
# input-schema lookup): set per request in Gateway.__call__, inherited by
# the tasks the request's handling starts.
_PRINCIPAL: ContextVar[str | None] = ContextVar("lovia_mcp_gateway_principal", default=None)


def _owner(scope: Scope) -> str | None:
    """Which credential let the request in (:attr:`.auth.base.Identity.owner`), ``None`` without credentials."""
    user = scope.get("user")
    return user.username if isinstance(user, AuthenticatedUser) else None


def _first(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope.get("headers", ()) if key == name), None)


def result_json(result: MCPToolResult) -> dict[str, Any]:
    """The connection's result as the MCP JSON of a ``CallToolResult``, blocks and ``isError`` as the server sent them.

    The gateway hands this dict to the SDK as it is (a handler may return
    one): the SDK's outbound sieve validates it once on the way out, so no
    model is built here only to be dumped again.
    """
    # resultType as the model's default would dump it: 2026-07-28 requires it;
    # the SDK drops it for a 2025 client.
    body: dict[str, Any] = {
        "content": [block_json(b) for b in result.content],
        "isError": bool(result.is_error),
        "resultType": "complete",
    }
    if result.structured_content is not None:
        body["structuredContent"] = result.structured_content
    denied = (result.meta or {}).get(DENIED_META)
    if denied:
        # The client's model reads the lines as ours does; its code reads _meta.
        body["content"].append({"type": "text", "text": denial_lines(result).lstrip("\n")})
        body["_meta"] = {DENIED_META: denied}
    return body


def _error_result(kind: str, message: str) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": message}],
        "isError": True,
        "resultType": "complete",
        "_meta": {ERROR_META: kind},
    }


class Gateway:
    """The ASGI app; ``async with gateway.running():`` around serving it."""

    def __init__(
        self,
        backends: list[Upstream],
        *,
        loopback: bool,
        max_body_bytes: int,
        max_sessions: int,
        session_idle: float,
        limits: ConnectionLimits | None = None,
        auth: Authenticator | None = None,
        access: Access | None = None,
        audit: AuditLog | None = None,
        metrics_principal: bool = False,
    ) -> None:
        """``auth``: who a request is (default: no credentials, everyone ``default``); ``access``: who may use
        what (default: everyone everything); ``audit``: the open audit log; ``metrics_principal``: label calls by
        principal."""
        self.upstreams = {b.name: b for b in backends}
        self.auth: Authenticator = auth if auth is not None else Anonymous()
        self.access = access if access is not None else Access(None)
        self.audit = audit
        self.metrics_principal = metrics_principal
        self.max_body_bytes = max_body_bytes
        self.metrics = Metrics()
        # The HTTP connections' bounds (serve's), for the metrics.
        self.limits = limits
        self.ready = False
        self.draining = False
        self.in_flight = 0
        # Requests waiting for their servers to open (before ready).
        self.waiting = 0
        self.sessions = Sessions(session_idle)
        # Opening requests the SDK has not answered yet, by principal and
        # endpoint: counted against the principal's share with its sessions.
        self._pending: collections.Counter[tuple[str, str]] = collections.Counter()
        self._idle_now = asyncio.Event()
        self._idle_now.set()
        security = None
        if loopback:
            # As the SDK's own streamable_http_app does for a loopback host.
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )

        def manager(app: Server[Any], json_response: bool = False) -> StreamableHTTPSessionManager:
            return StreamableHTTPSessionManager(
                app=app,
                security_settings=security,
                max_request_body_size=max_body_bytes,
                max_sessions=max_sessions,
                session_idle_timeout=session_idle,
                json_response=json_response,
            )

        paths: dict[str, str | None] = {"/mcp": None, **{f"/servers/{name}/mcp": name for name in self.upstreams}}
        # Listen streams are long-lived HTTP responses: as many per endpoint
        # as sessions.
        self.paths = paths
        # Each principal's share of those caps (the whole cap with one
        # principal). A scheme that cannot list its principals (OAuth
        # subjects) splits them among those the access section names.
        known = self.auth.principals
        named = len(known) if known is not None else len(self.access.principals())
        self.max_sessions = max_sessions
        self.session_share = share(max_sessions, named)
        self.notifier = Notifier(
            paths,
            max_streams=max_sessions,
            share=self.session_share,
            sessions=self.sessions,
            access=self.access,
            on_share_refused=lambda path, principal: self._share_refused(path, "listen_streams", principal),
        )
        for backend in backends:
            backend.principals = named
            backend.on_tools_changed = lambda b, holder: self.notifier.changed(b.name, holder)
        # What servers say besides tools, relayed to the clients it belongs to (.relay).
        self.proxy = Proxy(self.upstreams, access=self.access, sessions=self.sessions, session_of=self._session_of)
        # Each endpoint: a manager in the SDK's default (SSE) mode for 2025
        # sessions and everything else, and one in JSON mode, on the same
        # Server, for the 2026-07-28 calls fastpath serves.
        self.managers: dict[str, StreamableHTTPSessionManager] = {}
        self.fast: dict[str, StreamableHTTPSessionManager] = {}
        for path, only in paths.items():
            app = self._mcp_server(path, only)
            self.managers[path] = manager(app)
            self.fast[path] = manager(app, json_response=True)

    # -- lifecycle ------------------------------------------------------------ #
    async def enter(self, stack: AsyncExitStack) -> None:
        """Start every endpoint's session manager; ``stack`` stops them."""
        for m in [*self.managers.values(), *self.fast.values()]:
            await stack.enter_async_context(m.run())

    async def drain(self, timeout: float) -> bool:
        """Refuse new sessions; wait up to ``timeout`` for the calls in flight. True if they all ended."""
        self.draining = True
        self.notifier.close()
        try:
            await asyncio.wait_for(self._idle_now.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    # -- MCP ------------------------------------------------------------------ #
    def _session_of(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The session ``ctx``'s request belongs to: an id the SDK opened for the token that sent it, else ``None``."""
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None  # 2026-07-28 has no sessions, whatever header came with the request
        scope = getattr(ctx.request, "scope", None)
        if not isinstance(scope, dict):
            return None
        raw = _first(scope, SESSION_HEADER)
        session = None if raw is None else raw.decode("latin-1")
        return session if self.sessions.owned(session, _owner(scope)) is not None else None

    def _mcp_server(self, path: str, only: str | None) -> Server[Any]:
        async def list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            principal = principal_of(getattr(ctx.request, "scope", None))
            return types.ListToolsResult(tools=self._listing(only, self._session_of(ctx), principal))

        async def initialized(ctx: ServerRequestContext[Any, Any], params: types.NotificationParams) -> None:
            session = self._session_of(ctx)
            if session is not None:
                principal = principal_of(getattr(ctx.request, "scope", None))
                self.sessions.heard(session, ctx.session, only, principal)

        async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> dict[str, Any]:
            scope = getattr(ctx.request, "scope", None)
            header = _first(scope, TRACEPARENT_HEADER) if isinstance(scope, dict) else None
            caller = Caller(principal_of(scope), path, trace_id(params.meta, header))
            session = self._session_of(ctx)
            backend, raw = self._permitted(only, params.name, session, caller)
            # What the server says of the call goes to this client, on this request's stream (.relay).
            async with relayed(self.proxy, ctx, backend, caller.principal) as relay:
                return await self._call(
                    backend, raw, params.arguments or {}, backend.holder(session, caller.principal), caller, relay
                )

        def input_schema(name: str) -> dict[str, Any] | None:
            # The SDK checks a 2026-07-28 call's Mcp-Param-* headers against the
            # tool's schema; without this lookup it runs a whole tools/list per call.
            # A tool the principal may not call has none (as an unknown one):
            # a header check must not tell it exists.
            principal = _PRINCIPAL.get() or ""
            try:
                backend, raw = self._resolve(only, name, principal)
            except (MCPError, KeyError):
                return None
            tool = self.callable_tools(backend, backend.holder(None, principal), principal).get(raw)
            return None if tool is None else tool.parameters

        from .. import __version__

        server: Server[Any] = self.proxy.server(
            only,
            name=f"lovia-mcp:{only}" if only else "lovia-mcp",
            version=__version__,
            on_list_tools=list_tools,
            get_tool_input_schema=input_schema,
            on_subscriptions_listen=self.notifier.endpoints[path].listen,
        )
        server.add_notification_handler("notifications/initialized", types.NotificationParams, initialized)
        # Registered by method rather than as on_call_tool: a handler may return
        # the result's JSON (the public HandlerResult), which skips building a
        # model the SDK would dump again.
        server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
        return server

    def callable_tools(self, backend: Upstream, holder: Holder | None, principal: str) -> dict[str, MCPTool]:
        """What ``principal`` may call on ``backend``'s server for ``holder``, by raw name: the one set that
        listing, calling and the SDK's schema lookup read, on every endpoint.

        The server's tools as its connection builds them (listed, let through
        by ``include_tools`` / ``exclude_tools`` and the lock's quarantine:
        :attr:`MCPConnection.callable_names`), less those the access rules
        do not allow the principal. A name outside it is an unknown tool.
        """
        if not self.access.sees(principal, backend.name):
            return {}
        try:
            tools = backend.tools(holder)
        except (UpstreamRefused, LoviaMCPError):  # not open (any more): nothing to call
            return {}
        return {t.raw_name: t for t in tools if self.access.allows(principal, backend.name, t.raw_name)}

    def _listing(self, only: str | None, session: str | None = None, principal: str = "") -> list[types.Tool]:
        tools: list[types.Tool] = []
        for name, backend in self.upstreams.items():
            if only is not None and name != only:
                continue
            for tool in self.callable_tools(backend, backend.holder(session, principal), principal).values():
                body: dict[str, Any] = {
                    "name": tool.raw_name if only else f"{name}{PREFIX_SEP}{tool.raw_name}",
                    "description": tool.description,
                    "inputSchema": tool.parameters,
                }
                if tool.annotations is not None:
                    body["annotations"] = as_json(tool.annotations)
                if tool.meta is not None:
                    body["_meta"] = tool.meta
                tools.append(types.Tool.model_validate(body))
        return tools

    def _resolve(self, only: str | None, name: str, principal: str) -> tuple[Upstream, str]:
        if only is not None:
            return self.upstreams[only], name
        # The longest server name that prefixes the tool: names may hold "__".
        for server in sorted(self.upstreams, key=len, reverse=True):
            if name.startswith(server + PREFIX_SEP):
                return self.upstreams[server], name[len(server) + len(PREFIX_SEP) :]
        raise self._unknown(only, name, principal)

    def _unknown(self, only: str | None, name: str, principal: str) -> MCPError:
        """The answer to a call of a tool ``principal`` cannot see, whether it exists or not: one answer for both."""
        if only is not None:
            return MCPError(INVALID_PARAMS, f"unknown tool {name!r}")
        return MCPError(
            INVALID_PARAMS,
            f"unknown tool {name!r}: tools here are named <server>{PREFIX_SEP}<tool>",
            data={"servers": [s for s in sorted(self.upstreams) if self.access.sees(principal, s)]},
        )

    def _permitted(self, only: str | None, name: str, session: str | None, caller: Caller) -> tuple[Upstream, str]:
        """The server and tool ``caller`` calls; the unknown-tool error (audited) if it may not.

        Only a tool of the principal's callable set (:meth:`callable_tools`)
        is called: any other name (a tool the filters or the lock hide, one
        the access rules do not allow, one that does not exist) is answered
        exactly as one that does not exist, and only the audit log and the
        metrics tell a denied tool (the access rules') from the rest.
        """
        principal = caller.principal
        try:
            backend, raw = self._resolve(only, name, principal)
        except MCPError:
            self._audited(caller, None, name, "unknown", 0.0)
            raise
        holder = backend.holder(session, principal)
        if raw in self.callable_tools(backend, holder, principal):
            return backend, raw
        # Offered by its connection, so left out by the access rules alone.
        exists = backend.knows(raw, holder)
        if exists:
            self.metrics.denied(backend.name, raw, self._labelled(principal))
        self._audited(caller, backend.name, raw, "denied" if exists else "unknown", 0.0)
        raise self._unknown(only, name, principal)

    def _labelled(self, principal: str) -> str | None:
        return principal if self.metrics_principal else None

    def _audited(self, caller: Caller | None, server: str | None, tool: str, outcome: str, seconds: float) -> None:
        if self.audit is not None and caller is not None:
            self.audit.write(
                principal=caller.principal,
                endpoint=caller.endpoint,
                server=server,
                tool=tool,
                outcome=outcome,
                seconds=seconds,
                trace=caller.trace,
            )

    async def _call(
        self,
        backend: Upstream,
        raw: str,
        arguments: dict[str, Any],
        holder: Holder | None,
        caller: Caller | None = None,
        relay: ClientRelay | None = None,
    ) -> dict[str, Any]:
        """Call ``raw`` on ``backend`` for ``holder``; counted, and audited for ``caller``;
        ``relay`` hears its progress."""
        self.in_flight += 1
        self._idle_now.clear()
        started = time.perf_counter()
        # Counted as an error unless it ends otherwise: an exception nobody
        # foresaw is not an ok call.
        outcome, kind = "error", None
        # A lone surrogate (JSON can spell one, UTF-8 cannot carry it) in the
        # arguments is repaired by the connection, which encodes them. None
        # reaches here in the name: the SDK refuses a 2025 request holding one,
        # and a 2026-07-28 request's name must match its Mcp-Name header.
        # Only a tool the server lists names a series: any other name (a
        # client may send anything) is one series, whatever it is.
        tool = raw if backend.knows(raw, holder) else UNKNOWN_TOOL
        who = DEFAULT_PRINCIPAL if caller is None else caller.principal
        try:
            # No timer here: the call carries its timeout to its worker, which
            # ends it at the deadline and words the answer (a timeout is the
            # MCPError of kind "timeout" below).
            result = await backend.call(holder, raw, arguments, who, relay)
            outcome = "tool_error" if result.is_error else "ok"
            if result.usage is not None:
                self.metrics.usage(backend.name, tool, result.usage)
            for denial in (result.meta or {}).get(DENIED_META, ()):
                self.metrics.sandbox_denied(backend.name, tool, denial["kind"], denial["count"])
            return result_json(result)
        except asyncio.CancelledError:
            # The client went away (or the gateway stops): not an ok call.
            outcome = "cancelled"
            raise
        except UpstreamRefused as exc:
            outcome = "refused"
            if exc.share is not None:
                self._share_refused("" if caller is None else caller.endpoint, exc.share, who)
            raise MCPError(UNAVAILABLE, f"{exc} (hint: {exc.hint})") from None
        except LoviaMCPError as exc:
            kind = getattr(exc, "kind", None) or "error"
            outcome = "timeout" if kind == "timeout" else "error"
            logger.warning(
                "call timed out" if kind == "timeout" else "call failed",
                extra={
                    "server": backend.name,
                    "tool": tool,
                    "kind": kind,
                    "error": str(exc.args[0] if exc.args else exc),
                },
            )
            # The message, not the hint: a hint may quote the server's stderr,
            # which is the operator's to read (in the logs), not the client's.
            return _error_result(kind, str(exc.args[0] if exc.args else exc))
        finally:
            elapsed = time.perf_counter() - started
            principal = None if caller is None else self._labelled(caller.principal)
            self.metrics.call(backend.name, tool, outcome, elapsed, kind, principal)
            self._audited(caller, backend.name, raw, kind or outcome, elapsed)
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle_now.set()

    # -- HTTP ----------------------------------------------------------------- #
    async def _authenticate(self, scope: Scope) -> Refusal | None:
        """Why the request may not pass, or ``None``: its principal and its user (what its sessions are bound
        to) are then in ``scope``.

        The SDK's session manager binds a session to the user that opened it
        and answers any other as if the session did not exist: one client
        cannot use (or end) a session another credential opened.
        """
        identity = await self.auth.authenticate(scope.get("headers", ()))
        if isinstance(identity, Refusal):
            return identity
        if identity.user is not None:
            scope["user"] = identity.user
        scope[SCOPE_KEY] = identity.principal
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path == "/healthz":
            await _plain(send, 200, "ok\n")
            return
        if path == "/readyz":
            if self.ready and not self.draining:
                await _plain(send, 200, "ready\n")
            else:
                await _plain(send, 503, "draining\n" if self.draining else "opening servers\n")
            return
        document = self.auth.document(path)
        if document is not None:
            await _json(send, 200, document)
            return
        denied = await self._authenticate(scope)
        if denied is not None:
            # Every refusal is a JSON-RPC error a client raises with its hint;
            # 401 and 403 carry the scheme's challenge (RFC 6750, MCP authorization).
            challenge = [(b"www-authenticate", self.auth.challenge(denied).encode())] if denied.status < 500 else []
            await _rpc_error(send, denied.status, AUTH_REFUSED, denied.message, denied.hint, challenge)
            return
        principal = principal_of(scope)
        _PRINCIPAL.set(principal)
        if path == "/metrics" and self.access.metrics(principal):
            await _plain(send, 200, await self._metrics_text(), CONTENT_TYPE)
            return
        path = path.rstrip("/") or path
        manager = self.managers.get(path)
        only = self.paths.get(path)
        if manager is None or (only is not None and not self.access.sees(principal, only)):
            # A server the principal may not see has no endpoint for it.
            await _rpc_error(
                send,
                404,
                INVALID_REQUEST,
                f"no endpoint {path}",
                "Use /mcp (every server) or /servers/<name>/mcp; servers: "
                + ", ".join(s for s in sorted(self.upstreams) if self.access.sees(principal, s)),
            )
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers", ()):
            if key in ONCE and key in headers:
                await _rpc_error(
                    send,
                    400,
                    INVALID_REQUEST,
                    f"the request has two {key.decode().title()} headers",
                    "Send each of Mcp-Session-Id and Mcp-Protocol-Version at most once.",
                )
                return
            headers.setdefault(key, value)  # the first of each, as the SDK reads them
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            # The SDK would answer the same status in plain text; its cap still
            # stops a chunked body that grows past it.
            await _rpc_error(
                send,
                413,
                INVALID_REQUEST,
                f"the request body is {int(declared)} bytes, over this gateway's cap of {self.max_body_bytes}",
                "Send smaller arguments (a file's path or URL, not its content); the operator sets the cap "
                "with --max-body-bytes.",
            )
            return
        session = headers[SESSION_HEADER].decode("latin-1") if SESSION_HEADER in headers else None
        version = headers[VERSION_HEADER].decode("latin-1") if VERSION_HEADER in headers else None
        if session is not None and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # The SDK serves such a request as self-contained (2026-07-28 has no
            # sessions) without looking at the id: refused rather than served
            # sessionless, so a client that believes it is in a session learns
            # at once that it is not, and no id the SDK did not check goes further.
            await _rpc_error(
                send,
                400,
                INVALID_REQUEST,
                f"Mcp-Session-Id names a 2025 session, and a {version} request belongs to no session",
                "Drop the Mcp-Session-Id header (a 2026-07-28 request is self-contained), or send "
                "the session's own Mcp-Protocol-Version (the one its initialize agreed) to use it.",
            )
            return
        if not self.ready:
            refused = await self._opened(path, principal)
            if refused is not None:
                await _rpc_error(send, 503, UNAVAILABLE, str(refused), refused.hint)
                return
        stateless = version in MODERN_PROTOCOL_VERSIONS
        # Draining refuses what would open a session (it would die with this
        # replica); a session's calls and stateless requests are still served
        # until HTTP stops, so a load balancer slow to notice /readyz loses nothing.
        # A listen stream opened now would be cut with this replica: refused
        # while draining like a new session.
        if session is None and self.draining and (not stateless or headers.get(METHOD_HEADER) == LISTEN):
            await _rpc_error(
                send,
                503,
                UNAVAILABLE,
                "the gateway is shutting down; retry shortly",
                "Retry: a load balancer sends the new session to another replica.",
                [(b"retry-after", b"1")],
            )
            return
        if stateless and headers.get(METHOD_HEADER) in FAST_METHODS and accepts_both(headers.get(b"accept", b"")):
            fast, streamed = self.fast[path], self.managers[path]
            await serve_fast(
                fast.handle_request,
                scope,
                receive,
                send,
                streamed=streamed.handle_request,
                cap=fast.max_request_body_size,
            )
            return
        if session is None:
            if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
                if scope["method"] == "POST" and self._past_share(principal, path):
                    self._share_refused(path, "sessions", principal)
                    await _rpc_error(
                        send,
                        503,
                        UNAVAILABLE,
                        f"principal {principal!r} already holds {self.session_share} sessions on {path}, its share "
                        f"of the endpoint's {self.max_sessions} (--max-http-sessions, split among the token file's "
                        "principals)",
                        "End a session you no longer use (HTTP DELETE) or wait for idle ones to expire; the "
                        "operator can raise --max-http-sessions.",
                    )
                    return
                await self._opening(manager, scope, receive, send, principal, path)
            else:
                await manager.handle_request(scope, receive, send)
            return
        # Every request of a session is seen (its GET stream for as long as it
        # is open): the table forgets a session as the SDK expires it.
        self.sessions.began(session)
        ended = False
        try:
            if scope["method"] == "DELETE":
                # Only a DELETE the SDK accepted ends the session: another
                # token's gets the 404 of an unknown session and ends nothing.
                ended = 200 <= await _answered(manager.handle_request, scope, receive, send) < 300
            else:
                await manager.handle_request(scope, receive, send)
        finally:
            self.sessions.ended(session)
        if ended and self.sessions.owned(session, _owner(scope)) is not None:
            self.sessions.forget(session)
            for backend in self.upstreams.values():
                await backend.end_session(session)

    def _share_refused(self, endpoint: str, cap: str, principal: str) -> None:
        """A request refused for its principal's share of ``cap``: logged for the operator, and counted."""
        logger.warning(
            "a principal held its share of a cap",
            extra={"principal": principal, "endpoint": endpoint, "cap": cap},
        )
        self.metrics.share_refused(endpoint, cap, self._labelled(principal))

    def _past_share(self, principal: str, path: str) -> bool:
        """Whether ``principal`` holds its share of ``path``'s sessions (those the SDK has yet to answer included).

        With one principal its share is the whole cap, which the SDK checks itself.
        """
        if self.session_share >= self.max_sessions:
            return False
        return self.sessions.held(principal, path) + self._pending[principal, path] >= self.session_share

    async def _opening(
        self,
        manager: StreamableHTTPSessionManager,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: str,
        path: str,
    ) -> None:
        """A request that may open a 2025 session on ``path``: the id the SDK answers is recorded for the token
        (and ``principal``) that sent it."""
        owner = _owner(scope)
        key = (principal, path)
        pending = True
        self._pending[key] += 1

        def settle() -> None:
            nonlocal pending
            if pending:
                pending = False
                self._pending[key] -= 1

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    for name, value in message.get("headers", ()):
                        if name.lower() == SESSION_HEADER:
                            self.sessions.opened(value.decode("latin-1"), owner, principal, path)
                settle()  # recorded, or no session: no longer pending either way
            await send(message)

        try:
            await manager.handle_request(scope, receive, watch)
        finally:
            settle()

    async def _opened(self, path: str, principal: str) -> UpstreamRefused | None:
        """Wait until the servers ``path`` serves to ``principal`` are open; why not, if one failed (or the wait
        ran out). A server the principal may not see is not waited for, nor named."""
        only = self.paths[path]
        self.waiting += 1
        try:
            await wait_open(
                [b for name, b in self.upstreams.items() if only in (None, name) and self.access.sees(principal, name)]
            )
            return None
        except UpstreamRefused as exc:
            return exc
        finally:
            self.waiting -= 1

    async def _metrics_text(self) -> str:
        gauges: list[tuple[str, str, str, Labels, float]] = [
            ("lovia_mcp_calls_in_flight", "gauge", "Tool calls in flight.", (), float(self.in_flight)),
            (
                "lovia_mcp_requests_waiting",
                "gauge",
                "Requests waiting for their servers to open.",
                (),
                float(self.waiting),
            ),
        ]
        if self.limits is not None:
            gauges.append(
                ("lovia_mcp_http_connections", "gauge", "Open HTTP connections.", (), float(self.limits.connections))
            )
            gauges += [
                (
                    "lovia_mcp_http_connections_closed_total",
                    "counter",
                    "HTTP connections closed by a bound, by reason.",
                    (("reason", reason),),
                    float(n),
                )
                for reason, n in sorted({**dict.fromkeys(CLOSE_REASONS, 0), **self.limits.closed}.items())
            ]
        stats = await asyncio.gather(*(b.stats() for b in self.upstreams.values()))
        for backend, got in zip(self.upstreams.values(), stats):
            labels: Labels = (("server", backend.name),)
            gauges += [
                (
                    "lovia_mcp_up",
                    "gauge",
                    "1 when every connection of the server answered its stats.",
                    labels,
                    1.0 if len(got) >= len(backend.connections()) else 0.0,
                ),
                (
                    "lovia_mcp_restarts_total",
                    "counter",
                    "Server restarts and worker replacements.",
                    labels,
                    float(backend.closed_restarts + sum(s.restarts for s in got)),
                ),
                (
                    "lovia_mcp_circuit_open",
                    "gauge",
                    "Connections of the server failing fast after too many restarts (the restart circuit).",
                    labels,
                    float(sum(1 for c in backend.connections() if c.core.circuit.tripped())),
                ),
                (
                    "lovia_mcp_server_memory_bytes",
                    "gauge",
                    "Resident memory of the server trees.",
                    labels,
                    float(sum(s.rss_bytes for s in got)),
                ),
                (
                    "lovia_mcp_server_processes",
                    "gauge",
                    "Live processes in the server trees.",
                    labels,
                    float(sum(s.processes for s in got)),
                ),
                (
                    "lovia_mcp_sessions",
                    "gauge",
                    "Client sessions holding a server of their own.",
                    labels,
                    float(backend.sessions()),
                ),
            ]
        if self.audit is not None:
            gauges.append(
                (
                    "lovia_mcp_audit_write_failures_total",
                    "counter",
                    "Audit log lines that could not be written.",
                    (),
                    float(self.audit.failures),
                )
            )
        return self.metrics.render(gauges)


async def _answered(app: Any, scope: Scope, receive: Receive, send: Send) -> int:
    """Run the ASGI ``app``; the HTTP status it answered with (0 if none)."""
    status = 0

    async def watch(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    await app(scope, receive, watch)
    return status


async def _plain(send: Send, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _rpc_error(
    send: Send, status: int, code: int, message: str, hint: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A JSON-RPC error (no request id) with an HTTP status, its hint in ``data``: every refusal the gateway
    makes itself. The MCP SDK's client reads such a body at any status and raises it (message and data)."""
    await _json(
        send,
        status,
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message, "data": {"hint": hint}}},
        headers,
    )


async def _json(send: Send, status: int, value: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(value).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["ERROR_META", "ONCE", "UNAVAILABLE", "Gateway", "result_json"]
