"""A live connection: the agent's handle on one server's session host.

The connection sends typed requests with ids to its channel (a worker
process, or the in-process host) and resolves them as answers arrive, so
many calls can be in flight and concurrent runs can share one connection.
It turns every worker :class:`~lovia_mcp_worker.protocol.Failure` into the
right lovia error in one place (:meth:`MCPConnection._error`).

Lifecycle: ``_connect`` starts the channel and waits for ``Opened`` (spawn,
handshake, tool listing). A worker that dies is replaced on the next request;
a server that dies is replaced by the worker. ``close`` is shielded from
cancellation and bounded.

The restart circuit is the connection's: server restarts (each ``Started``
after a worker's first) and worker replacements count alike, so a server
that keeps killing its worker is stopped as one that keeps crashing. Past
``restart_limit`` restarts in ``restart_window`` a request that would need a
restart fails fast (``circuit_open``) until the window has passed. (Each
worker also keeps its own count of server restarts as a backstop.)

Caveats: like lovia's plugin, the one retry after a lost connection is
at-least-once: a server that died after doing the work but before answering
does it twice; so is a call retried because another call's timeout killed
the server it ran on. Use ``auto_reconnect=False`` for mutating tools, or
``"safe"``: only tools whose annotations say read-only or idempotent are
retried (:mod:`.annotations`).

Tool-list changes: the worker sends ``ToolsChanged`` when the server's list
changes (``tools/list_changed``, or a restarted server listing others);
:meth:`MCPConnection.tools` then gives the new tools, so a persistent
connection hands them to the next run, while a run already going keeps the
list its plugin set up with.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import msgspec
from lovia.exceptions import MCPError
from lovia.run_context import RunContext
from lovia.tools import Tool

from lovia_mcp_worker import failures
from lovia_mcp_worker.framing import MAX_REQUEST_BYTES, frame_cap
from lovia_mcp_worker.protocol import (
    MCP_MODERN_VERSIONS,
    AgentMessage,
    CallTool,
    Cancel,
    Close,
    Ended,
    Failure,
    GetStats,
    ListTools,
    Log,
    Open,
    Opened,
    Progress,
    Result,
    Started,
    Stats,
    StatsReply,
    ToolAnnotations,
    ToolSpec,
    Tools,
    ToolsChanged,
    WorkerMessage,
)

from ._channel import LocalChannel, ProcessChannel, kill_leftovers
from ._errors import to_error
from ._tools import build_tools
from . import annotations as _hints
from . import tracing
from ._parity import LoviaFields
from .render import MCPToolResult, default_renderer, with_sdk_models

if TYPE_CHECKING:
    from .config import Isolation, MCPServer

logger = logging.getLogger("lovia_mcp")
# MCP progress of running calls: one INFO record per update (the worker
# coalesces them), with ``server``, ``tool``, ``progress``, ``total`` and
# ``progress_message`` (the server's own text, or None).
progress_logger = logging.getLogger("lovia_mcp.progress")

# Bound on a close: the worker's own tree kill is bounded below this.
CLOSE_WAIT: Final = 8.0
# Failure kinds after which one retry on a fresh server can succeed.
RETRYABLE: Final = frozenset({"server_exited", "worker_died", "protocol"})
# Failure kinds that mean the server generation ended: the next request
# needs a restart, which the circuit may refuse.
ENDED: Final = frozenset({"server_exited", "worker_died", "protocol", "limit"})
# The largest tool-call arguments sent (JSON bytes): a worker takes frames up
# to MAX_REQUEST_BYTES, and the rest of the CallTool message needs room.
ARGUMENTS_CAP: Final = MAX_REQUEST_BYTES - 64 * 1024

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.decode


class _Retry(Exception):
    def __init__(self, error: Exception) -> None:
        self.error = error


class MCPConnection(LoviaFields):
    """A live connection and the lovia tools bound to it.

    Made by ``server.open()`` / ``server.session()``. Satisfies the plugin's
    server protocol (``close_after_run``, ``defer``, ``open``), so a
    persistent connection can be handed to :class:`~lovia_mcp.MCP` directly;
    a run never closes a connection it did not open.
    """

    def __init__(self, server: MCPServer, *, isolation: Isolation, close_after_run: bool) -> None:
        self.server = server
        self.isolation = isolation
        self.prefix = server.name
        self._close_after_run = close_after_run
        self._spec = server._spec()
        if server.spares and not close_after_run and isolation == "process":
            # Persistent: a crash or timeout restart takes a standby server
            # the worker keeps ready (per-run opens take the pool's spares).
            self._spec = msgspec.structs.replace(self._spec, standby=True)
        self._channel: ProcessChannel | LocalChannel | None = None
        self._starting: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[WorkerMessage]] = {}
        self._ids = itertools.count(1)
        self._tools: list[Tool] | None = None
        # Request id of each tools/call in flight -> its raw tool name (for progress).
        self._calls: dict[int, str] = {}
        # The listing the tools were built from (a warm spare rebuilds them for
        # its taker), and each raw name's hints.
        self._specs: list[ToolSpec] | None = None
        self._annotations: dict[str, ToolAnnotations | None] = {}
        # Visible tool name -> the server's raw name (what calls are sent as).
        self.raw_names: dict[str, str] = {}
        # Raw names already reported as listed twice: a refresh repeats no warning.
        self._duplicates_reported: set[str] = set()
        self._closed = False
        self._server_pid: int | None = None
        self.worker_restarts = 0
        self._last_worker_loss: str | None = None
        # The connection's restart circuit: when each restart (server or
        # worker) happened, whether the server is known to need one, and why
        # the last one ended.
        self._restart_times: collections.deque[float] = collections.deque()
        self._needs_restart = False
        self._last_end: str | None = None
        self._server_log = logging.getLogger(f"lovia_mcp.server.{self._spec.name}")
        self._renderer = _renderer(server)
        # Spans of the operations in flight (worker events go onto them), and
        # the MCP protocol version the server speaks (from Opened / Started).
        self._ops: set[tracing.Operation] = set()
        self.protocol_version: str | None = None
        # The server's ttlMs for the listing (seconds; None: no limit) and
        # when it was received: a warm spare re-lists once it has expired.
        self._listing_ttl: float | None = None
        self._listed_at = time.monotonic()

    # -- the plugin's view --------------------------------------------------- #
    @property
    def close_after_run(self) -> bool:
        return self._close_after_run

    @property
    def defer(self) -> bool:
        return self.server.defer

    async def open(self) -> MCPConnection:
        return self

    async def __aenter__(self) -> MCPConnection:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def worker_pid(self) -> int | None:
        ch = self._channel
        return ch.pid if ch is not None and self.isolation == "process" else None

    @property
    def server_pid(self) -> int | None:
        return self._server_pid

    def _adopt(self, server: MCPServer, *, close_after_run: bool) -> None:
        """Hand this (warm spare) connection to ``server``, a config with the same worker spec.

        What is not in the spec (tool filters, approval, renderer, retries,
        timeouts) is the taker's: the tools are rebuilt from the listing.
        """
        self.server = server
        self.prefix = server.name
        self._close_after_run = close_after_run
        self._renderer = _renderer(server)
        self._duplicates_reported = set()
        self._tools = self._build_tools(self._specs or [])

    # -- tools --------------------------------------------------------------- #
    def tools(self) -> list[Tool]:
        if self._tools is None:
            raise MCPError(
                "MCP connection has no tools loaded.",
                hint="Open the connection before requesting its tools.",
            )
        return list(self._tools)

    async def refresh_tools(self) -> list[Tool]:
        """Re-list the server's tools and rebuild the lovia tools."""
        with self._operation("tools/list") as op:
            trace = op.trace if op is not None else None
            reply = await self._request(lambda i: ListTools(id=i, trace=trace), tool_name=None, op=op)
        assert isinstance(reply, Tools)
        self._listing_ttl, self._listed_at = reply.listing_ttl, time.monotonic()
        self._tools = self._build_tools(reply.tools)
        return list(self._tools)

    async def _freshen(self) -> bool:
        """Re-list if the listing's ttlMs has passed (a spare taken after waiting); False if that failed."""
        ttl = self._listing_ttl
        if ttl is None or time.monotonic() - self._listed_at < ttl:
            return True
        try:
            await self.refresh_tools()
        except Exception as exc:  # noqa: BLE001 - the caller opens a fresh connection instead
            logger.info("%s: re-listing an expired listing failed: %s", self._spec.name, exc)
            return False
        return True

    def _build_tools(self, specs: list[ToolSpec]) -> list[Tool]:
        self._specs = list(specs)
        self._annotations = {spec.name: spec.annotations for spec in specs}
        tools, self.raw_names = build_tools(
            self.server, self.prefix, specs, self._make_invoke, self._renderer,
            reported=self._duplicates_reported, server_name=self._spec.name,
        )
        return tools

    def _make_invoke(self, tool_name: str) -> Any:
        async def invoke(args: dict[str, Any], ctx: RunContext[Any]) -> MCPToolResult:
            timeout = self.server.timeout
            if timeout is None:
                timeout = getattr(getattr(ctx, "agent", None), "default_tool_timeout", None)
            return await self.call_tool(tool_name, args, timeout=timeout)

        return invoke

    # -- calls --------------------------------------------------------------- #
    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> MCPToolResult:
        """Call a tool by its raw name; ``timeout`` only classifies a cancellation.

        The caller enforces the timeout (lovia's ``run_tool`` does, with
        ``asyncio.wait_for``); when the call is cancelled at or after
        ``timeout`` seconds, the worker applies ``on_timeout``.
        """
        body = _json_encode(arguments or {})
        if len(body) > ARGUMENTS_CAP:
            # Never sent: the worker takes no frame over MAX_REQUEST_BYTES, and
            # a bigger one is no more likely to succeed on a fresh server.
            raise MCPError(
                f"MCP tool {name!r} failed: its arguments are {len(body):,} bytes of JSON, "
                f"over the {ARGUMENTS_CAP:,}-byte cap on a request",
                hint="Pass large data by reference (a path or a URL) rather than inline.",
                tool_name=name,
                kind="too_large",
            )
        if not tracing.enabled():  # the common case, kept free of the context managers
            return await self._call_tool(name, body, timeout, None)
        with self._operation("tools/call", name) as op:
            result = await self._call_tool(name, body, timeout, op)
            if result.is_error and op is not None:
                op.fail("tool_error")
            return result

    @contextlib.contextmanager
    def _operation(self, method: str, target: str | None = None) -> Iterator[tracing.Operation | None]:
        """The span of one MCP operation (:mod:`.tracing`); ``None`` inside without OpenTelemetry.

        While it is in flight, what the worker reports becomes its events.
        """
        with tracing.operation(
            method, target, **{
                "network.transport": tracing.NETWORK_TRANSPORT.get(self._spec.transport),
                "mcp.protocol.version": self.protocol_version,
                "lovia_mcp.server.name": self._spec.name,
                **tracing.server_address(self._spec.url),
            },
        ) as op:
            if op is None:
                yield None
                return
            self._ops.add(op)
            try:
                yield op
            finally:
                self._ops.discard(op)

    async def _call_tool(
        self, name: str, body: bytes, timeout: float | None, op: tracing.Operation | None
    ) -> MCPToolResult:
        retried = False
        trace = op.trace if op is not None else None
        # The timeout runs from here (lovia's wait_for wraps this call):
        # time spent replacing a worker or on a first attempt counts, so a
        # cancel at the deadline is always recognised as a timeout.
        started = time.monotonic()
        sent: list[int] = []

        def make(i: int) -> CallTool:
            sent.append(i)
            self._calls[i] = name
            return CallTool(id=i, name=name, arguments=body, trace=trace)

        while True:
            try:
                reply = await self._request(make, tool_name=name, timeout=timeout, retry=True, started=started, op=op)
            except _Retry as r:
                if not self.server.auto_reconnect or retried:
                    raise r.error from None
                if self.server.auto_reconnect == "safe" and not _hints.retry_is_safe(self._annotations.get(name)):
                    logger.warning(
                        "%s: not retrying %r (auto_reconnect='safe': its annotations say neither "
                        "read-only nor idempotent) after: %s", self._spec.name, name, r.error,
                    )
                    raise r.error from None
                retried = True
                if op is not None:
                    op.event(tracing.EVENT_RETRY, {"lovia_mcp.reason": str(r.error)})
                logger.warning("%s: retrying %r once on a fresh server after: %s", self._spec.name, name, r.error)
                continue
            finally:
                while sent:
                    self._calls.pop(sent.pop(), None)
            assert isinstance(reply, Result)
            structured = None if reply.structured_content is None else _json_decode(reply.structured_content)
            return MCPToolResult(content=list(reply.content), is_error=reply.is_error, structured_content=structured)

    async def _request(
        self,
        make: Any,
        *,
        tool_name: str | None,
        timeout: float | None = None,
        retry: bool = False,
        started: float | None = None,
        op: tracing.Operation | None = None,
    ) -> WorkerMessage:
        """Send one request and wait for its answer.

        With ``retry``, a failure after which a fresh server may succeed is
        raised as ``_Retry`` (for ``call_tool``'s one retry); otherwise every
        failure is raised as the lovia error itself. ``started``: when the
        caller's ``timeout`` began (default: now).
        """
        if self._closed:
            raise MCPError(
                "MCP connection is closed.",
                hint="Open it per run, or keep it alive with 'async with server.session()'.",
                tool_name=tool_name,
            )
        if started is None:
            started = time.monotonic()
        if self._needs_restart:
            self._check_circuit(tool_name)
        try:
            channel = await self._ready(tool_name)
        except _Retry as r:
            if retry:
                raise
            raise r.error from None
        rid = next(self._ids)
        fut: asyncio.Future[WorkerMessage] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        msg: AgentMessage = make(rid)
        if op is not None:
            op.set("jsonrpc.request.id", rid)
        channel.send(msg)
        try:
            reply = await fut
        except asyncio.CancelledError:
            self._pending.pop(rid, None)
            if channel.alive:
                # The tolerance absorbs timer granularity: wait_for fires at
                # the deadline, never meaningfully before it.
                timed_out = timeout is not None and time.monotonic() - started >= timeout - 0.01
                channel.send(Cancel(id=rid, timed_out=timed_out))
                if timed_out and op is not None:
                    op.timed_out(timeout, self._spec.on_timeout)
                if timed_out and self._spec.on_timeout == "kill":
                    self._needs_restart = True
            raise
        finally:
            self._pending.pop(rid, None)
        if isinstance(reply, Failure):
            if op is not None:
                op.failure(reply)
            if reply.kind in ENDED:
                self._needs_restart = True
                self._last_end = reply.message
            error = self._error(reply, tool_name)
            if retry and reply.kind in RETRYABLE:
                raise _Retry(error)
            raise error
        return reply

    async def _ready(self, tool_name: str | None) -> ProcessChannel | LocalChannel:
        while True:
            ch = self._channel
            if ch is not None and ch.alive:
                return ch
            if self._starting is None:
                if ch is not None:
                    self._check_circuit(tool_name)  # a replacement worker is a restart
                self._starting = asyncio.ensure_future(self._start_channel())
                self._starting.add_done_callback(self._start_done)
            try:
                await asyncio.shield(self._starting)
            except _StartFailed as exc:
                error = self._error(exc.failure, tool_name)
                if exc.failure.kind in RETRYABLE:
                    raise _Retry(error) from None
                raise error from None

    def _start_done(self, task: asyncio.Task[None]) -> None:
        self._starting = None
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting callers

    async def _start_channel(self) -> None:
        old = self._channel
        if old is not None:
            self.worker_restarts += 1
            self._restart_times.append(time.monotonic())
            tracing.worker_restarted(self._ops, self._last_worker_loss)
            await old.aclose()
        with self._operation("initialize") as op:
            await self._open_channel(op)

    async def _open_channel(self, op: tracing.Operation | None) -> None:
        channel: ProcessChannel | LocalChannel
        if self.isolation == "process":
            # The largest frame this worker may send: never allocate past it.
            channel = ProcessChannel(frame_cap(self._spec.limits.max_result_bytes))
        else:
            channel = LocalChannel()
        def lost(why: str) -> None:
            self._on_lost(channel, why)

        await channel.start(self._on_message, lost)
        self._channel = channel
        rid = next(self._ids)
        fut: asyncio.Future[WorkerMessage] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if op is not None:
            op.set("jsonrpc.request.id", rid)
        channel.send(Open(id=rid, spec=self._spec, trace=op.trace if op is not None else None))
        try:
            reply = await fut
        finally:
            self._pending.pop(rid, None)
        if isinstance(reply, Failure):
            if op is not None:
                op.failure(reply)
            self._channel = None
            with contextlib.suppress(Exception):
                await self._close_channel(channel)
            raise _StartFailed(reply)
        assert isinstance(reply, Opened)
        self._server_pid = reply.server_pid
        self.protocol_version = reply.protocol_version
        self._listing_ttl, self._listed_at = reply.listing_ttl, time.monotonic()
        if op is not None:
            op.set("mcp.protocol.version", reply.protocol_version)
            if reply.protocol_version in MCP_MODERN_VERSIONS:
                op.rename("server/discover")  # the stateless era's open has no initialize
        if self._tools is None or reply.tools != self._specs:
            # A replaced worker's server may list other tools.
            self._tools = self._build_tools(reply.tools)
        logger.info(
            "%s: connected (%s isolation, worker pid %s, server pid %s)",
            self._spec.name, self.isolation, channel.pid, reply.server_pid,
        )

    def _on_message(self, msg: WorkerMessage) -> None:
        if isinstance(msg, Log):
            if msg.stderr:
                self._server_log.log(msg.level, "%s", msg.message)
            else:
                logger.log(msg.level, "%s: %s", self._spec.name, msg.message)
            return
        if isinstance(msg, ToolsChanged):
            self._listed_at = time.monotonic()  # the worker has just listed
            if self._tools is not None:
                before = set(self.raw_names.values())
                self._tools = self._build_tools(msg.tools)
                after = set(self.raw_names.values())
                logger.info(
                    "%s: the server's tools changed (%d now; added %s, removed %s)", self._spec.name,
                    len(after), sorted(after - before) or "none", sorted(before - after) or "none",
                )
            return
        if isinstance(msg, Started):
            # The worker started a fresh server (a restart after its first).
            # Follow its pid, so a worker death kills the right group.
            self._server_pid = msg.server_pid
            self._needs_restart = False
            if msg.protocol_version is not None:
                self.protocol_version = msg.protocol_version
            if msg.generation > 1:
                self._restart_times.append(time.monotonic())
            tracing.started(self._ops, msg)
            return
        if isinstance(msg, Progress):
            self._log_progress(msg)
            return
        if isinstance(msg, Ended):
            # A dead server is no longer the connection's, unless a fresh
            # generation's Started already replaced it.
            if msg.server_pid == self._server_pid:
                self._server_pid = None
            tracing.ended(self._ops, msg)
            return
        fut = self._pending.pop(msg.id, None)
        if fut is not None and not fut.done():
            fut.set_result(msg)

    def _log_progress(self, msg: Progress) -> None:
        tool = self._calls.get(msg.id)
        if tool is None:
            return  # the call already ended (or was abandoned)
        done = f"{msg.progress:g}" if msg.total is None else f"{msg.progress:g}/{msg.total:g}"
        text = f"{self._spec.name}/{tool}: {done}" + (f" {msg.message}" if msg.message else "")
        progress_logger.info(
            "%s", text,
            extra={"server": self._spec.name, "tool": tool, "progress": msg.progress, "total": msg.total,
                   "progress_message": msg.message},
        )

    def _on_lost(self, channel: ProcessChannel | LocalChannel, why: str) -> None:
        if channel is not self._channel or self._closed:
            return
        logger.warning("%s: %s", self._spec.name, why)
        self._last_worker_loss = why
        self._last_end = why
        self._needs_restart = True
        # The worker's parent-death signal takes the server; its group may
        # still hold grandchildren.
        if self._server_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._server_pid, signal.SIGKILL)
        kill_leftovers(channel)
        pending, self._pending = self._pending, {}
        for rid, fut in pending.items():
            if not fut.done():
                fut.set_result(
                    Failure(id=rid, kind="worker_died", message=why, hint="A fresh worker serves the next call.")
                )

    def _check_circuit(self, tool_name: str | None) -> None:
        """Raise ``circuit_open`` if ``restart_limit`` restarts fall in the window (the connection's circuit)."""
        spec = self._spec
        now = time.monotonic()
        times = self._restart_times
        while times and now - times[0] > spec.restart_window:
            times.popleft()
        if len(times) >= spec.restart_limit:
            wait = spec.restart_window - (now - times[0])
            reason = failures.circuit_open(spec.name, len(times), spec.restart_window, self._last_end, wait)
            raise self._error(reason.failure(0), tool_name)

    def _error(self, failure: Failure, tool_name: str | None) -> Exception:
        return to_error(failure, tool_name, self._spec.name)

    # -- open, stats, close -------------------------------------------------- #
    async def _connect(self) -> None:
        try:
            await self._ready(None)
        except _Retry as r:
            await self.close()
            raise r.error from None
        except BaseException:
            await self.close()
            raise

    async def stats(self) -> Stats:
        """Counters and the server tree's usage: one round trip to the worker.

        ``restarts`` counts server restarts and worker replacements over the
        connection's life; ``last_restart_reason`` is the latest of either.
        A replaced worker's own counters (calls, errors, timeouts) start anew.
        """
        reply = await self._request(lambda i: GetStats(id=i), tool_name=None)
        assert isinstance(reply, StatsReply)
        stats = reply.stats
        if self.worker_restarts:
            stats = msgspec.structs.replace(
                stats,
                restarts=stats.restarts + self.worker_restarts,
                last_restart_reason=stats.last_restart_reason or self._last_worker_loss,
            )
        return stats

    async def close(self) -> None:
        """Stop the server tree and the worker; shielded and bounded."""
        if self._closed:
            return
        self._closed = True
        channel, self._channel = self._channel, None
        starting = self._starting
        if starting is not None:
            starting.cancel()
        if channel is not None:
            await asyncio.shield(self._close_channel(channel))
        pending, self._pending = self._pending, {}
        for rid, fut in pending.items():
            if not fut.done():
                fut.set_result(Failure(id=rid, kind="closed", message="the connection was closed"))

    async def _close_channel(self, channel: ProcessChannel | LocalChannel) -> None:
        if channel.alive:
            rid = next(self._ids)
            fut: asyncio.Future[WorkerMessage] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            channel.send(Close(id=rid))
            # The reply or the channel's loss, whichever comes first: a worker
            # that dies while closing never answers.
            lost = asyncio.ensure_future(channel.wait_lost())
            either: set[asyncio.Future[Any]] = {fut, lost}
            try:
                await asyncio.wait(either, timeout=CLOSE_WAIT, return_when=asyncio.FIRST_COMPLETED)
                died = lost.done() and not fut.done()
            finally:
                lost.cancel()
                self._pending.pop(rid, None)
            if died and self._server_pid is not None:
                # As in _on_lost (which ignores a closed connection): the
                # parent-death signal takes the server, not its group.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._server_pid, signal.SIGKILL)
            if died:
                kill_leftovers(channel)
        await channel.aclose()


def _renderer(server: MCPServer) -> Any:
    # lovia's plugin hands a custom renderer the SDK's models: so do we.
    return with_sdk_models(server.result_renderer) if server.result_renderer else default_renderer


class _StartFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


__all__ = ["MCPConnection"]
