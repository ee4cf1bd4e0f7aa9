"""A live connection: the lovia-facing surface over the client core.

:class:`MCPConnection` holds what lovia's own connection has (the config's
fields, ``tools()``, ``refresh_tools()``, ``call_tool()``), builds the lovia
tools from the listing the worker announces, and turns each failure into
the right lovia error (:mod:`._errors`) after the one retry decision
(:mod:`.client.retry`). Requests, the channel, the circuit and worker loss
are the core's (:mod:`.client.core`).

Lifecycle: :meth:`MCPConnection.connect` opens (spawn, handshake, tool
listing); a worker that dies is replaced on the next request; a server that
dies is replaced by the worker. :meth:`MCPConnection.close` is shielded from
cancellation and bounded; :meth:`MCPConnection.close_soon` (a run's end)
starts the same close without waiting for the server's death.

Timeouts: a call carries its deadline to the worker, which cancels it there,
applies ``on_timeout`` and answers (:mod:`lovia_mcp_worker.session.deadline`
owns all of it); lovia's own ``wait_for`` around the tool usually fires at
the same moment, and the worker counts a cancel that arrives at the
deadline as the timeout. This side takes "timed out" from the answer's kind;
it keeps only the core's stuck-worker backstop (:mod:`.client.core`).

Tool-list changes: the worker sends ``ToolsChanged`` when the server's list
changes (``tools/list_changed``, or a restarted server listing others);
:meth:`MCPConnection.tools` then gives the new tools, so a persistent
connection hands them to the next run, while a run already going keeps the
list its plugin set up with. :attr:`MCPConnection.on_tools_changed` hears of
each change (the gateway forwards it to its clients).

Pinning: with a lock (``server.locked``), every listing is screened against
it (:mod:`.lock.pins`) before the tools are built: under ``pin="quarantine"``
a tool that differs from its pin, or that the lock does not know, is left
out of the tools and refused by name; the open warns once of every such
tool, a later listing of each new one.

The relay (``relay=True``: ``lovia-mcp serve``): :meth:`MCPConnection.relay`
sends any other MCP request as raw JSON and returns the server's raw
answer; :attr:`MCPConnection.on_notification` hears the server's
notifications attributed to no request (those attributed to a call go to
its listener: :mod:`..client.relay`); :attr:`MCPConnection.server_capabilities`
is what the server declared. The library plugin uses none of it.

What may be called: the tools are built from the listing, the config's
``include_tools`` / ``exclude_tools`` and the lock's quarantine in one pass
(:func:`._tools.build_tools`), and their raw names are
:attr:`MCPConnection.callable_names`. A call by name (:meth:`MCPConnection.call_tool`,
the gateway's included) outside that set is refused here, never sent: a
filtered tool, one the server does not list and a nonexistent one get the
same unknown-tool error (a quarantined one says it is quarantined).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec
from lovia.exceptions import MCPError
from lovia.run_context import RunContext
from lovia.tools import Tool
from lovia_mcp_worker.wire.framing import MAX_REQUEST_BYTES
from lovia_mcp_worker.wire.mcpjson import ToolAnnotations, ToolSpec
from lovia_mcp_worker.wire.messages import (
    CallTool,
    Failure,
    GetStats,
    ListTools,
    Relay,
    Relayed,
    Result,
    Stats,
    StatsReply,
    WorkerMessage,
)

from .. import tracing
from ..client import core as client_core
from ..client.circuit import RestartCircuit
from ..client.core import ClientCore
from ..client.relay import Listener
from ..client.retry import retry
from ..lock import packages, pins
from ..render import DENIED_META, MCPToolResult, default_renderer, denial_meta, output_cap, with_sdk_models
from ._errors import to_error
from ._parity import LoviaFields
from ._tools import build_tools

if TYPE_CHECKING:
    from ..config._isolation import Isolation
    from ..config.server import ServerConfig

logger = logging.getLogger("lovia_mcp")

# The largest tool-call arguments sent (JSON bytes): a worker takes frames up
# to MAX_REQUEST_BYTES, and the rest of the CallTool message needs room.
ARGUMENTS_CAP: Final = MAX_REQUEST_BYTES - 64 * 1024
# The kind of the error a call of a name outside the callable set gets.
UNKNOWN_TOOL_KIND: Final = "unknown_tool"

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.decode


class MCPConnection(LoviaFields):
    """A live connection and the lovia tools bound to it.

    Made by ``server.open()`` / ``server.session()``. Satisfies the plugin's
    server protocol (``close_after_run``, ``defer``, ``open``), so a
    persistent connection can be handed to :class:`~lovia_mcp.MCP` directly;
    a run never closes a connection it did not open.
    """

    def __init__(self, server: ServerConfig, *, isolation: Isolation, close_after_run: bool) -> None:
        self.server = server
        self.isolation = isolation
        self.prefix = server.name
        self._close_after_run = close_after_run
        spec = server._spec()
        if server.spares and not close_after_run and isolation == "process":
            # Persistent: a crash or timeout restart takes a standby server
            # the worker keeps ready (per-run opens take the pool's spares).
            spec = msgspec.structs.replace(spec, standby=True)
        self.name = spec.name
        circuit = RestartCircuit(server.restart_limit, float(server.restart_window))
        self.core = ClientCore(spec, isolation, circuit, self._apply_tools)
        self._tools: list[Tool] | None = None
        # The listing the tools were built from (a warm spare rebuilds them for
        # its taker), and each raw name's hints.
        self._specs: list[ToolSpec] = []
        self._annotations: dict[str, ToolAnnotations | None] = {}
        # Visible tool name -> the server's raw name (what calls are sent as).
        self.raw_names: dict[str, str] = {}
        # Raw names already reported as listed twice: a refresh repeats no warning.
        self._duplicates_reported: set[str] = set()
        # The listed tools that differ from the lock (pins.screen), and those of
        # them withheld from the model (pin="quarantine"), by raw name.
        self.drift: dict[str, pins.Drift] = {}
        self._withheld: frozenset[str] = frozenset()
        # The raw names a call may name: those the tools were built for.
        self._callable: frozenset[str] = frozenset()
        self._renderer = _renderer(server)
        # Called, on the event loop and synchronously, once the tools have
        # changed while open (a list_changed, a restarted server or a replaced
        # worker listing other tools); it must not block.
        self.on_tools_changed: Callable[[MCPConnection], None] | None = None
        # Whether the open's drift has been told (later listings tell only what is new).
        self._tools_told = False

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
    def closed(self) -> bool:
        return self.core.closed

    @property
    def worker_pid(self) -> int | None:
        return self.core.worker_pid

    @property
    def server_pid(self) -> int | None:
        """The server's pid as the worker last reported it (``None`` between generations)."""
        return self.core.server_pid

    @property
    def protocol_version(self) -> str | None:
        """The MCP protocol version the server speaks (``None`` until opened)."""
        return self.core.protocol_version

    @property
    def worker_restarts(self) -> int:
        """Workers replaced after one was lost, over the connection's life."""
        return self.core.worker_restarts

    def adopt(self, server: ServerConfig, *, close_after_run: bool) -> None:
        """Hand this (warm spare) connection to ``server``, a config with the same worker spec.

        What is not in the spec (tool filters, approval, renderer, retries,
        timeouts) is the taker's: the tools are rebuilt from the listing.
        """
        self.server = server
        self.prefix = server.name
        self._close_after_run = close_after_run
        self._renderer = _renderer(server)
        self._duplicates_reported = set()
        self.drift = {}
        self._tools = self._build_tools(self._specs)
        self._tell_drift()

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
        with self.core.operation("tools/list") as op:
            trace = None if op is None else op.trace
            await self._ask(lambda i: ListTools(id=i, trace=trace), op)
        return self.tools()

    async def freshen(self) -> bool:
        """Re-list if the listing's ttlMs has passed (a spare taken after waiting); False if that failed."""
        ttl = self.core.listing_ttl
        if ttl is None or time.monotonic() - self.core.listed_at < ttl:
            return True
        try:
            await self.refresh_tools()
        except Exception as exc:  # noqa: BLE001 - the caller opens a fresh connection instead
            logger.info("%s: re-listing an expired listing failed: %s", self.name, exc)
            return False
        return True

    def _apply_tools(self, specs: list[ToolSpec], changed: bool) -> None:
        """The worker announced ``specs``: the tools are rebuilt from them, as they are."""
        if changed and self._tools is None:
            return  # not opened yet: Opened brings the list
        before = set(self.raw_names.values())
        differs = self._tools is not None and list(specs) != self._specs
        drifted = set(self.drift)
        self._tools = self._build_tools(specs)
        if self._tools_told:
            # A later listing (a restart, list_changed): each tool that drifts
            # anew is named once, as it appears.
            for name in sorted(set(self.drift) - drifted):
                self._warn_drift({name: self.drift[name]})
        if differs and self.on_tools_changed is not None:
            try:
                self.on_tools_changed(self)
            except Exception:  # noqa: BLE001 - a listener's bug must not break the worker's message loop
                logger.exception("%s: on_tools_changed raised", self.name)
        if changed:
            after = set(self.raw_names.values())
            logger.info(
                "%s: the server's tools changed (%d now; added %s, removed %s)",
                self.name,
                len(after),
                sorted(after - before) or "none",
                sorted(before - after) or "none",
            )

    @property
    def listing(self) -> list[ToolSpec]:
        """The server's tools as it last listed them, every one (filters and the lock not applied)."""
        return list(self._specs)

    @property
    def callable_names(self) -> frozenset[str]:
        """The server's raw names this connection calls: those of :meth:`tools` (listed, let through by the
        filters and the lock); any other name is refused as an unknown tool."""
        return self._callable

    @property
    def quarantined(self) -> list[str]:
        """The server's raw names of the tools withheld because they differ from the lock."""
        return sorted(self._withheld)

    def _pin_policy(self) -> pins.PinPolicy:
        return self.server.pin or pins.DEFAULT_PIN

    def _screen(self, specs: list[ToolSpec]) -> None:
        locked = self.server.locked
        if locked is None or self._pin_policy() == "off":
            self.drift, self._withheld = {}, frozenset()
            return
        self.drift = pins.screen(specs, locked)
        self._withheld = frozenset(self.drift) if self._pin_policy() == "quarantine" else frozenset()

    def _warn_drift(self, drift: dict[str, pins.Drift]) -> None:
        withheld = self._pin_policy() == "quarantine"
        logger.warning(
            "%s: %d tool(s) %s: %s. See what changed with: %s; accept them after review with: %s",
            self.name,
            len(drift),
            "quarantined (withheld from the model) because they differ from the lock"
            if withheld
            else "differ from the lock (offered anyway: pin='warn')",
            pins.summary(drift),
            self._lock_command("check"),
            self._lock_command("lock --update"),
        )

    def _tell_drift(self) -> None:
        """At open: how many tools are quarantined (or offered with pin='warn'), and why; never silent."""
        self._tools_told = True
        if self.drift:
            self._warn_drift(self.drift)

    def _build_tools(self, specs: list[ToolSpec]) -> list[Tool]:
        self._specs = list(specs)
        self._annotations = {spec.name: spec.annotations for spec in specs}
        self._screen(self._specs)
        tools, self.raw_names = build_tools(
            self.server,
            self.prefix,
            specs,
            self._make_invoke,
            self._renderer,
            reported=self._duplicates_reported,
            server_name=self.name,
            withheld=self._withheld,
        )
        self._callable = frozenset(self.raw_names.values())
        return tools

    def _make_invoke(self, tool_name: str) -> Any:
        # Not a coroutine function: it returns the call's own coroutine (lovia
        # awaits what invoke returns), so no frame of its own stays on the
        # call's path while it waits.
        def invoke(args: dict[str, Any], ctx: RunContext[Any]) -> Awaitable[MCPToolResult]:
            timeout = self.server.timeout
            if timeout is None:
                timeout = getattr(getattr(ctx, "agent", None), "default_tool_timeout", None)
            # Rendered by the default renderer: only what the cap shows need cross.
            cap = None if self.server.result_renderer else output_cap(self.server.max_output_chars, ctx)
            return self._call_tool(tool_name, args, timeout, cap, None)

        return invoke

    # -- calls --------------------------------------------------------------- #
    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        listener: Listener | None = None,
    ) -> MCPToolResult:
        """Call a tool by its raw name, with ``timeout`` seconds to answer.

        The deadline goes with the call: the worker cancels it there and
        applies ``on_timeout`` (an ``MCPError`` of kind ``timeout`` when the
        caller did not cancel first; lovia's ``run_tool`` usually does, with
        the same timeout, and reports lovia's own timeout error).
        ``listener`` hears the call's progress while it runs (the gateway
        relays it to its client: :mod:`..client.relay`).
        """
        return await self._call_tool(name, arguments, timeout, None, listener)

    def _call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        timeout: float | None,
        cap: int | None,
        listener: Listener | None,
    ) -> Awaitable[MCPToolResult]:
        """The call's coroutine (awaited by the caller: no frame of its own on the call's path)."""
        if name not in self._callable:
            # A run that began before the tool changed still holds the old
            # Tool; by name, too, only a tool the listing offers is called.
            raise self._not_callable(name)
        body = _encode_arguments(name, arguments or {})
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
        if not tracing.enabled():  # the common case, kept free of the span's context managers
            return self._call(name, body, timeout, None, cap, listener)
        return self._traced_call(name, body, timeout, cap, listener)

    async def _traced_call(
        self, name: str, body: bytes, timeout: float | None, cap: int | None, listener: Listener | None
    ) -> MCPToolResult:
        with self.core.operation("tools/call", name) as op:
            if op is not None:
                op.deadline = {"lovia_mcp.timeout_s": timeout, "lovia_mcp.on_timeout": self.server.on_timeout}
            result = await self._call(name, body, timeout, op, cap, listener)
            if op is not None:
                if result.usage is not None:
                    op.usage(result.usage)
                if result.is_error:
                    op.fail("tool_error")
            return result

    async def _call(
        self,
        name: str,
        body: bytes,
        timeout: float | None,
        op: tracing.Operation | None,
        cap: int | None,
        listener: Listener | None = None,
    ) -> MCPToolResult:
        # The deadline runs from here (lovia's wait_for wraps this call): time
        # spent replacing a worker or on a first attempt counts.
        if timeout is None:
            deadline = backstop = None
        else:
            deadline = time.monotonic() + timeout
            backstop = client_core.backstop(timeout, self.server.kill_grace)
        # A partial, not a closure: a closure's variables are cells, each one
        # more object for the collector per call in flight.
        make = functools.partial(_call_message, name, body, deadline, None if op is None else op.trace, cap)
        retried = False
        while True:
            if self.core.closed:
                self._check_open(name)
            # Cancelled (lovia's wait_for at the deadline, say), the request
            # tells the span what the worker made of the cancel.
            reply = await self.core.request(make, tool=name, backstop=backstop, op=op, listener=listener)
            if type(reply) is Result:
                structured = None if reply.structured_content is None else _json_decode(reply.structured_content)
                meta = None
                if reply.denied:
                    meta = {DENIED_META: [denial_meta(d) for d in reply.denied]}
                    if op is not None:
                        op.denied(reply.denied)
                # The decoded list itself: nothing else holds it.
                return MCPToolResult(
                    content=reply.content,
                    is_error=reply.is_error,
                    structured_content=structured,
                    cap=cap,
                    omitted=reply.omitted,
                    usage=reply.usage,
                    meta=meta,
                )
            assert isinstance(reply, Failure)
            if retry(
                reply,
                policy=self.server.auto_reconnect,
                annotations=self._annotations.get(name),
                retried=retried,
                server=self.name,
                tool=name,
            ):
                retried = True
                if op is not None:
                    op.event(tracing.EVENT_RETRY, {"lovia_mcp.reason": reply.text()})
                continue
            raise self._error(reply, name)

    async def _ask(self, make: Any, op: tracing.Operation | None = None) -> WorkerMessage:
        """A request that is not a call: its failure raised as the lovia error, never retried."""
        self._check_open(None)
        reply = await self.core.request(make, op=op)
        if isinstance(reply, Failure):
            raise self._error(reply, None)
        return reply

    def _not_callable(self, name: str) -> MCPError:
        """The refusal of a call of ``name``, outside :attr:`callable_names`."""
        if name in self._withheld:
            return MCPError(
                f"MCP tool {name!r} is quarantined: {self.drift[name].reason()}",
                hint=f"Review it with '{self._lock_command('check')}', then accept it with "
                f"'{self._lock_command('lock --update')}'.",
                tool_name=name,
            )
        # One answer whether the server lists the name or not: the filters
        # are the config's, and what they hide is not called.
        return MCPError(
            f"MCP tool {name!r} is not a tool of server {self.name!r}",
            hint="Call a tool by the raw name tools() gives it (MCPTool.raw_name); include_tools and "
            "exclude_tools decide which of the server's tools those are.",
            tool_name=name,
            kind=UNKNOWN_TOOL_KIND,
        )

    def _check_open(self, tool_name: str | None) -> None:
        if self.core.closed:
            raise MCPError(
                "MCP connection is closed.",
                hint="Open it per run, or keep it alive with 'async with server.session()'.",
                tool_name=tool_name,
            )

    def _error(self, failure: Failure, tool_name: str | None) -> Exception:
        return to_error(failure, tool_name, self.name)

    # -- the relay ------------------------------------------------------------ #
    async def relay(
        self,
        method: str,
        params: bytes | None = None,
        *,
        timeout: float | None = None,
        listener: Listener | None = None,
    ) -> Relayed:
        """Send the server request ``method`` with ``params`` (a JSON object's bytes) as they are: its raw answer.

        Not retried (a request of another kind may not be safe to repeat); a
        server gone, the circuit open or ``timeout`` passed raise the
        ``MCPError``; the server's own JSON-RPC error is the answer's
        ``error``. ``listener`` hears the notifications attributed to it.
        """
        self._check_open(None)
        request = self.core.request(lambda i: Relay(id=i, method=method, params=params), listener=listener)
        try:
            reply = await (request if timeout is None else asyncio.wait_for(request, timeout))
        except asyncio.TimeoutError:
            raise MCPError(
                f"MCP server {self.name!r} did not answer {method} within {timeout:g} s",
                hint="Retry, or raise the server's timeout.",
                kind="timeout",
            ) from None
        if isinstance(reply, Failure):
            raise self._error(reply, None)
        assert isinstance(reply, Relayed)
        return reply

    @property
    def on_notification(self) -> Callable[[str, bytes | None], None] | None:
        """Hears the server's notifications (method, params as raw JSON) attributed to no request (``relay=True``)."""
        return self.core.on_notification

    @on_notification.setter
    def on_notification(self, listener: Callable[[str, bytes | None], None] | None) -> None:
        self.core.on_notification = listener

    @property
    def server_capabilities(self) -> dict[str, Any]:
        """The server's capabilities as it declared them at open (empty when it said none)."""
        raw = self.core.capabilities
        if raw is None:
            return {}
        try:
            value = _json_decode(raw)
        except msgspec.DecodeError:
            return {}
        return value if isinstance(value, dict) else {}

    # -- open, stats, close -------------------------------------------------- #
    async def connect(self) -> None:
        """Open: start the worker and the server, list the tools; closes what it started on failure.

        A locked package server's cache entry is checked against its lock
        first: every open that starts one from the cache checks it (a warm
        spare's too, in the background; taking a spare starts nothing), and
        the worker then checks the tree's stamp before every start.
        """
        locked = self.server.locked
        try:
            if locked is not None and locked.entry is not None and locked.entry.package is not None:
                sealed = await asyncio.to_thread(packages.verify, locked.entry.package, self.server.name, locked)
                self.core.spec = msgspec.structs.replace(self.core.spec, sealed=sealed)
            failed = await self.core.connect()
        except BaseException:
            await self.close()
            raise
        if failed is not None:
            await self.close()
            raise self._error(failed, None)
        self._tell_drift()

    def _lock_command(self, verb: str) -> str:
        locked = self.server.locked
        return f"lovia-mcp {verb}" if locked is None else locked.command(verb, self.server.name)

    async def check(self, wait: float) -> bool:
        """Whether the worker and its server still serve, as the worker last told.

        The worker reports its server's end (``Ended``) and the agent sees its
        pipe close, so with nothing unread from it that is current and no
        round trip is needed. With something unread, one ``GetStats`` round
        trip, bounded by ``wait``, comes back after it.
        """
        if not self.core.usable:
            return False
        channel = self.core.channel
        if channel is not None and not channel.unread():
            return self.core.server_pid is not None
        try:
            stats = await asyncio.wait_for(self.stats(), wait)
        except (MCPError, asyncio.TimeoutError):
            return False
        return stats.server_pid is not None and self.core.channel is channel and self.core.usable

    async def stats(self) -> Stats:
        """Counters and the server tree's usage: one round trip to the worker.

        ``restarts`` counts server restarts and worker replacements over the
        connection's life (the agent's circuit counts both); ``last_restart_reason``
        is the latest's. A replaced worker's own counters (calls, errors,
        timeouts) start anew.
        """
        reply = await self._ask(lambda i: GetStats(id=i))
        assert isinstance(reply, StatsReply)
        circuit = self.core.circuit
        return msgspec.structs.replace(
            reply.stats,
            restarts=circuit.restarts,
            last_restart_reason=circuit.last_restart_reason,
            quarantined=tuple(self.quarantined),
        )

    async def close(self) -> None:
        """Stop the server tree and the worker, and wait until they are gone; shielded and bounded."""
        await self.core.close()

    def close_soon(self) -> asyncio.Future[None]:
        """Start :meth:`close` and return at once (a run's end); the future ends when it is done.

        From now on the connection refuses calls; calls already in flight
        get their answer or a ``closed`` error. ``MCP.aclose()``,
        ``close_spares()`` and the event loop's end wait for the rest.
        """
        return self.core.close_soon()


