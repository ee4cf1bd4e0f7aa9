"""The gateway's ASGI app: MCP endpoints through the SDK's server side, plus health, readiness and metrics.

The app composes the gateway's parts and keeps the MCP request handlers
(listing, calling, the SDK's input-schema lookup). Per request, in order:
the scheme :mod:`.auth` picked says who it is; :mod:`.routes` says what the
path is (``/healthz``, ``/readyz``, ``/metrics``, ``/mcp``,
``/servers/<name>/mcp``) and checks an MCP request's headers;
:mod:`.admission` says whether it may enter now (opening waits, draining,
each principal's share); :mod:`.routes` hands it to the endpoint's session
manager. The servers are :mod:`.upstreams`; what they say besides tools
goes through :mod:`.relay`; :mod:`.metrics` counts.

Each MCP endpoint is a low-level ``mcp.server.lowlevel.Server`` behind its own
``StreamableHTTPSessionManager`` (public SDK API). The manager speaks both
eras: a 2025 client's initialize handshake opens a stateful session
(``Mcp-Session-Id``); a 2026-07-28 request is self-contained and needs no
session, so shared servers need no affinity between replicas. A second
manager on the same Server, in JSON mode, serves a 2026-07-28 ``tools/call``
or ``tools/list`` and holds the 2025 sessions of clients that declare no
capability a server may ask of mid-call, both through :mod:`.fastpath`
(cheaper; the same answers); :mod:`.routes` says which goes where.

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
an endpoint's sessions (:func:`.principals.share`, :mod:`.admission`), and a new session past
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
endpoint serves to its principal are open (:mod:`.admission`), then is
served; only one of those that failed to open (or the gateway stopping)
makes it an error.

Failure semantics: a call that fails on the server's side (a crash, a
limit, a timeout, an open circuit) is that call's ``isError`` result,
with ``_meta["lovia-mcp/error"]`` naming the kind; an unknown tool or a
refused session slot is a JSON-RPC error; a new session while draining
is an HTTP 503. The
server's own ``isError`` results and annotations pass through unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from contextvars import ContextVar
from typing import Any, Final

import mcp_types as types
from lovia.exceptions import MCPError as LoviaMCPError
from lovia_mcp_worker.wire.mcpjson import block_json
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Receive, Scope, Send

from .._names import PREFIX_SEP
from ..config.annotations import MCPTool, as_json
from ..render import DENIED_META, MCPToolResult, denial_lines
from ._http import UNAVAILABLE, RpcRefusal, json_answer, plain
from .access import Access
from .admission import Admission
from .audit import AuditLog, Caller, trace_id
from .auth.anonymous import Anonymous
from .auth.authenticator import AUTH_REFUSED, Authenticator, Refusal
from .connections import CLOSE_REASONS, ConnectionLimits
from .metrics import CONTENT_TYPE, UNKNOWN_TOOL, Labels, Metrics
from .notify import Notifier
from .principals import DEFAULT_PRINCIPAL, SCOPE_KEY, principal_of
from .relay import ClientRelay, Proxy, relayed
from .routes import HEALTH, METRICS, READY, SESSION_HEADER, Routes, endpoints, first, owner, session_managers
from .sessions import Sessions
from .upstreams import Holder, Upstream, UpstreamRefused

logger = logging.getLogger("lovia_mcp.gateway")


ERROR_META: Final = "lovia-mcp/error"
TRACEPARENT_HEADER: Final = b"traceparent"
# The request's principal where no handler argument carries it (the SDK's
# input-schema lookup): set per request in Gateway.__call__, inherited by
# the tasks the request's handling starts.
_PRINCIPAL: ContextVar[str | None] = ContextVar("lovia_mcp_gateway_principal", default=None)


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
        upstreams: list[Upstream],
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
        self.upstreams = {u.name: u for u in upstreams}
        self.auth: Authenticator = auth if auth is not None else Anonymous()
        self.access = access if access is not None else Access(None)
        self.audit = audit
        self.metrics_principal = metrics_principal
        self.metrics = Metrics()
        # The HTTP connections' bounds (serve's), for the metrics.
        self.limits = limits
        self.sessions = Sessions(session_idle)
        # Each principal's share of the caps (the whole cap with one
        # principal). A scheme that cannot list its principals (OAuth
        # subjects) splits them among those the access section names.
        known = self.auth.principals
        named = len(known) if known is not None else len(self.access.principals())
        self.admission = Admission(
            self.upstreams,
            access=self.access,
            sessions=self.sessions,
            metrics=self.metrics,
            max_sessions=max_sessions,
            principals=named,
            labelled=self._labelled,
        )
        paths = endpoints(list(self.upstreams))
        # Listen streams are long-lived HTTP responses: as many per endpoint
        # as sessions, each principal its share.
        self.notifier = Notifier(
            paths,
            max_streams=max_sessions,
            share=self.admission.session_share,
            sessions=self.sessions,
            access=self.access,
            on_share_refused=lambda path, principal: self.admission.share_refused(path, "listen_streams", principal),
        )
        for upstream in upstreams:
            upstream.principals = named
            upstream.on_tools_changed = lambda u, holder: self.notifier.changed(u.name, holder)
        # What servers say besides tools, relayed to the clients it belongs to (.relay).
        self.proxy = Proxy(self.upstreams, access=self.access, sessions=self.sessions, session_of=self._session_of)
        servers = {path: self._mcp_server(path, only) for path, only in paths.items()}
        self.routes = Routes(
            self.upstreams,
            session_managers(
                servers,
                loopback=loopback,
                max_body_bytes=max_body_bytes,
                max_sessions=max_sessions,
                session_idle=session_idle,
            ),
            access=self.access,
            sessions=self.sessions,
            max_body_bytes=max_body_bytes,
            opening=self.admission.opening,
        )

    # -- lifecycle ------------------------------------------------------------ #
    async def enter(self, stack: AsyncExitStack) -> None:
        """Start every endpoint's session managers; ``stack`` stops them."""
        await self.routes.enter(stack)

    async def drain(self, timeout: float) -> bool:
        """Refuse new sessions and listen streams (closing those open); wait up to ``timeout`` for the calls in
        flight. True if they all ended."""
        self.notifier.close()
        return await self.admission.drain(timeout)

    # -- MCP ------------------------------------------------------------------ #
    def _session_of(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The session ``ctx``'s request belongs to: an id the SDK opened for the token that sent it, else ``None``."""
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None  # 2026-07-28 has no sessions, whatever header came with the request
        scope = getattr(ctx.request, "scope", None)
        if not isinstance(scope, dict):
            return None
        raw = first(scope, SESSION_HEADER)
        session = None if raw is None else raw.decode("latin-1")
        return session if self.sessions.owned(session, owner(scope)) is not None else None

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
            header = first(scope, TRACEPARENT_HEADER) if isinstance(scope, dict) else None
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
        self.admission.call_began()
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
                self.admission.share_refused("" if caller is None else caller.endpoint, exc.share, who)
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
            self.admission.call_ended()

    # -- HTTP ----------------------------------------------------------------- #
    async def _authenticate(self, scope: Scope) -> RpcRefusal | None:
        """Why the request may not pass, or ``None``: its principal and its user (what its sessions are bound
        to) are then in ``scope``.

        The SDK's session manager binds a session to the user that opened it
        and answers any other as if the session did not exist: one client
        cannot use (or end) a session another credential opened.
        """
        identity = await self.auth.authenticate(scope.get("headers", ()))
        if isinstance(identity, Refusal):
            # 401 and 403 carry the scheme's challenge (RFC 6750, MCP authorization).
            challenge = (
                ((b"www-authenticate", self.auth.challenge(identity).encode()),) if identity.status < 500 else ()
            )
            return RpcRefusal(identity.status, AUTH_REFUSED, identity.message, identity.hint, challenge)
        if identity.user is not None:
            scope["user"] = identity.user
        scope[SCOPE_KEY] = identity.principal
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path == HEALTH:
            await plain(send, 200, "ok\n")
            return
        if path == READY:
            await plain(send, *self.admission.readiness())
            return
        document = self.auth.document(path)
        if document is not None:
            await json_answer(send, 200, document)
            return
        refused = await self._authenticate(scope)
        if refused is not None:
            await refused.send(send)
            return
        principal = principal_of(scope)
        _PRINCIPAL.set(principal)
        if path == METRICS and self.access.metrics(principal):
            await plain(send, 200, await self._metrics_text(), CONTENT_TYPE)
            return
        request = self.routes.request(scope, principal)
        if isinstance(request, RpcRefusal):
            await request.send(send)
            return
        refused = await self.admission.admit(request)
        if refused is not None:
            await refused.send(send)
            return
        await self.routes.dispatch(request, scope, receive, send)

    async def _metrics_text(self) -> str:
        gauges: list[tuple[str, str, str, Labels, float]] = [
            ("lovia_mcp_calls_in_flight", "gauge", "Tool calls in flight.", (), float(self.admission.in_flight)),
            (
                "lovia_mcp_requests_waiting",
                "gauge",
                "Requests waiting for their servers to open.",
                (),
                float(self.admission.waiting),
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


__all__ = ["ERROR_META", "Gateway", "result_json"]
