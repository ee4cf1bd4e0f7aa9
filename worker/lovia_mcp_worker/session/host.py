"""The session host: one server connection's requests in, answers out.

The agent's requests (:data:`~lovia_mcp_worker.wire.messages.AgentMessage`) come
in through :meth:`Host.handle` and are answered through ``emit``. The same
code runs inside a worker process (``isolation="process"``) and inside the
agent process (``isolation="none"``); only the channel differs.

The host dispatches; each job is a class of its own (the package's
``__init__`` has the layout): :class:`.generations.Generations` (start,
serve, retire, the standby's promotion, the cancel grace),
:class:`.deadline.Deadlines` (each call's deadline and what passing it
does), :class:`.calls.Calls` (the requests in flight),
:class:`.scope.CallScope` (what one call owns on its server: its
accounting and denials windows, its progress, its cut).

The relay (``ServerSpec.relay``, a gateway's connection): a ``Relay`` is
served like a call without its policing (no deadline of its own, no
accounting): its raw params to the serving generation's server, the raw
answer back. A notification the server sends besides progress and
tool-list changes goes to the agent as a ``ServerNotification``,
attributed to the request in flight on that generation when it came, if
there was exactly one (the only tie stdio and HTTP give between the two).
A request the server sends (sampling, elicitation, roots: stdio only) goes
to the agent as a ``ServerRequest`` attributed the same way, under a number
of the worker's own; the agent's ``ServerReply`` is written back to the
server as its answer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

from ..wire import failures
from ..wire.failures import HostError
from ..wire.messages import (
    PROTOCOL_VERSION,
    AgentMessage,
    CallTool,
    Cancel,
    Close,
    Closed,
    Failure,
    GetStats,
    ListTools,
    Log,
    Open,
    Relay,
    Relayed,
    ServerNotification,
    ServerReply,
    ServerRequest,
    Stats,
    StatsReply,
    WorkerMessage,
)
from .accounting import Accounting
from .calls import Calls
from .deadline import Deadlines
from .denials import Attribution
from .generation import Generation
from .generations import Generations
from .scope import CallScopes


class Host:
    """Serves one connection's requests; replies through ``emit``."""

    def __init__(self, emit: Callable[[WorkerMessage], None], *, subreaper: bool) -> None:
        self._emit = emit
        accounting = Accounting()
        denials = Attribution(self._log)
        self.generations = Generations(emit, subreaper=subreaper, accounting=accounting, denials=denials)
        self._scopes = CallScopes(emit, accounting, denials, self.generations.listing)
        self.generations.on_notification = self._notified
        self.generations.on_request = self._requested
        # The server's requests waiting for the agent's ServerReply, by the worker's number for them.
        self._asked: dict[int, asyncio.Future[tuple[bytes | None, bytes | None]]] = {}
        self._asking = itertools.count(1)
        # Set once the open's server is launched, or the open is over: the
        # worker makes its agent's transport then (main.serve).
        self.launched = self.generations.launched
        self._calls = Calls()
        self._deadlines = Deadlines(self._calls, self.generations.retire, self.generations.probe)
        self._created = time.monotonic()
        self._closing = False
        # The close under way or done (its result: whether it finished): the
        # agent's Close and the worker's end both ask for it, and it runs once.
        self._close: asyncio.Future[bool] | None = None
        self.calls = 0
        self.errors = 0

    @property
    def in_flight(self) -> int:
        """Requests being served (a request's task counts until it has answered)."""
        return len(self._calls.tasks)

    # -- dispatch ------------------------------------------------------------ #
    def handle(self, msg: AgentMessage) -> None:
        """Start handling one request; never blocks."""
        if type(msg) is CallTool and not self._closing:  # most requests: straight to their task
            self._calls.tasks[msg.id] = asyncio.get_running_loop().create_task(self._serve_call(msg))
            if msg.timeout is not None:
                self._deadlines.add(msg.id, msg.timeout)
            return
        if isinstance(msg, Cancel):
            self._cancel(msg)
            return
        if isinstance(msg, ServerReply):
            waiting = self._asked.pop(msg.id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result((msg.result, msg.error))
            return
        if isinstance(msg, GetStats):
            try:
                reply: WorkerMessage = StatsReply(id=msg.id, stats=self.stats())
            except Exception as exc:  # noqa: BLE001 - a bug in a figure must not end the worker (this runs in its reader)
                self.generations.log(logging.ERROR, f"internal error reading stats: {exc!r}")
                reply = Failure(id=msg.id, kind="internal", message=f"stats failed: {type(exc).__name__}: {exc}")
            self._emit(reply)
            return
        if self._closing and not isinstance(msg, Close):
            self._emit(failures.closed("the connection is closing").failure(msg.id))
            return
        self._calls.tasks[msg.id] = asyncio.get_running_loop().create_task(self._serve(msg))

    async def _serve(self, msg: AgentMessage) -> None:
        """Serve a request other than a call (see :meth:`_serve_call`)."""
        try:
            if isinstance(msg, Open):
                try:
                    self._open(msg)
                    opened = await self.generations.opened(msg)
                finally:
                    self.launched.set()
                self._emit(opened)
            elif isinstance(msg, ListTools):
                self._emit(await self.generations.listed(msg))
            elif isinstance(msg, Relay):
                self._emit(await self._relay(msg))
            elif isinstance(msg, Close):
                await self.aclose()
                self._emit(Closed(id=msg.id))
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - answered, or re-raised, by _failed
            self._failed(msg, exc)
        finally:
            self._calls.tasks.pop(msg.id, None)

    async def _serve_call(self, msg: CallTool) -> None:
        """Serve a tools/call: its task's own coroutine, from receipt to answer.

        The call's body is here, not in a coroutine of its own under
        :meth:`_serve`: every coroutine between the task and the session's
        is made once per call and resumed once per answer.
        """
        try:
            gen = self.generations.current
            if not self.generations.ready(gen):
                gen = await self.generations.live()  # only then: a coroutine awaited per call is one more frame
            assert gen is not None and gen.session is not None
            scopes = self._scopes
            if scopes.waiting:  # the sandbox's deny-all listener is not made yet: not before it
                await scopes.settled()
            self.calls += 1
            self._calls.on[msg.id] = gen
            scope = scopes.open(msg, gen)
            try:
                content, is_error, structured = await gen.session.call(
                    msg.name, msg.arguments, scope.progress, msg.trace
                )
                if scope.relisting():
                    # A list_changed the server sent before this answer is sent first.
                    await scope.relisted()
            finally:
                self._calls.on.pop(msg.id, None)
                scope.end()
            self._emit(scope.result(content, is_error, structured))
            scope.answered()
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - answered, or re-raised, by _failed
            self._failed(msg, exc)
        finally:
            self._calls.tasks.pop(msg.id, None)
            self._deadlines.forget(msg.id)

    async def _relay(self, msg: Relay) -> Relayed:
        """A relayed request on the serving generation: the server's raw answer."""
        gen = await self.generations.live()
        assert gen.session is not None
        self._calls.on[msg.id] = gen
        try:
            result, error = await gen.session.relay(msg.method, msg.params)
        finally:
            self._calls.on.pop(msg.id, None)
        return Relayed(id=msg.id, result=result, error=error)

    def _notified(self, gen: Generation, method: str, params: bytes | None) -> None:
        """A notification of ``gen``'s server, attributed to the one request in flight on it (if only one is)."""
        on = [rid for rid, where in self._calls.on.items() if where is gen]
        self._emit(ServerNotification(method=method, params=params, call=on[0] if len(on) == 1 else None))

    async def _requested(self, gen: Generation, method: str, params: bytes | None) -> tuple[bytes | None, bytes | None]:
        """A request of ``gen``'s server, to the agent (attributed as :meth:`_notified` attributes): its answer."""
        on = [rid for rid, where in self._calls.on.items() if where is gen]
        number = next(self._asking)
        waiting: asyncio.Future[tuple[bytes | None, bytes | None]] = asyncio.get_running_loop().create_future()
        self._asked[number] = waiting
        try:
            self._emit(ServerRequest(id=number, method=method, params=params, call=on[0] if len(on) == 1 else None))
            return await waiting
        finally:
            self._asked.pop(number, None)

    def _failed(self, msg: AgentMessage, exc: BaseException) -> None:
        """Answer ``msg``, whose serving raised ``exc`` (re-raised when the caller is not to be told)."""
        if isinstance(exc, HostError):
            if isinstance(msg, CallTool):
                self.errors += 1
            self._emit(exc.failure(msg.id))
        elif isinstance(exc, asyncio.CancelledError):
            timed_out = self._deadlines.answer(msg.id, msg.timeout) if isinstance(msg, CallTool) else None
            if timed_out is None:
                raise exc  # a plain cancel, or the host closing: the caller is not waiting
            self._emit(timed_out.failure(msg.id))
        else:  # a worker bug must still answer the request
            self.generations.log(logging.ERROR, f"internal error serving {type(msg).__name__}: {exc!r}")
            self._emit(Failure(id=msg.id, kind="internal", message=f"{type(exc).__name__}: {exc}"))

    def _open(self, msg: Open) -> None:
        if msg.protocol != PROTOCOL_VERSION:
            raise failures.wire_mismatch(PROTOCOL_VERSION, msg.protocol)
        self.generations.spec = self._deadlines.spec = self._scopes.spec = msg.spec
        self.generations.open_trace = msg.trace
        self._created = time.monotonic()  # uptime counts from the open (an idle worker made this host ahead)

    def _cancel(self, msg: Cancel) -> None:
        task = self._calls.tasks.get(msg.id)
        if task is None or task.done() or self._deadlines.cancelled(msg.id):
            return  # answered, or its timeout (applied and answered by the deadline)
        # A plain cancel abandons the request: the JSON-RPC client sends the
        # server notifications/cancelled; the server gets its cancel grace.
        if msg.answer:
            self._emit(Failure(id=msg.id, kind="cancelled", message="the caller cancelled the request"))
        gen = self._calls.on.get(msg.id)
        if self._calls.cancel(msg.id, task):
            self._deadlines.forget(msg.id)
        spec = self.generations.spec
        if spec is not None:
            self.generations.probe(gen, spec.kill_grace)

    # -- stats, logs, close -------------------------------------------------- #
    def _log(self, level: int, message: str) -> None:
        self._emit(Log(level=level, message=message))

    def stats(self) -> Stats:
        uptime = time.monotonic() - self._created
        return self.generations.stats(self.calls, self.errors, self._deadlines.timeouts, uptime)

    async def aclose(self) -> None:
        """Stop the server tree (bounded) and fail what is still in flight; once, however often asked.

        A second caller waits for the first; if the first was cancelled
        before the end, the next caller closes again.
        """
        while (under_way := self._close) is not None:
            if await asyncio.shield(under_way):
                return
        done = self._close = asyncio.get_running_loop().create_future()
        finished = False
        try:
            await self._aclose()  # in the caller's task: it is spared the cancelling of the calls
            finished = True
        finally:
            if not finished:
                self._close = None
            done.set_result(finished)

    async def _aclose(self) -> None:
        self._closing = self.generations.closing = True
        self._deadlines.stop()
        for rid, task in list(self._calls.tasks.items()):
            if task is not asyncio.current_task() and self._calls.cancel(rid, task):
                self._deadlines.forget(rid)
        await self.generations.aclose()


__all__ = ["Host", "HostError"]
