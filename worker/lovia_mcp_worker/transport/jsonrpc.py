"""The worker's own JSON-RPC 2.0 client for MCP over stdio.

One client per server generation, fed whole lines by the stdio transport
and writing whole lines back through it. It does what an MCP client needs of
a tool server and nothing more:

- the protocol era (:mod:`.era`): ``server/discover`` pipelined with
  ``initialize`` / ``notifications/initialized``, as the SDK's ``mode="auto"``
  negotiates, or the handshake only, or a pinned version; in the 2026-07-28
  era every request carries the ``_meta`` envelope, and tool-list changes
  come on a ``subscriptions/listen`` stream (:meth:`Client.listen`);
- paginated ``tools/list`` (the protocol's one pagination loop,
  :func:`~lovia_mcp_worker.wire.messages.list_tools`), ``tools/call``;
- ``notifications/cancelled`` when a caller abandons a request;
- a ``progressToken`` on each ``tools/call`` whose caller wants progress,
  and ``notifications/progress`` for it handed to that caller;
- ``notifications/tools/list_changed`` from the server, passed on to
  ``on_tools_changed`` (the host re-lists);
- the server's own requests: ``ping`` is answered; with ``on_request`` (the
  relay) sampling, elicitation and roots go to it and its answer back to the
  server; everything else gets ``-32601``, so a server waiting on one moves
  on instead of hanging;
- the relay (a gateway's connection, ``on_notification`` given): any other
  notification is handed on with its params as raw bytes, and
  :meth:`Client.relay` sends any request the same way, raw JSON in and out
  (the modern era's envelope merged into its ``_meta``).

Request ids are integers, as the SDK numbers them (some servers accept
nothing else). Replies are matched by their *top-level* id whatever the key
order; a line that cannot be decoded still answers its request through
:func:`~lovia_mcp_worker.transport._jsonscan.top_level_id`. Results are decoded
by the protocol's MCP-JSON codec, leniently: no model validation, so one
loose schema or an extra field never fails a call.

Non-goals: a codec of resources, prompts or sampling (the relay carries
them raw); batches (MCP dropped them). HTTP servers use the SDK instead (:mod:`~lovia_mcp_worker.transport.http`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

import msgspec

from ..wire import failures
from ..wire.failures import HostError, RemoteError
from ..wire.mcpjson import (
    CallOutcome,
    ContentBlock,
    MCPJSONError,
    ToolSpec,
    call_result,
    json_object,
    list_tools,
    parse_progress,
)
from ..wire.messages import MCP_HANDSHAKE_VERSIONS, MCP_MODERN_VERSIONS
from . import era
from ._jsonscan import MISSING, repair_surrogates, top_level_id
from .era import CLIENT_INFO
from .protocol import OnProgress, OnRequest

# The handshake's versions, newest first: the first is offered, any is
# accepted back (the modern era's are negotiated by :mod:`.era`).
PROTOCOL_VERSIONS: Final = MCP_HANDSHAKE_VERSIONS
METHOD_NOT_FOUND: Final = -32601
# The server's requests the relay hands on (a client that declares their capabilities answers them).
RELAYED_REQUESTS: Final = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})
# What the worker declares with the relay: the gateway answers for its clients, or refuses with the reason.
RELAYED_CAPABILITIES: Final[dict[str, dict[str, Any]]] = {"sampling": {}, "elicitation": {"form": {}}, "roots": {}}
INVALID_PARAMS: Final = -32602
# Requests only a client sends: a "server" sending one back is echoing
# our own stdin (``cat``), not speaking MCP.
CLIENT_METHODS: Final = frozenset({"initialize", "server/discover", "tools/list", "tools/call", "subscriptions/listen"})

# MCP logging levels to Python's, for notifications/message.
_LOG_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}

T = TypeVar("T")

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
# The agent's W3C trace context for one request's ``_meta`` (None: untraced).
Trace = dict[str, str] | None


class _Message(msgspec.Struct):
    """Any JSON-RPC message; the payload stays raw until it is used."""

    id: int | float | str | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


class _Error(msgspec.Struct):
    code: object = None
    message: object = None
    data: object = None


_message = msgspec.json.Decoder(_Message)
_error = msgspec.json.Decoder(_Error)
# Decode failures of a line: syntax, shape, nesting beyond the decoder's stack.
_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


def _key(rid: object) -> int | None:
    """A reply id as the int we sent, if it can be one (5, 5.0, "5")."""
    if type(rid) is int:  # as sent: the common case
        return rid
    if isinstance(rid, bool):
        return None
    if isinstance(rid, int):
        return rid
    if isinstance(rid, float) and rid.is_integer():
        return int(rid)
    if isinstance(rid, str) and rid.isdigit():
        return int(rid)
    return None


class Client:
    """JSON-RPC over one server's stdin/stdout lines.

    ``write`` sends one line (newline included); ``on_garbage`` is told of
    each line that is not JSON-RPC; ``log`` takes ``(level, message)`` for the
    connection's log and ``server_log`` the server's own log notifications;
    ``on_echo(method, line)`` is told of a request only a client sends (our
    own, echoed back), which is never answered.

    ``on_tools_changed`` is called, in line order, for each
    ``notifications/tools/list_changed``; ``on_notification(method, params)``
    for every other notification but progress (``notifications/message``
    goes to ``server_log`` too), its params raw.
    """

    def __init__(
        self,
        write: Callable[[bytes], None],
        *,
        on_garbage: Callable[[bytes], None],
        log: Callable[[int, str], None],
        server_log: Callable[[int, str], None],
        on_echo: Callable[[str, bytes], None] | None = None,
        on_tools_changed: Callable[[], None] | None = None,
        on_notification: Callable[[str, bytes | None], None] | None = None,
        on_request: OnRequest | None = None,
    ) -> None:
        self._write = write
        self._on_request = on_request
        # The server's requests being answered by the relay (held: the loop keeps weak references).
        self._answering: set[asyncio.Task[None]] = set()
        self._on_echo = on_echo
        self._on_tools_changed = on_tools_changed
        self._on_notification = on_notification
        self._on_garbage = on_garbage
        self._log = log
        self._server_log = server_log
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._progress: dict[int, OnProgress] = {}
        self._pending: dict[int, tuple[asyncio.Future[msgspec.Raw], str]] = {}
        self._closed: HostError | None = None
        self.protocol_version: str | None = None
        # The modern era's per-request _meta entries (None: the handshake era),
        # the server's discover result, and how long the last listing may be
        # reused (seconds; None: no limit, as in the handshake era).
        self._envelope: dict[str, Any] | None = None
        self.discovered: dict[str, Any] | None = None
        self.listing_ttl: float | None = None
        self.listed_at = 0.0  # when the last listing was asked for (monotonic)
        # The server's capabilities object, from its handshake or discover answer.
        self.capabilities: object = None

    # -- incoming ------------------------------------------------------------ #
    def feed(self, line: bytes | bytearray | memoryview) -> None:
        """Handle one line from the server's stdout."""
        data = bytes(line)
        try:
            msg = _message.decode(data)
        except _UNDECODABLE as exc:
            repaired = repair_surrogates(data)
            if repaired != data:
                self.feed(repaired)
                return
            self._undecodable(data, exc)
            return
        if msg.method is not None:
            if msg.id is None:
                self._notification(msg)
            elif msg.method in CLIENT_METHODS and self._on_echo is not None:
                self._on_echo(msg.method, data)  # answering it would be echoed too
            else:
                self._server_request(msg)
            return
        key = _key(msg.id)
        pending = self._pending.pop(key, None) if key is not None else None
        if pending is None:
            if msg.id is None and not msg.result and not msg.error:
                self._on_garbage(data)  # an object, but no JSON-RPC message
            else:
                self._log(logging.DEBUG, f"ignored a reply to no pending request (id {msg.id!r})")
            return
        fut, what = pending
        if fut.done():
            return
        if msg.error:
            try:
                err = _error.decode(msg.error)
            except _UNDECODABLE:
                err = _Error(message=bytes(msg.error)[:200].decode("utf-8", "replace"))
            fut.set_exception(RemoteError(err.code, err.message, err.data))
        elif msg.result:
            fut.set_result(msg.result)
        else:
            fut.set_exception(failures.bad_reply(what, "had neither a result nor an error"))

    def _undecodable(self, data: bytes, exc: BaseException) -> None:
        rid = top_level_id(data)
        key = _key(rid) if rid is not MISSING else None
        pending = self._pending.pop(key, None) if key is not None else None
        if pending is None:
            self._on_garbage(data)
            return
        fut, what = pending
        why = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        if not fut.done():
            fut.set_exception(failures.bad_reply(what, f"could not be decoded ({why})"))

    def fail(self, rid: object, error: HostError) -> bool:
        """Fail the pending request ``rid`` (an over-long reply); False if none matches."""
        key = _key(rid)
        pending = self._pending.pop(key, None) if key is not None else None
        if pending is None:
            return False
        if not pending[0].done():
            pending[0].set_exception(error)
        return True

    def _notification(self, msg: _Message) -> None:
        if msg.method == "notifications/progress":
            try:
                found = parse_progress(_decode(msg.params) if msg.params else None)
            except _UNDECODABLE:
                return
            if found is not None:
                token, progress, total, message = found
                key = _key(token)
                callback = self._progress.get(key) if key is not None else None
                if callback is not None:
                    callback(progress, total, message)
            return
        if msg.method == "notifications/tools/list_changed":
            if self._on_tools_changed is not None:
                self._on_tools_changed()
            return
        if msg.method == "notifications/message":
            self._logged(msg.params)
        if self._on_notification is not None and msg.method is not None:
            self._on_notification(msg.method, bytes(msg.params) if msg.params else None)

    def _logged(self, raw: msgspec.Raw) -> None:
        """A ``notifications/message`` into the server's log."""
        try:
            params = _decode(raw) if raw else {}
        except _UNDECODABLE:
            return
        if isinstance(params, dict):
            level = _LOG_LEVELS.get(str(params.get("level")), logging.INFO)
            data = params.get("data")
            text = data if isinstance(data, str) else _encode(data).decode("utf-8", "replace")
            self._server_log(level, text[:2000])

    def _server_request(self, msg: _Message) -> None:
        rid = _encode(msg.id)
        if msg.method == "ping":
            self._write(b'{"jsonrpc":"2.0","id":' + rid + b',"result":{}}\n')
            return
        if self._on_request is not None and msg.method in RELAYED_REQUESTS:
            params = bytes(msg.params) if msg.params else None
            task = asyncio.get_running_loop().create_task(self._answer(rid, msg.method, params))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
            return
        self._log(logging.INFO, f"refused the server's {msg.method!r} request (not supported by lovia-mcp)")
        error = _encode(
            {"code": METHOD_NOT_FOUND, "message": f"Method not found: {msg.method} is not supported by this client"}
        )
        self._write(b'{"jsonrpc":"2.0","id":' + rid + b',"error":' + error + b"}\n")

    async def _answer(self, rid: bytes, method: str, params: bytes | None) -> None:
        """The relay's answer to the server's request ``rid``, written back to it."""
        result, error = await self._on_request(method, params) if self._on_request is not None else (None, None)
        if self._closed is not None:
            return
        if result is not None:
            self._write(b'{"jsonrpc":"2.0","id":' + rid + b',"result":' + result + b"}\n")
        else:
            error = error or _encode({"code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"})
            self._write(b'{"jsonrpc":"2.0","id":' + rid + b',"error":' + error + b"}\n")

    # -- outgoing ------------------------------------------------------------ #
    def close(self, error: HostError) -> None:
        """Fail every pending request with ``error``; later requests fail at once."""
        for task in list(self._answering):
            task.cancel()
        if self._closed is None:
            self._closed = error
        pending, self._pending = self._pending, {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(error)

    def notify(self, method: str, params: bytes | None = None) -> None:
        body = b"" if params is None else b',"params":' + params
        self._write(b'{"jsonrpc":"2.0","method":' + _encode(method) + body + b"}\n")

    async def request(self, method: str, params: bytes | None, *, what: str, cancellable: bool = True) -> msgspec.Raw:
        """Send a request and wait for its raw result; errors raise ``RemoteError`` or ``HostError``."""
        rid, fut = self._send(method, params, what)
        try:
            return await fut
        except asyncio.CancelledError:
            self._abandoned(rid, cancellable)
            raise

    def _send(self, method: str, params: bytes | None, what: str) -> tuple[int, asyncio.Future[msgspec.Raw]]:
        """Write a request; its id and the future its reply resolves."""
        if self._closed is not None:
            raise self._closed
        rid = next(self._ids)
        fut: asyncio.Future[msgspec.Raw] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (fut, what)
        body = b"" if params is None else b',"params":' + params
        self._write(b'{"jsonrpc":"2.0","id":%d,"method":%s%s}\n' % (rid, _encode(method), body))
        return rid, fut

    def _abandoned(self, rid: int, cancellable: bool) -> None:
        """The caller of request ``rid`` was cancelled: the server is told (where the method allows it)."""
        if self._pending.pop(rid, None) is not None and cancellable and self._closed is None:
            self.notify(
                "notifications/cancelled",
                b'{"requestId":%d,"reason":"cancelled by the client"}' % rid,
            )

    async def _decoded(
        self,
        method: str,
        params: bytes | None,
        read: Callable[[msgspec.Raw], T],
        *,
        what: str,
        cancellable: bool = True,
    ) -> T:
        """The result of a request, read by the MCP-JSON codec; a reply it cannot read is a protocol failure."""
        raw = await self.request(method, params, what=what, cancellable=cancellable)
        try:
            return read(raw)
        except MCPJSONError as exc:
            raise failures.bad_reply(what, str(exc)) from None

    # -- MCP ----------------------------------------------------------------- #
    def _meta(self, *parts: dict[str, Any] | None) -> dict[str, Any] | None:
        """A request's ``_meta``: the era's envelope and ``parts`` (None if empty)."""
        if self._envelope is None and not any(parts):
            return None  # the handshake era, untraced: the common case
        meta: dict[str, Any] = dict(self._envelope or {})
        for part in parts:
            if part:
                meta.update(part)
        return meta or None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    @property
    def modern(self) -> bool:
        return self._envelope is not None

    async def negotiate(self, mode: str = "auto", trace: Trace = None) -> None:
        """Settle the protocol era and version (:mod:`.era`); raises RemoteError or HostError."""
        if mode == "legacy" or mode in MCP_HANDSHAKE_VERSIONS:
            pinned = None if mode == "legacy" else mode
            result = await self.handshake(pinned, trace)
            if pinned is not None and result.get("protocolVersion") != pinned:
                raise HostError(
                    "open",
                    f"the server answered protocol={pinned!r} with version {result.get('protocolVersion')!r}",
                    hint="Pin the version the server speaks, or use protocol='auto'.",
                )
            self.adopt_handshake(result)
        elif mode in MCP_MODERN_VERSIONS:
            self.adopt_modern(mode, None)  # pinned: no probe, as the SDK's pin
        else:
            await era.negotiate_auto(self, trace)

    async def initialize(self, trace: Trace = None) -> dict[str, Any]:
        """The handshake era's ``initialize`` and ``notifications/initialized``."""
        result = await self.handshake(None, trace)
        self.adopt_handshake(result)
        return result

    def handshake(self, version: str | None, trace: Trace) -> Coroutine[Any, Any, dict[str, Any]]:
        capabilities = RELAYED_CAPABILITIES if self._on_request is not None else {}
        params = {
            "protocolVersion": version or PROTOCOL_VERSIONS[0],
            "capabilities": capabilities,
            "clientInfo": CLIENT_INFO,
        }
        if trace:
            params["_meta"] = trace
        # The spec forbids cancelling initialize.
        return self._decoded("initialize", _encode(params), json_object, what="initialize", cancellable=False)

    def adopt_handshake(self, result: dict[str, Any]) -> None:
        version = result.get("protocolVersion")
        if version not in PROTOCOL_VERSIONS:
            raise HostError(
                "open",
                f"the server chose MCP protocol version {version!r}, which lovia-mcp does not speak "
                f"(it speaks {', '.join(PROTOCOL_VERSIONS)})",
                hint="Use a server release that supports one of these versions.",
            )
        self.protocol_version = version
        self._envelope = None
        self.capabilities = result.get("capabilities")
        self.notify("notifications/initialized")

    def adopt_modern(self, version: str, discovered: dict[str, Any] | None) -> None:
        self.protocol_version = version
        self._envelope = era.envelope(version)
        self.discovered = discovered
        self.capabilities = None if discovered is None else discovered.get("capabilities")

    def discover(self, version: str, trace: Trace) -> Coroutine[Any, Any, dict[str, Any]]:
        params = _encode({"_meta": {**era.envelope(version), **(trace or {})}})
        return self._decoded("server/discover", params, json_object, what="server/discover", cancellable=False)

    async def listen(self) -> None:
        """Hold a ``subscriptions/listen`` stream for tool-list changes (the modern era) until cancelled.

        The server's ``notifications/tools/list_changed`` on it reach
        ``on_tools_changed`` as in the handshake era; cancelling ends it.
        """
        params = _encode({"notifications": {"toolsListChanged": True}, "_meta": self._meta()})
        await self.request("subscriptions/listen", params, what="subscriptions/listen")

    async def list_tools(self, warn: Callable[[str], None], trace: Trace = None) -> list[ToolSpec]:
        asked = time.monotonic()
        ttls: list[float | None] = []

        async def page(cursor: str | None) -> msgspec.Raw:
            fields: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            meta = self._meta(trace)
            if meta:
                fields["_meta"] = meta
            raw = await self.request("tools/list", _encode(fields) if fields else None, what="tools/list")
            # ttlMs is the modern era's (a handshake-era listing has no limit).
            ttls.append(era.ttl_seconds(json_object(raw)) if self.modern else None)
            return raw

        try:
            tools = await list_tools(page, warn)
        except MCPJSONError as exc:
            raise failures.bad_reply("tools/list", str(exc)) from None
        # A listing is as fresh as its shortest-lived page.
        self.listing_ttl = None if not ttls or None in ttls else min(t for t in ttls if t is not None)
        self.listed_at = asked
        return tools

    async def call_tool(
        self, name: str, arguments: bytes, on_progress: OnProgress | None = None, trace: Trace = None
    ) -> CallOutcome:
        """``tools/call`` with the agent's argument bytes as they are (a JSON object).

        With ``on_progress``, the request carries a ``progressToken`` and each
        ``notifications/progress`` for it is handed to ``on_progress``;
        ``trace`` (the agent's ``traceparent``/``tracestate``) goes into ``_meta``.
        """
        params = b'{"name":' + _encode(name) + b',"arguments":' + (arguments or b"{}")
        token = None
        if on_progress is None:
            meta = self._meta(trace)
            if meta:
                params += b',"_meta":' + _encode(meta)
            params += b"}"
        else:
            token = next(self._tokens)
            if self._envelope is None and not trace:  # the common case, without building a dict
                params += b',"_meta":{"progressToken":%d}}' % token
            else:
                params += b',"_meta":' + _encode(self._meta({"progressToken": token}, trace)) + b"}"
        # The request's future is awaited here, not through request() and
        # _decoded(): a call's path has no coroutine it does not need.
        try:
            if token is not None and on_progress is not None:
                self._progress[token] = on_progress
            rid, fut = self._send("tools/call", params, name)
            try:
                raw = await fut
            except asyncio.CancelledError:
                self._abandoned(rid, True)
                raise
        finally:
            if token is not None:
                self._progress.pop(token, None)
        try:
            return self._call_result(raw)
        except MCPJSONError as exc:
            raise failures.bad_reply(name, str(exc)) from None

    async def relay(self, method: str, params: bytes | None) -> tuple[bytes | None, bytes | None]:
        """Send request ``method`` with ``params`` (a JSON object, raw) as they are: the server's raw result, or its
        raw error object. In the modern era the envelope joins the params' ``_meta`` (the one re-encoding)."""
        if self._envelope is not None:
            try:
                fields = _decode(params) if params else {}
            except _UNDECODABLE:
                fields = None
            if not isinstance(fields, dict):
                return None, _encode({"code": INVALID_PARAMS, "message": f"{method}: params must be a JSON object"})
            meta = fields.get("_meta")
            fields["_meta"] = {**(meta if isinstance(meta, dict) else {}), **self._envelope}
            params = _encode(fields)
        try:
            raw = await self.request(method, params, what=method)
        except RemoteError as exc:
            error = {"code": exc.code, "message": exc.message}
            if exc.data is not None:
                error["data"] = exc.data
            return None, _encode(error)
        return bytes(raw), None

    def _call_result(self, raw: msgspec.Raw) -> CallOutcome:
        if not self.modern:
            return call_result(raw)
        result = json_object(raw)
        # An InputRequiredResult (elicitation, sampling, roots: non-goals) is a tool error naming what was asked.
        asked = era.input_required(result)
        if asked is not None:
            return [ContentBlock(type="text", text=asked)], True, None
        return call_result(result)


__all__ = ["CLIENT_INFO", "CLIENT_METHODS", "PROTOCOL_VERSIONS", "Client"]