def _encode_arguments(name: str, arguments: dict[str, Any]) -> bytes:
    """The call's arguments as JSON, a lone surrogate in any string replaced by U+FFFD.

    Models emit lone surrogates (``"\\ud800"``: half of an emoji's escaped
    pair); they have no UTF-8 form, so the encoder refuses the whole call.
    Replaced, the call goes through with the character that stands for what
    could not be read, as the worker does with a server's lone surrogates;
    refused, the model would get an error about something it cannot see and
    most likely send it again. Both isolation modes, and the gateway's calls,
    come through here (the gateway repairs nothing itself); arguments without
    one pay nothing.
    """
    try:
        return _json_encode(arguments)
    except UnicodeEncodeError:
        pass
    try:
        return _json_encode(_surrogates_replaced(arguments))
    except UnicodeEncodeError as exc:  # a string inside an object that is not JSON (a dataclass...)
        raise MCPError(
            f"MCP tool {name!r} failed: its arguments hold text with no UTF-8 form ({exc.reason})",
            hint="Pass the arguments as plain JSON values (dicts, lists, strings, numbers).",
            tool_name=name,
        ) from None


def _surrogates_replaced(value: Any) -> Any:
    """A copy of ``value`` whose strings (keys too) have every lone surrogate replaced by U+FFFD.

    Walked without recursion: arguments may nest as deep as the encoder
    takes, which is deeper than a recursive walk here could go.
    """
    todo: list[tuple[Any, Any]] = []  # (container, its copy still to fill)

    def fixed(item: Any) -> Any:
        if isinstance(item, str):
            # UTF-16 keeps a pair of surrogates as the one character it
            # spells and decodes a lone one as U+FFFD.
            return item.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        copy: dict[Any, Any] | list[Any]
        if isinstance(item, dict):
            copy = {}
        elif isinstance(item, (list, tuple)):
            copy = []
        else:
            return item
        todo.append((item, copy))
        return copy

    root = fixed(value)
    while todo:
        source, copy = todo.pop()
        if isinstance(copy, dict):
            for key, item in source.items():
                copy[fixed(key) if isinstance(key, str) else key] = fixed(item)
        else:
            copy.extend(fixed(item) for item in source)
    return root


def _call_message(
    name: str, body: bytes, deadline: float | None, trace: dict[str, str] | None, keep: int | None, rid: int
) -> CallTool:
    """The call's request; the time left to its deadline is taken as it is made."""
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    return CallTool(id=rid, name=name, arguments=body, timeout=left, trace=trace, keep=keep)


def _renderer(server: ServerConfig) -> Any:
    # lovia's plugin hands a custom renderer the SDK's models: so do we.
    return with_sdk_models(server.result_renderer) if server.result_renderer else default_renderer


__all__ = ["ARGUMENTS_CAP", "UNKNOWN_TOOL_KIND", "MCPConnection"]
