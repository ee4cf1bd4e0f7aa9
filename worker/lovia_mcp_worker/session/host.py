"""The session host: one server connection, supervised; request dispatch and generations.

The agent's requests (:data:`~lovia_mcp_worker.wire.messages.AgentMessage`) come
in through :meth:`Host.handle` and are answered through ``emit``. The same
code runs inside a worker process (``isolation="process"``) and inside the
agent process (``isolation="none"``); only the channel differs.

Around it (the package's ``__init__`` has the layout): :mod:`.generation`
(one server's life), :mod:`.transports` (which session speaks to it),
:mod:`.calls` (deadlines, cancels), :mod:`.standby`, :mod:`.listing`,
:mod:`.progress`; ``containment`` (each generation's tree, limits, kill).

Lifecycle: requests use the current generation, starting one on demand
(single flight). A generation ends when the server exits, passes a limit,
breaks the protocol, or a timed-out call's tree is killed; the next request
starts a fresh one at once, while the old one is torn down in the
background. Generations may overlap because each has its own tree
(:attr:`Generation.tree`): a cgroup where the worker could make one
(:mod:`..containment.cgroup`), else the psutil watch's attribution (:mod:`..containment.guard`). After
a timed-out call on_timeout="kill" retires its generation: new calls go to a
fresh server; the calls still running on the old one get its ``kill_grace``,
then fail as ``server_exited`` (the agent retries them once).

The worker holds each call's deadline and gives a server its cancel grace
(:mod:`.calls`). Restarts are counted by the agent's circuit (it alone also
sees worker deaths), told by ``Started`` and ``Ended``: every start, also
one that never served (``Ended`` of a generation never ``Started``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable

from ..containment import proctree
from ..containment.launch import LaunchError
from ..wire import failures
from ..wire.failures import HostError
from ..wire.messages import (
    ON_TIMEOUT_KILL,
    PROTOCOL_VERSION,
    AgentMessage,
    CallTool,
    Cancel,
    Close,
    Closed,
    Ended,
    Failure,
    GetStats,
    ListTools,
    Log,
    Open,
    Opened,
    Result,
    ServerSpec,
    Started,
    Stats,
    StatsReply,
    Tools,
    WorkerMessage,
)
from . import cut
from .calls import Calls
from .contain import SHUTDOWN_WAIT, Containment, session_tail
from .generation import Generation, Session, State
from .listing import Listing
from .progress import ProgressForwarder
from .standby import Standby
from .transports import Hooks, transport


class Host:
    """Serves one connection's requests; replies through ``emit``."""

    def __init__(self, emit: Callable[[WorkerMessage], None], *, subreaper: bool) -> None:
        self._emit = emit
        self._subreaper = subreaper
        self.spec: ServerSpec | None = None
        # The generation new requests use; every generation not yet down,
        # oldest first; which generation each call in flight runs on.
        self.current: Generation | None = None
        self._gens: list[Generation] = []
        self._calls = Calls(self._retire, self._wedged, self._deadline)
        self.containment = Containment(subreaper=subreaper, gens=lambda: self._gens, log=self._log)
        self._starting: asyncio.Task[Generation] | None = None
        # With spec.standby: a READY generation no request uses yet, promoted
        # when the current one ends (a restart without the start-up wait).
        self._standby = Standby(functools.partial(self._start, standby=True), self._log)
        self._generations = 0
        self._created = time.monotonic()
        # Strong references to this host's generation tasks (asyncio keeps
        # only weak ones); aclose waits for them.
        self._runners: set[asyncio.Future[None]] = set()
        self._closing = False
        # The close under way or done (its result: whether it finished): the
        # agent's Close and the worker's end both ask for it, and it runs once.
        self._close: asyncio.Future[bool] | None = None
        self.calls = 0
        self.errors = 0
        self.timeouts = 0
        self.garbage_lines = 0
        # The sandbox backend of the last generation launched (each records its own): stats between
        # generations report it.
        self._sandbox: str | None = None
        # The agent's trace context for the open's handshake (Open.trace).
        self._open_trace: dict[str, str] | None = None
        # Set once the open's server is launched, or the open is over: the
        # worker makes its agent's transport then (main.serve).
        self.launched = asyncio.Event()
        # What the agent knows of the tools; re-listing after list_changed.
        self.listing = Listing(emit, self._log, lambda: self.current)

    @property
    def in_flight(self) -> int:
        """Requests being served (a request's task counts until it has answered)."""
        return len(self._calls.tasks)

    # -- dispatch ------------------------------------------------------------ #
    def handle(self, msg: AgentMessage) -> None:
        """Start handling one request; never blocks."""
        if type(msg) is CallTool and not self._closing:  # most requests: straight to their task
            self._calls.add(msg.id, asyncio.get_running_loop().create_task(self._serve_call(msg)), msg.timeout)
            return
        if isinstance(msg, Cancel):
            self._cancel(msg)
            return
        if isinstance(msg, GetStats):
            try:
                reply: WorkerMessage = StatsReply(id=msg.id, stats=self.stats())
            except Exception as exc:  # noqa: BLE001 - a bug in a figure must not end the worker (this runs in its reader)
                self._log(logging.ERROR, f"internal error reading stats: {exc!r}")
                reply = Failure(id=msg.id, kind="internal", message=f"stats failed: {type(exc).__name__}: {exc}")
            self._emit(reply)
            return
        if self._closing and not isinstance(msg, Close):
            self._emit(failures.closed("the connection is closing").failure(msg.id))
            return
        task = asyncio.get_running_loop().create_task(self._serve(msg))
        self._calls.add(msg.id, task, None)

    async def _serve(self, msg: AgentMessage) -> None:
        """Serve a request other than a call (see :meth:`_serve_call`)."""
        try:
            if isinstance(msg, Open):
                try:
                    self._open(msg)
                    gen = await self._live()
                finally:
                    self.launched.set()
                self.listing.sent(gen.tools)
                if msg.spec.sandbox is not None:
                    self._log(logging.INFO, f"sandbox: {gen.sandbox} (asked for backend={msg.spec.sandbox.backend!r})")
                self._emit(
                    Opened(
                        id=msg.id,
                        server_pid=gen.server_pid,
                        tools=gen.tools,
                        generation=gen.number,
                        protocol_version=gen.protocol_version,
                        listing_ttl=gen.listing_ttl,
                    )
                )
            elif isinstance(msg, ListTools):
                gen = await self._live()
                assert gen.session is not None
                gen.tools = await gen.session.list_tools(msg.trace)
                self.listing.sent(gen.tools)
                self._emit(Tools(id=msg.id, tools=gen.tools, listing_ttl=gen.listing_ttl))
            elif isinstance(msg, Close):
                await self.aclose()
                self._emit(Closed(id=msg.id))
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - answered, or re-raised, by _failed
            self._failed(msg, exc)
        finally:
            self._calls.forget(msg.id)

    async def _serve_call(self, msg: CallTool) -> None:
        """Serve a tools/call: its task's own coroutine, from receipt to answer.

        The call's body is here, not in a coroutine of its own under
        :meth:`_serve`: every coroutine between the task and the session's
        is made once per call and resumed once per answer.
        """
        try:
            gen = self.current
            if gen is None or not gen.serving or self._calls.probing(gen):
                gen = await self._live()  # only then: a coroutine awaited per call is one more frame on its path
            self.calls += 1
            assert gen.session is not None
            self._calls.on[msg.id] = gen
            progress = ProgressForwarder(self._emit, msg.id)
            try:
                content, is_error, structured = await gen.session.call(msg.name, msg.arguments, progress, msg.trace)
                if self.listing.relisting(gen):
                    # A list_changed the server sent before this answer is sent first.
                    await self.listing.settled(gen)
            finally:
                self._calls.on.pop(msg.id, None)
                progress.close()  # the last progress held goes out before the answer
            omitted = 0
            if msg.keep is not None:
                content, omitted = cut.cut_middle(content, msg.keep)
                structured = cut.keeps_structured(structured, msg.keep)
            self._emit(
                Result(id=msg.id, content=content, is_error=is_error, structured_content=structured, omitted=omitted)
            )
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - answered, or re-raised, by _failed
            self._failed(msg, exc)
        finally:
            self._calls.forget(msg.id)

    def _failed(self, msg: AgentMessage, exc: BaseException) -> None:
        """Answer ``msg``, whose serving raised ``exc`` (re-raised when the caller is not to be told)."""
        if isinstance(exc, HostError):
            if isinstance(msg, CallTool):
                self.errors += 1
            self._emit(exc.failure(msg.id))
        elif isinstance(exc, asyncio.CancelledError):
            if msg.id not in self._calls.expired:
                raise exc
            # This side's deadline cancelled it: the caller is told.
            assert isinstance(msg, CallTool)
            self._emit(failures.timed_out(msg.timeout or 0.0).failure(msg.id))
        else:  # a worker bug must still answer the request
            self._log(logging.ERROR, f"internal error serving {type(msg).__name__}: {exc!r}")
            self._emit(Failure(id=msg.id, kind="internal", message=f"{type(exc).__name__}: {exc}"))

    def _open(self, msg: Open) -> None:
        if msg.protocol != PROTOCOL_VERSION:
            raise failures.wire_mismatch(PROTOCOL_VERSION, msg.protocol)
        self.spec = msg.spec
        self._open_trace = msg.trace
        self._created = time.monotonic()  # uptime counts from the open (an idle worker made this host ahead)

    def _cancel(self, msg: Cancel) -> None:
        task = self._calls.tasks.get(msg.id)
        if task is None or task.done() or msg.id in self._calls.expired:
            return  # answered, or already timed out here
        if self._calls.due(msg.id):
            # The caller's timer and this side's deadline: one timeout.
            self._timed_out(self._calls.expire(msg.id))
            return
        # The generation the call runs on, if it reached one.
        gen = self._calls.on.get(msg.id)
        # Cancelling the task abandons the request: the JSON-RPC client sends
        # the server notifications/cancelled; the server gets its cancel grace.
        self._calls.cancel(msg.id, task)
        if self.spec is not None:
            self._calls.probe(gen, self.spec.kill_grace)

    def _deadline(self, rid: int) -> None:
        task = self._calls.tasks.get(rid)
        if task is not None and not task.done() and rid not in self._calls.expired:
            self._timed_out(self._calls.expire(rid))

    def _timed_out(self, gen: Generation | None) -> None:
        """A call passed its deadline on ``gen`` (``None``: before it reached a server)."""
        self.timeouts += 1
        spec = self.spec
        if spec is None:
            return
        if spec.on_timeout == ON_TIMEOUT_KILL:
            if gen is not None:
                self._retire(gen, spec.kill_grace, failures.timed_out_kill())
        else:
            self._calls.probe(gen, spec.kill_grace)

    def _retire(self, gen: Generation, grace: float, reason: HostError) -> None:
        """New requests go to a fresh server now; ``gen`` is stopped with ``reason`` after ``grace``."""
        if gen.serving:
            if self._standby.gen is not gen:
                self._emit(Ended(generation=gen.number, reason=reason.text, draining=True))
            gen.drain(grace, reason)
        if self.current is gen:
            self.current = None

    def _wedged(self, gen: Generation, why: str) -> None:
        if self.spec is not None:
            self._log(logging.WARNING, f"server {self.spec.name!r} generation {gen.number}: {why}")

    # -- generations --------------------------------------------------------- #
    async def _live(self) -> Generation:
        while True:
            gen = self.current
            if gen is not None and gen.serving:
                if self._calls.probing(gen):
                    # A cancel's grace is under way: the verdict first.
                    await self._calls.settled(gen)
                    continue
                return gen
            if gen is not None and gen.state is not State.STARTING:
                # Draining or ending: it goes down in the background, and a
                # fresh generation serves from now on.
                self.current = None
            if self._closing:
                raise failures.closed("the connection is closing")
            if self._starting is None:
                promoted = self._promote()
                if promoted is not None:
                    # A standby reuses its listing while it is fresh (ttlMs).
                    await self.listing.freshen(promoted)
                    return promoted
                self._starting = asyncio.ensure_future(self._start())
                self._starting.add_done_callback(self._started)
            return await asyncio.shield(self._starting)

    def _started(self, task: asyncio.Task[Generation]) -> None:
        self._starting = None
        if not task.cancelled() and task.exception() is None:
            self.current = task.result()
            self._standby_soon()

    # -- the standby generation (spec.standby, :mod:`.standby`) -------------- #
    def _standby_soon(self) -> None:
        spec = self.spec
        if spec is not None and spec.standby and not self._closing:
            self._standby.soon()

    def _promote(self) -> Generation | None:
        """The standby as the current generation (a restart, for the agent's circuit), if one is serving."""
        gen, spec = self._standby.serving(), self.spec
        if gen is None or spec is None:
            return None
        self._standby.take()
        self.current = gen
        self._log(
            logging.INFO,
            f"server {spec.name!r} restarted on its standby (pid {gen.server_pid}, generation {gen.number})",
        )
        self._emit(self._started_message(gen))
        # As after a cold restart: the standby's server may list other tools
        # (or changed them while it waited, when nobody was told).
        self.listing.announce(gen.tools)
        self._standby_soon()
        return gen

    async def _start(self, *, standby: bool = False) -> Generation:
        spec = self.spec
        if spec is None:
            raise HostError("internal", "no server spec: Open was never sent")
        self._generations += 1
        gen = Generation(self._generations)
        if transport(spec).contained:
            gen.tree = self.containment.tree(gen.number, spec)
        self._gens.append(gen)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        runner = asyncio.ensure_future(self._run(gen, spec, ready))
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)
        try:
            await asyncio.wait_for(asyncio.shield(ready), spec.open_timeout)
        except asyncio.TimeoutError:
            session = gen.session
            gen.stop(
                failures.open_timed_out(
                    spec.name,
                    spec.open_timeout,
                    session_tail(gen),
                    head=None if session is None else session.stdout_head,
                    answered=session is not None and session.initialized,
                )
            )
            assert gen.reason is not None
            self._start_failed(gen, gen.reason, standby)
            await self._wait_down(gen)
            raise gen.reason from None
        except asyncio.CancelledError:
            gen.stop(failures.closed("start-up was cancelled"))
            raise
        except HostError as exc:
            self._start_failed(gen, exc, standby)
            await self._wait_down(gen)
            raise
        if standby:
            self._log(
                logging.DEBUG, f"standby server {spec.name!r} ready (pid {gen.server_pid}, generation {gen.number})"
            )
            return gen
        self._log(logging.INFO, f"server {spec.name!r} started (pid {gen.server_pid}, generation {gen.number})")
        # A restart, for the agent's circuit (Opened answers the first).
        self._emit(self._started_message(gen))
        # A restarted server may list other tools than the one before it.
        self.listing.announce(gen.tools)
        return gen

    def _start_failed(self, gen: Generation, reason: HostError, standby: bool) -> None:
        """Tell the agent's circuit of a start that never served (a failed handshake, an exec failure).

        Sent before the failure answers the requests that waited for the
        start, so the agent has counted it when it decides on their retry.
        A standby's failed start is not told: it is not retried until the
        next restart, which is counted.
        """
        if not standby and not self._closing and reason.kind != "closed":
            self._emit(Ended(generation=gen.number, reason=reason.text))

    def _started_message(self, gen: Generation) -> Started:
        return Started(
            server_pid=gen.server_pid, generation=gen.number, protocol_version=gen.protocol_version, sandbox=gen.sandbox
        )

    async def _wait_down(self, gen: Generation) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gen.down.wait(), SHUTDOWN_WAIT)

    def _session(self, gen: Generation, spec: ServerSpec) -> Session:
        return transport(spec).make(
            spec,
            Hooks(
                on_end=gen.stop,
                log=self._log,
                on_garbage=self._garbage,
                explain=lambda reason: self.containment.kernel_reason(gen, spec, reason),
                on_tools_changed=lambda: self.listing.changed(gen),
                trace=self._open_trace,
            ),
        )

    async def _run(self, gen: Generation, spec: ServerSpec, ready: asyncio.Future[None]) -> None:
        """Own one generation from launch to teardown (anyio needs one task for both)."""
        session = self._session(gen, spec)
        gen.session = session
        watchers: list[asyncio.Future[None]] = []
        entering: asyncio.Future[int] | None = None
        try:
            async with session.running():
                self.launched.set()
                self._sandbox = session.sandbox
                # The move into a cgroup runs beside the handshake.
                entering = self.containment.attach(gen)
                watchers += self.containment.watch(gen, spec)
                # The open's trace context goes with the first handshake only.
                trace, self._open_trace = self._open_trace, None
                tools = await session.start(trace)
                await self.containment.entered(entering)
                if gen.state is State.STARTING:
                    gen.ready(tools)
                    ready.set_result(None)
                await gen.stopping.wait()
        except HostError as exc:
            gen.stop(exc)
        except LaunchError as exc:
            gen.stop(HostError("open", str(exc), hint=exc.hint))
        except BaseException as exc:  # noqa: BLE001 - every ending is reported, cancellation re-raised below
            if isinstance(exc, asyncio.CancelledError):
                gen.stop(failures.closed())
                raise
            gen.stop(transport(spec).failed(spec, session, exc, gen.state is not State.STARTING))
        finally:
            gen.stop(failures.closed())  # a no-op unless the body ended without a reason
            if self.current is gen:
                self.current = None  # the next request starts a fresh one while this one is torn down
            waiting = self._standby.forget(gen)  # a standby no request used: not a restart's reason
            started = ready.done()
            reason = gen.reason
            told = reason is not None and reason.kind != "closed"
            # Ended before its log line: an agent that has read the line has
            # read the Ended (a spare's take trusts what it has read).
            if started and not self._closing and not waiting:
                self._emit(Ended(generation=gen.number, reason=reason.text if told and reason else None))
            if started and told and not self._closing:
                assert reason is not None
                what = "standby generation" if waiting else "generation"
                self._log(logging.WARNING, f"server {spec.name!r} {what} {gen.number} ended: {reason.text}")
            await asyncio.shield(self.containment.teardown(gen, session, watchers, entering))
            gen.finished()
            if gen in self._gens:
                self._gens.remove(gen)
            if not ready.done():
                assert gen.reason is not None
                ready.set_exception(gen.reason)
                ready.exception()  # mark retrieved: _start may have stopped waiting

    # -- stats, logs, close -------------------------------------------------- #
    def _garbage(self, line: bytes) -> None:
        self.garbage_lines += 1
        if self.garbage_lines <= 10 or self.garbage_lines % 1000 == 0:
            shown = line[:200].decode("utf-8", "replace")
            self._log(
                logging.WARNING,
                f"skipped a non-JSON-RPC line from the server ({self.garbage_lines} so far): {shown!r}",
                True,
            )

    def stats(self) -> Stats:
        gen = self.current
        serving = gen is not None and gen.serving
        pid = gen.server_pid if gen is not None and serving else None
        use = proctree.TreeUsage(0, 0.0, 0)
        if gen is not None and pid is not None and gen.tree is not None:
            use = gen.tree.usage()
        contained = self.spec is None or transport(self.spec).contained
        return Stats(
            worker_pid=os.getpid(),
            server_pid=pid,
            rss_bytes=use.rss_bytes,
            cpu_seconds=use.cpu_seconds,
            processes=use.processes,
            calls=self.calls,
            errors=self.errors,
            timeouts=self.timeouts,
            uptime_seconds=time.monotonic() - self._created,
            garbage_lines=self.garbage_lines,
            enforcement=self.containment.enforcement or "watch" if contained else "none",
            oom_kills=self.containment.total_oom_kills(),
            protocol_version=gen.protocol_version if serving and gen is not None else None,
            # The backend the current generation runs in, else the last one launched.
            sandbox=gen.sandbox if gen is not None and gen.sandbox is not None else self._sandbox,
        )

    def _log(self, level: int, message: str, stderr: bool = False) -> None:
        self._emit(Log(level=level, message=message, stderr=stderr))

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
        self._closing = True
        self._calls.stop()
        for rid, task in list(self._calls.tasks.items()):
            if task is not asyncio.current_task():
                self._calls.cancel(rid, task)
        if self._starting is not None:
            self._starting.cancel()
        self._standby.cancel()
        gens = list(self._gens)
        for gen in gens:
            gen.stop(failures.closed())
        for gen in gens:
            await self._wait_down(gen)
        # This host's generations only: in isolation="none" several hosts
        # share the agent's loop, and one closing must not wait on another's.
        for runner in list(self._runners):
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(runner), SHUTDOWN_WAIT)
        await self.containment.sweep()


__all__ = ["Host", "HostError"]
