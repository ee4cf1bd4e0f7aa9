"""The client core: one connection's requests to its worker, each job done once.

It owns request ids and their futures, the channel (a worker process, or
the in-process host) and its replacement after a loss, the dispatch of what
the worker sends, the clean-up after a lost worker, and the restart circuit
(:mod:`.circuit`). A request ends in a value: the worker's answer, or a
:class:`~lovia_mcp_worker.wire.messages.Failure` (the worker's, or one the core
makes: ``worker_died``, ``circuit_open``, ``closed``). Nothing here raises to
steer control; the caller turns a failure into an error in one place
(:mod:`..connection._errors`) and decides a retry in one place (:mod:`.retry`).

What the worker owns, the core is told and applies: a call's deadline and
what passing it does (the call carries its deadline; the answer's kind says
it timed out), the tool list (``Opened``, ``Tools``, ``ToolsChanged``), the
server's pid. The agent keeps only its stuck-worker backstop
(:data:`STUCK_WORKER_BACKSTOP`): a worker that never answers at all is given up.

Lifecycle: :meth:`ClientCore.connect` starts a channel and waits for
``Opened``; a lost worker is replaced on the next request (a restart for
the circuit); :meth:`ClientCore.close` is bounded and shielded;
:meth:`ClientCore.close_soon` starts the same close and leaves its end to
a background task (:mod:`.closing`), so a run's end does not wait for a
server's death.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

import msgspec
from lovia_mcp_worker.wire.framing import frame_cap
from lovia_mcp_worker.wire.mcpjson import ToolSpec
from lovia_mcp_worker.wire.messages import (
    MCP_MODERN_VERSIONS,
    AgentMessage,
    Cancel,
    Close,
    Ended,
    Failure,
    GetStats,
    Log,
    Open,
    Opened,
    Progress,
    Result,
    ServerNotification,
    ServerReply,
    ServerRequest,
    ServerSpec,
    Started,
    Tools,
    ToolsChanged,
    WorkerMessage,
)
from lovia_mcp_worker.wire.timers import TimerHeap

from .. import tracing
from ..config._isolation import Isolation
from . import closing
from .circuit import RestartCircuit
from .relay import Listener
from .retry import ENDED
from .worker_link import LocalChannel, ProcessChannel

logger = logging.getLogger("lovia_mcp")
# MCP progress of running calls: one INFO record per update (the worker
# coalesces them), with ``server``, ``tool``, ``progress``, ``total`` and
# ``progress_message`` (the server's own text, or None).
progress_logger = logging.getLogger("lovia_mcp.progress")

# Bound on a close: the worker's own tree kill is bounded below this.
CLOSE_WAIT: Final = 8.0
# The stuck-worker backstop: how long past a call's deadline (and its kill
# grace) the agent waits for the worker's answer before it gives the worker
# up. The worker holds the deadline and answers at it; only a worker whose
# own loop is stuck misses it by this much, and then nothing else it owes
# will come either. Not a second deadline: the call's is the worker's.
STUCK_WORKER_BACKSTOP: Final = 10.0
# How long a cancelled traced call waits for the worker's word on it (was it
# the timeout?) before its cancellation goes on: the answer takes one round
# trip (well under a millisecond); a stuck worker only delays the
# cancellation by this much, and its span then ends without the word.
VERDICT_WAIT: Final = 1.0
# JSON-RPC's codes for a server's request the relay refuses (no client to ask), or whose answer failed.
METHOD_NOT_FOUND: Final = -32601
INTERNAL_ERROR: Final = -32603
_json_encode = msgspec.json.encode

Channel = ProcessChannel | LocalChannel
OnTools = Callable[[list[ToolSpec], bool], None]


def backstop(timeout: float, kill_grace: float) -> float:
    """Seconds after which a call with ``timeout`` whose worker has not answered is given up (a stuck worker)."""
    return timeout + kill_grace + STUCK_WORKER_BACKSTOP


class ClientCore:
    """Requests to one server's session host, over a channel the core replaces when it is lost.

    ``on_tools(tools, changed)`` is called with every list the worker
    announces (``changed``: unsolicited, a ``ToolsChanged``).
    """

    def __init__(self, spec: ServerSpec, isolation: Isolation, circuit: RestartCircuit, on_tools: OnTools) -> None:
        self.spec = spec
        self.isolation = isolation
        self.circuit = circuit
        self._on_tools = on_tools
        self._channel: Channel | None = None
        self._starting: asyncio.Task[Failure | None] | None = None
        self._pending: dict[int, asyncio.Future[WorkerMessage]] = {}
        self._ids = itertools.count(1)
        # Request id of each tools/call in flight -> its raw tool name (progress).
        self._calls: dict[int, str] = {}
        # Request id -> the caller's ears (:mod:`.relay`), for requests given one.
        self._listeners: dict[int, Listener] = {}
        # The answers to the server's own requests being awaited (held: the loop keeps weak references).
        self._replying: set[asyncio.Task[None]] = set()
        # Hears the server's notifications attributed to no request (``spec.relay``).
        self.on_notification: Callable[[str, bytes | None], None] | None = None
        # The server's capabilities as its open answered them (raw JSON; None: not told).
        self.capabilities: bytes | None = None
        self.closed = False
        # As the worker last reported them (the worker owns both).
        self.server_pid: int | None = None
        # The current worker's serving generation as last told (Opened,
        # Started), and the newest of its generations the circuit counted.
        self._generation = 0
        self._counted = 1
        # A channel was started before: every later one is a restart.
        self._had_channel = False
        self.worker_restarts = 0
        # Closes of given-up channels under way (asyncio keeps only weak references).
        self._closing: set[asyncio.Future[None]] = set()
        # This connection's own close, once started (close_soon).
        self._close_task: asyncio.Task[None] | None = None
        self._server_log = logging.getLogger(f"lovia_mcp.server.{spec.name}")
        # Spans of the operations in flight (what the worker reports becomes
        # their events), and the MCP protocol version the server speaks.
        self.ops: set[tracing.Operation] = set()
        self.protocol_version: str | None = None
        # The server's ttlMs for the listing (seconds; None: no limit) and
        # when it was received: a warm spare re-lists once it has expired.
        self.listing_ttl: float | None = None
        self.listed_at = time.monotonic()
        # Backstops of the requests in flight that have one, on one timer.
        self._backstops = TimerHeap()

    # -- what callers may read ------------------------------------------------- #
    @property
    def channel(self) -> Channel | None:
        return self._channel

    @property
    def worker_pid(self) -> int | None:
        ch = self._channel
        return ch.pid if ch is not None and self.isolation == "process" else None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    @property
    def usable(self) -> bool:
        """Open, with a live worker whose server is not known to need a restart."""
        ch = self._channel
        return not self.closed and ch is not None and ch.alive and not self.circuit.needs_restart

    # -- spans --------------------------------------------------------------- #
    @contextlib.contextmanager
    def operation(self, method: str, target: str | None = None) -> Iterator[tracing.Operation | None]:
        """The span of one MCP operation (:mod:`lovia_mcp.tracing`); ``None`` inside without OpenTelemetry."""
        with tracing.operation(
            method,
            target,
            **{
                "network.transport": tracing.NETWORK_TRANSPORT.get(self.spec.transport),
                "mcp.protocol.version": self.protocol_version,
                "lovia_mcp.server.name": self.spec.name,
                **tracing.server_address(self.spec.url),
            },
        ) as op:
            if op is None:
                yield None
                return
            self.ops.add(op)
            try:
                yield op
            finally:
                self.ops.discard(op)

    # -- requests ------------------------------------------------------------ #
    async def connect(self) -> Failure | None:
        """Start the channel and wait for ``Opened``; the failure if it could not."""
        ready = await self._ready()
        return ready if isinstance(ready, Failure) else None

    async def request(
        self,
        make: Callable[[int], AgentMessage],
        *,
        tool: str | None = None,
        backstop: float | None = None,
        op: tracing.Operation | None = None,
        listener: Listener | None = None,
    ) -> WorkerMessage:
        """Send ``make(id)`` and return the answer or a failure; cancelling sends ``Cancel``.

        ``tool``: a tools/call's raw name (for progress records). ``listener``:
        hears what the worker tells of the request while it runs (its
        progress: :mod:`.relay`). ``backstop``:
        seconds after which a worker that has not answered is given up
        (:func:`backstop`). ``op``: the operation's span, which gets the
        request id and the failure; a traced request that is cancelled
        waits (up to :data:`VERDICT_WAIT`) for the worker's word on it,
        so its span says whether the cancel was the call's timeout.

        Every coroutine between a caller and its answer is made once per
        call and resumed once per answer: the path holds this one and no
        other (no ``wait_for``: the backstop is :meth:`_backstop`'s timer).
        """
        if self.closed:
            return _failed(Failure(id=0, kind="closed", message="the connection is closed"), op)
        rid = next(self._ids)
        msg = make(rid)
        # Stats start no server: they answer while the circuit is open (and say why).
        if self.circuit.needs_restart and not isinstance(msg, GetStats):
            refused = self.circuit.check(self.spec.name)
            if refused is not None:
                return _failed(refused, op)
        channel = self._channel
        if channel is None or not channel.alive or channel.reporting:
            ready = await self._ready()
            if isinstance(ready, Failure):
                return _failed(ready, op)
            channel = ready
        fut: asyncio.Future[WorkerMessage] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if tool is not None:
            self._calls[rid] = tool
        if listener is not None:
            self._listeners[rid] = listener
        if op is not None:
            op.set("jsonrpc.request.id", rid)
        # Other requests in flight: this one may go in one write with theirs.
        channel.send(msg, hold=len(self._pending) > 1)
        if backstop is not None:
            self._backstop(rid, backstop, channel)
        try:
            reply = await fut
        except asyncio.CancelledError:
            if channel.alive and rid in self._pending:
                if op is not None:
                    await self._verdict(rid, channel, op)
                else:
                    del self._pending[rid]
                    channel.send(Cancel(id=rid))
            raise
        finally:
            self._pending.pop(rid, None)
            self._backstops.forget(rid)
            self._calls.pop(rid, None)
            if listener is not None:
                self._listeners.pop(rid, None)
        if isinstance(reply, Failure):
            if reply.kind in ENDED:
                self.circuit.ended(reply.text())
            if op is not None:
                op.failure(reply)
        return reply

    async def _verdict(self, rid: int, channel: Channel, op: tracing.Operation) -> None:
        """Cancel request ``rid`` and wait (bounded) for the worker's word: a timeout fails ``op`` as one.

        The worker decides whether a cancel is the call's timeout; asked,
        it answers a plain cancel too (kind ``cancelled``), so no wait here
        outlasts one round trip unless the worker is stuck.
        """
        # The request's own future went with the cancel: the answer comes here.
        fut: asyncio.Future[WorkerMessage] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        channel.send(Cancel(id=rid, answer=True))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((fut,), timeout=VERDICT_WAIT)
        if fut.done() and not fut.cancelled():
            reply = fut.result()
            if type(reply) is Failure and reply.kind == "timeout":
                op.failure(reply)

    # -- the stuck-worker backstop ------------------------------------------- #
    def _backstop(self, rid: int, seconds: float, channel: Channel) -> None:
        """Give the worker up if request ``rid`` is not answered within ``seconds``.

        One timer for the whole connection, armed for the earliest backstop
        (:class:`~lovia_mcp_worker.wire.timers.TimerHeap`, the worker's
        deadlines' too): a call whose backstop falls after it costs a heap
        push and no timer.
        """
        when = asyncio.get_running_loop().time() + seconds
        self._backstops.add(rid, when, functools.partial(self._backstop_due, seconds, channel))

    def _backstop_due(self, seconds: float, channel: Channel, rid: int) -> None:
        fut = self._pending.pop(rid, None)
        if fut is None or fut.done():
            return
        why = f"the worker did not answer a call within {seconds:g} s (its timeout, kill grace and backstop)"
        self._lost(channel, why)
        fut.set_result(Failure(id=rid, kind="timeout", message=why, hint="A fresh worker serves the next call."))

    async def _ready(self) -> Channel | Failure:
        while True:
            ch = self._channel
            if ch is not None and ch.alive:
                if not ch.reporting:
                    return ch
                # Its worker is gone and the report is on its way: a request
                # sent there now would only fail with it; the next worker serves.
                await ch.dead()
                continue
            if self.closed:
                return Failure(id=0, kind="closed", message="the connection is closed")
            if self._starting is None:
                if self._had_channel:
                    # A replacement worker is a restart, also after one whose open failed.
                    refused = self.circuit.check(self.spec.name)
                    if refused is not None:
                        return refused
                self._starting = asyncio.ensure_future(self._start_channel())
                self._starting.add_done_callback(self._start_done)
            failed = await asyncio.shield(self._starting)
            if failed is not None:
                return failed

    def _start_done(self, task: asyncio.Task[Failure | None]) -> None:
        self._starting = None
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting callers

    async def _start_channel(self) -> Failure | None:
        old = self._channel
        if self._had_channel:
            self.worker_restarts += 1
            self.circuit.restarted()
            tracing.worker_restarted(self.ops, self.circuit.last_restart_reason)
        self._had_channel = True
        if old is not None:
            await old.aclose()
        # A fresh worker numbers its generations from 1 (its open's, counted above).
        self._generation, self._counted = 0, 1
        with self.operation("initialize") as op:
            return await self._open_channel(op)

    async def _open_channel(self, op: tracing.Operation | None) -> Failure | None:
        channel: Channel
        if self.isolation == "process":
            # The largest frame this worker may send: never allocate past it.
            channel = ProcessChannel(frame_cap(self.spec.limits.max_result_bytes))
        else:
            channel = LocalChannel()

        def lost(why: str) -> None:
            self._lost(channel, why)

        rid = next(self._ids)
        fut: asyncio.Future[WorkerMessage] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if op is not None:
            op.set("jsonrpc.request.id", rid)
        try:
            # The Open goes with the start: an idle worker finds it as it wakes.
            await channel.start(
                self._dispatch, lost, Open(id=rid, spec=self.spec, trace=None if op is None else op.trace)
            )
            self._channel = channel
            reply = await fut
        finally:
            self._pending.pop(rid, None)
        if isinstance(reply, Failure):
            if op is not None:
                op.failure(reply)
            self.circuit.ended(reply.text())  # why the next worker is started, if one is
            self._channel = None
            await self._close_channel(channel)
            return reply
        assert isinstance(reply, Opened)
        await channel.started()  # its pid is known (it came while the server started)
        self.server_pid = reply.server_pid
        self._generation = reply.generation
        self.protocol_version = reply.protocol_version
        self.capabilities = reply.capabilities
        self.listing_ttl, self.listed_at = reply.listing_ttl, time.monotonic()
        if op is not None:
            op.set("mcp.protocol.version", reply.protocol_version)
            if reply.protocol_version in MCP_MODERN_VERSIONS:
                op.rename("server/discover")  # the stateless era's open has no initialize
        self.circuit.serving()
        self._on_tools(reply.tools, False)
        logger.info(
            "%s: connected (%s isolation, worker pid %s, server pid %s)",
            self.spec.name,
            self.isolation,
            channel.pid,
            reply.server_pid,
        )
        return None

    # -- what the worker sends ----------------------------------------------- #
    def _dispatch(self, msg: WorkerMessage) -> None:
        if type(msg) is Result or type(msg) is Failure:  # a call's answer: most of what a worker sends
            fut = self._pending.pop(msg.id, None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
            return
        if isinstance(msg, Log):
            if msg.stderr:
                self._server_log.log(msg.level, "%s", msg.message)
            else:
                logger.log(msg.level, "%s: %s", self.spec.name, msg.message)
        elif isinstance(msg, ToolsChanged):
            self.listed_at = time.monotonic()  # the worker has just listed
            self._on_tools(msg.tools, True)
        elif isinstance(msg, Started):
            self.server_pid = msg.server_pid
            self._generation = msg.generation
            if msg.protocol_version is not None:
                self.protocol_version = msg.protocol_version
            self._count(msg.generation)
            self.circuit.serving()
            tracing.started(self.ops, msg, self.circuit.last_restart_reason if msg.generation > 1 else None)
        elif isinstance(msg, Ended):
            if msg.generation > self._generation:
                # Never told as serving: a start that failed. It counts, and
                # the next request needs another start (the circuit decides).
                self._count(msg.generation)
                self.circuit.ended(msg.reason)
            elif msg.generation == self._generation:
                if not msg.draining:
                    self.server_pid = None
                self.circuit.ended(msg.reason)
            tracing.ended(self.ops, msg)
        elif isinstance(msg, Progress):
            self._log_progress(msg)
            listener = self._listeners.get(msg.id)
            if listener is not None:
                try:
                    listener.progress(msg.progress, msg.total, msg.message)
                except Exception:  # noqa: BLE001 - a listener's bug must not break the worker's message loop
                    logger.exception("%s: a request's listener raised", self.spec.name)
        elif isinstance(msg, ServerNotification):
            self._notified(msg)
        elif isinstance(msg, ServerRequest):
            self._requested(msg)
        else:
            if isinstance(msg, Tools):
                self.listing_ttl, self.listed_at = msg.listing_ttl, time.monotonic()
                self._on_tools(msg.tools, False)
            fut = self._pending.pop(msg.id, None)
            if fut is not None and not fut.done():
                fut.set_result(msg)

    def _notified(self, msg: ServerNotification) -> None:
        """A server notification: to the listener of the request it is attributed to, else the connection's."""
        listener = None if msg.call is None else self._listeners.get(msg.call)
        try:
            if listener is not None:
                listener.notified(msg.method, msg.params)
            elif self.on_notification is not None:
                self.on_notification(msg.method, msg.params)
        except Exception:  # noqa: BLE001 - a listener's bug must not break the worker's message loop
            logger.exception("%s: a listener of %s raised", self.spec.name, msg.method)

    def _requested(self, msg: ServerRequest) -> None:
        """A server's own request: to the listener of the request it is attributed to, whose answer goes back;
        refused (a JSON-RPC error saying why) when there is none or it declines."""
        listener = None if msg.call is None else self._listeners.get(msg.call)
        answer = None
        try:
            answer = None if listener is None else listener.requested(msg.method, msg.params)
        except Exception:  # noqa: BLE001 - a listener's bug must not break the worker's message loop
            logger.exception("%s: a listener of %s raised", self.spec.name, msg.method)
        channel = self._channel
        if channel is None:
            return
        if answer is None:
            why = (
                f"{msg.method} is answered only for the client of the one request in flight on the server, "
                "and there was none (or several)"
            )
            channel.send(ServerReply(id=msg.id, error=_json_encode({"code": METHOD_NOT_FOUND, "message": why})))
            return

        async def reply(answer: Awaitable[tuple[bytes | None, bytes | None]] = answer) -> None:
            try:
                result, error = await answer
            except Exception as exc:  # noqa: BLE001 - the server gets an answer whatever happened
                result, error = None, _json_encode({"code": INTERNAL_ERROR, "message": f"{msg.method}: {exc}"})
            if channel.alive:
                channel.send(ServerReply(id=msg.id, result=result, error=error))

        task = asyncio.ensure_future(reply())
        self._replying.add(task)
        task.add_done_callback(self._replying.discard)

    def _count(self, generation: int) -> None:
        """Count a start of the current worker for the circuit, once however often it is told of.

        The worker's first generation is its open's: the connection's first
        start, or counted as the worker's restart (:meth:`_start_channel`).
        """
        if generation > self._counted:
            self._counted = generation
            self.circuit.restarted()

    def _log_progress(self, msg: Progress) -> None:
        tool = self._calls.get(msg.id)
        if tool is None:
            return  # the call already ended (or was abandoned)
        name = self.spec.name
        done = f"{msg.progress:g}" if msg.total is None else f"{msg.progress:g}/{msg.total:g}"
        text = f"{name}/{tool}: {done}" + (f" {msg.message}" if msg.message else "")
        progress_logger.info(
            "%s",
            text,
            extra={
                "server": name,
                "tool": tool,
                "progress": msg.progress,
                "total": msg.total,
                "progress_message": msg.message,
            },
        )

    def _lost(self, channel: Channel, why: str) -> None:
        """A worker is gone: its requests fail as ``worker_died``, the next request starts another."""
        if channel is not self._channel or self.closed:
            return
        logger.warning("%s: %s", self.spec.name, why)
        self.server_pid = None
        self.circuit.ended(why)
        if channel.alive:
            # Given up while its pipe is still open (the backstop): it goes.
            channel.abort()
            closing = asyncio.ensure_future(channel.aclose())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        pending, self._pending = self._pending, {}
        for rid, fut in pending.items():
            if not fut.done():
                fut.set_result(
                    Failure(id=rid, kind="worker_died", message=why, hint="A fresh worker serves the next call.")
                )

    # -- close --------------------------------------------------------------- #
    async def close(self) -> None:
        """Stop the server tree and the worker and wait for it (bounded, shielded).

        Requests in flight get their answer or fail as ``closed``.
        """
        await asyncio.shield(self.close_soon())

    def close_soon(self) -> asyncio.Future[None]:
        """Start the close and return at once; the returned future ends when the worker is joined.

        The connection refuses new requests from now on. The rest (the
        worker's tree kill, its exit, the join) runs in a task of
        :mod:`.closing`, which ``MCP.aclose()``, ``close_spares()`` and the
        loop's end wait for.
        """
        if self._close_task is not None:
            return self._close_task
        self.closed = True
        channel, self._channel = self._channel, None
        if self._starting is not None:
            self._starting.cancel()
        self._close_task = closing.hand_off(self._finish_close(channel))
        return self._close_task

    async def _finish_close(self, channel: Channel | None) -> None:
        try:
            if channel is not None:
                await self._close_channel(channel)
        finally:
            self._backstops.stop()
            pending, self._pending = self._pending, {}
            for rid, fut in pending.items():
                if not fut.done():
                    fut.set_result(Failure(id=rid, kind="closed", message="the connection was closed"))

    async def _close_channel(self, channel: Channel) -> None:
        cancelled = False
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
            except asyncio.CancelledError:
                # The loop is ending (asyncio.run cancels what is left, then
                # waits for it): skip the reply, but drop the pipe (the worker
                # then kills its tree) and join the worker before ending.
                cancelled = True
            finally:
                lost.cancel()
                self._pending.pop(rid, None)
        # A worker that died meanwhile left its tree to the forkserver, which
        # kills it (lovia_mcp_worker.forkserver.server): nothing of it is the agent's.
        await channel.aclose()
        if cancelled:
            raise asyncio.CancelledError


def _failed(failure: Failure, op: tracing.Operation | None) -> Failure:
    if op is not None:
        op.failure(failure)
    return failure


__all__ = ["CLOSE_WAIT", "STUCK_WORKER_BACKSTOP", "VERDICT_WAIT", "ClientCore", "backstop"]
