"""A connection's generations: start, serve, retire, the standby's promotion, and the cancel grace.

Lifecycle: requests use the current generation (:meth:`Generations.live`),
starting one on demand (single flight). A generation ends when the server
exits, passes a limit, breaks the protocol, or is retired (a timed-out
call's kill, :mod:`.deadline`; a server wedged after a cancel,
:meth:`Generations.probe`); the next request starts a fresh one at once,
while the old one is torn down in the background. Generations may overlap
because each has its own tree (:attr:`Generation.tree`): a cgroup where the
worker could make one (:mod:`..containment.cgroup`), else the psutil watch's
attribution (:mod:`..containment.guard`).

With ``spec.standby`` one more generation is kept READY (:mod:`.standby`)
and promoted when the current one ends: a restart without the start-up wait.

Restarts are counted by the agent's circuit (it alone also sees worker
deaths), told by ``Started`` and ``Ended``: every start, also one that never
served (``Ended`` of a generation never ``Started``).

The cancel grace: after a plain cancel (or a timeout under
``on_timeout="cancel"``) the server must answer a ping within ``kill_grace``
(at least :data:`PROBE_FLOOR`). A server still blocked in the cancelled call
(a single-threaded server that ignores ``notifications/cancelled``) is
retired, and the next call goes to a fresh server instead of queueing
behind it; requests that arrive during the probe wait for its verdict.
Caveat: a multi-threaded server that answers pings while the cancelled work
goes on is kept (it still serves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec

from ..containment import proctree
from ..containment.launch import LaunchError
from ..transport.protocol import TransportSession
from ..wire import failures
from ..wire.failures import HostError
from ..wire.messages import Ended, ListTools, Log, Open, Opened, ServerSpec, Started, Stats, Tools, WorkerMessage
from .accounting import Accounting
from .contain import SHUTDOWN_WAIT, Containment, session_tail
from .denials import Attribution
from .generation import Generation, State
from .listing import Listing
from .standby import Standby
from .transports import Hooks, transport

# The least time a server gets to answer the ping after a cancel: a
# kill_grace of 0 must not take a healthy server's ping round trip on a
# loaded machine for a wedge.
PROBE_FLOOR: Final = 0.2


class Generations:
    """One connection's server generations, oldest first; the current one serves new requests.

    ``emit``: the host's answers (and log lines, :meth:`log`). ``accounting``
    and ``denials``: the host's, which its calls' scopes share
    (:mod:`.scope`): a generation's meter closes as it ends, and what its
    launches start beside the server reports its refusals there.
    """

    def __init__(
        self, emit: Callable[[WorkerMessage], None], *, subreaper: bool, accounting: Accounting, denials: Attribution
    ) -> None:
        self._emit = emit
        self.spec: ServerSpec | None = None
        # The generation new requests use; every generation not yet down, oldest first.
        self.current: Generation | None = None
        self._gens: list[Generation] = []
        self.containment = Containment(subreaper=subreaper, gens=lambda: self._gens, log=self.log)
        self._starting: asyncio.Task[Generation] | None = None
        # With spec.standby: a READY generation no request uses yet, promoted
        # when the current one ends (a restart without the start-up wait).
        self._standby = Standby(self._start_standby, self.log)
        self._numbered = 0
        # Strong references to the generation tasks (asyncio keeps only weak
        # ones); close waits for them.
        self._runners: set[asyncio.Future[None]] = set()
        self._probes: dict[Generation, asyncio.Task[None]] = {}
        self.closing = False
        # The sandbox backend of the last generation launched (each records its own): stats between
        # generations report it.
        self.sandbox: str | None = None
        # The agent's trace context for the open's handshake (Open.trace).
        self.open_trace: dict[str, str] | None = None
        # Set once the open's server is launched, or the open is over: the
        # worker makes its agent's transport then (main.serve).
        self.launched = asyncio.Event()
        # What the agent knows of the tools; re-listing after list_changed.
        self.listing = Listing(emit, self.log, lambda: self.current)
        # Lines the servers wrote on stdout that were not JSON-RPC (skipped).
        self.garbage_lines = 0
        self._accounting = accounting
        self._denials = denials
        # With spec.relay: the host hears each generation's other notifications (method, raw params).
        self.on_notification: Callable[[Generation, str, bytes | None], None] | None = None
        # With spec.relay: the host answers each generation's own requests (method, raw params).
        self.on_request: (
            Callable[[Generation, str, bytes | None], Awaitable[tuple[bytes | None, bytes | None]]] | None
        ) = None

    # -- serving ------------------------------------------------------------- #
    async def opened(self, msg: Open) -> Opened:
        """The open's answer, once its first generation serves (:attr:`spec` set by the host)."""
        gen = await self.live()
        self.listing.sent(gen.tools)
        if msg.spec.sandbox is not None:
            self.log(logging.INFO, f"sandbox: {gen.sandbox} (asked for backend={msg.spec.sandbox.backend!r})")
        return Opened(
            id=msg.id,
            server_pid=gen.server_pid,
            tools=gen.tools,
            generation=gen.number,
            protocol_version=gen.protocol_version,
            listing_ttl=gen.listing_ttl,
            capabilities=_json(gen.session.capabilities) if gen.session is not None else None,
        )

    async def listed(self, msg: ListTools) -> Tools:
        """A fresh listing from the serving generation's server."""
        gen = await self.live()
        assert gen.session is not None
        gen.tools = await gen.session.list_tools(msg.trace)
        self.listing.sent(gen.tools)
        return Tools(id=msg.id, tools=gen.tools, listing_ttl=gen.listing_ttl)

    async def live(self) -> Generation:
        """The generation that serves the next request: the current one, the standby promoted, or a fresh start."""
        while True:
            gen = self.current
            if gen is not None and gen.serving:
                if gen in self._probes:
                    # A cancel's grace is under way: the verdict first.
                    await self._settled(gen)
                    continue
                return gen
            if gen is not None and gen.state is not State.STARTING:
                # Draining or ending: it goes down in the background, and a
                # fresh generation serves from now on.
                self.current = None
            if self.closing:
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

    def ready(self, gen: Generation | None) -> bool:
        """Whether ``gen`` serves a request now, with no wait (else :meth:`live` finds the one that does)."""
        return gen is not None and gen.serving and gen not in self._probes

    def retire(self, gen: Generation, grace: float, reason: HostError) -> None:
        """New requests go to a fresh server now; ``gen`` is stopped with ``reason`` after ``grace``."""
        if gen.serving:
            if self._standby.gen is not gen:
                self._emit(Ended(generation=gen.number, reason=reason.text, draining=True))
            gen.drain(grace, reason)
        if self.current is gen:
            self.current = None

    # -- the cancel grace ---------------------------------------------------- #
    def probe(self, gen: Generation | None, grace: float) -> None:
        """Retire ``gen`` unless its server answers a ping within ``grace`` (at least :data:`PROBE_FLOOR`)."""
        if gen is None or not gen.serving or gen in self._probes:
            return
        task = asyncio.ensure_future(self._probe(gen, max(grace, PROBE_FLOOR)))
        self._probes[gen] = task
        task.add_done_callback(lambda _t: self._probes.pop(gen, None))

    async def _probe(self, gen: Generation, wait: float) -> None:
        session = gen.session
        if session is None:
            return
        try:
            await asyncio.wait_for(session.ping(), wait)
        except asyncio.TimeoutError:
            if gen.serving:
                reason = failures.wedged(wait)
                if self.spec is not None:
                    self.log(logging.WARNING, f"server {self.spec.name!r} generation {gen.number}: {reason.text}")
                # New calls go to a fresh server now; calls still running on
                # this one (a busy, not wedged, server) get one more grace.
                self.retire(gen, wait, reason)
        except Exception:  # noqa: BLE001 - an error answer is an answer; a generation that ended is replaced anyway
            pass

    async def _settled(self, gen: Generation) -> None:
        """Wait for a probe of ``gen`` under way (bounded by the probe's own wait)."""
        task = self._probes.get(gen)
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    # -- starts -------------------------------------------------------------- #
    def _started(self, task: asyncio.Task[Generation]) -> None:
        self._starting = None
        if not task.cancelled() and task.exception() is None:
            self.current = task.result()
            self._standby_soon()

    def _standby_soon(self) -> None:
        spec = self.spec
        if spec is not None and spec.standby and not self.closing:
            self._standby.soon()

    def _promote(self) -> Generation | None:
        """The standby as the current generation (a restart, for the agent's circuit), if one is serving."""
        gen, spec = self._standby.serving(), self.spec
        if gen is None or spec is None:
            return None
        self._standby.take()
        self.current = gen
        self.log(
            logging.INFO,
            f"server {spec.name!r} restarted on its standby (pid {gen.server_pid}, generation {gen.number})",
        )
        self._emit(self.started_message(gen))
        # As after a cold restart: the standby's server may list other tools
        # (or changed them while it waited, when nobody was told).
        self.listing.announce(gen.tools)
        self._standby_soon()
        return gen

    async def _start_standby(self) -> Generation:
        return await self._start(standby=True)

    async def _start(self, *, standby: bool = False) -> Generation:
        spec = self.spec
        if spec is None:
            raise HostError("internal", "no server spec: Open was never sent")
        self._numbered += 1
        gen = Generation(self._numbered)
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
            self.log(
                logging.DEBUG, f"standby server {spec.name!r} ready (pid {gen.server_pid}, generation {gen.number})"
            )
            return gen
        self.log(logging.INFO, f"server {spec.name!r} started (pid {gen.server_pid}, generation {gen.number})")
        # A restart, for the agent's circuit (Opened answers the first).
        self._emit(self.started_message(gen))
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
        if not standby and not self.closing and reason.kind != "closed":
            self._emit(Ended(generation=gen.number, reason=reason.text))

    def started_message(self, gen: Generation) -> Started:
        return Started(
            server_pid=gen.server_pid, generation=gen.number, protocol_version=gen.protocol_version, sandbox=gen.sandbox
        )

    async def _wait_down(self, gen: Generation) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(gen.down.wait(), SHUTDOWN_WAIT)

    def _session(self, gen: Generation, spec: ServerSpec) -> TransportSession:
        notified = self.on_notification
        requested = self.on_request
        return transport(spec).make(
            spec,
            Hooks(
                on_end=gen.stop,
                log=self.log,
                on_garbage=self._garbage,
                explain=lambda reason: self.containment.kernel_reason(gen, spec, reason),
                on_tools_changed=lambda: self.listing.changed(gen),
                on_notification=None
                if notified is None or not spec.relay
                else lambda method, params: notified(gen, method, params),
                on_request=None
                if requested is None or not spec.relay
                else lambda method, params: requested(gen, method, params),
                trace=self.open_trace,
            ),
        )

    async def _run(self, gen: Generation, spec: ServerSpec, ready: asyncio.Future[None]) -> None:
        """Own one generation from launch to teardown (anyio needs one task for both)."""
        self._denials.launching()  # this task's launches report to this host
        session = self._session(gen, spec)
        gen.session = session
        watchers: list[asyncio.Future[None]] = []
        entering: asyncio.Future[int] | None = None
        try:
            async with session.running():
                self.launched.set()
                self.sandbox = session.sandbox
                # The move into a cgroup runs beside the handshake.
                entering = self.containment.attach(gen)
                watchers += self.containment.watch(gen, spec)
                # The open's trace context goes with the first handshake only.
                trace, self.open_trace = self.open_trace, None
                self._denials.adopt()  # what the sandbox started beside the server: calls wait for it
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
            if started and not self.closing and not waiting:
                self._emit(Ended(generation=gen.number, reason=reason.text if told and reason else None))
            if started and told and not self.closing:
                assert reason is not None
                what = "standby generation" if waiting else "generation"
                self.log(logging.WARNING, f"server {spec.name!r} {what} {gen.number} ended: {reason.text}")
            self._accounting.forget(gen)
            await asyncio.shield(self.containment.teardown(gen, session, watchers, entering))
            gen.finished()
            if gen in self._gens:
                self._gens.remove(gen)
            if not ready.done():
                assert gen.reason is not None
                ready.set_exception(gen.reason)
                ready.exception()  # mark retrieved: _start may have stopped waiting

    # -- figures ------------------------------------------------------------- #
    def _garbage(self, line: bytes) -> None:
        self.garbage_lines += 1
        if self.garbage_lines <= 10 or self.garbage_lines % 1000 == 0:
            shown = line[:200].decode("utf-8", "replace")
            self.log(
                logging.WARNING,
                f"skipped a non-JSON-RPC line from the server ({self.garbage_lines} so far): {shown!r}",
                True,
            )

    def log(self, level: int, message: str, stderr: bool = False) -> None:
        """A line for the agent's log (``stderr``: the server's own words)."""
        self._emit(Log(level=level, message=message, stderr=stderr))

    def stats(self, calls: int, errors: int, timeouts: int, uptime: float) -> Stats:
        """The connection's figures: the host's counts, and the current generation's tree."""
        gen, spec = self.current, self.spec
        serving = gen is not None and gen.serving
        pid = gen.server_pid if gen is not None and serving else None
        use = proctree.TreeUsage(0, 0.0, 0)
        if gen is not None and pid is not None and gen.tree is not None:
            use = gen.tree.usage()
        contained = spec is None or transport(spec).contained
        totals = self._accounting.totals
        return Stats(
            worker_pid=os.getpid(),
            server_pid=pid,
            rss_bytes=use.rss_bytes,
            cpu_seconds=use.cpu_seconds,
            processes=use.processes,
            calls=calls,
            errors=errors,
            timeouts=timeouts,
            uptime_seconds=uptime,
            garbage_lines=self.garbage_lines,
            enforcement=self.containment.enforcement or "watch" if contained else "none",
            oom_kills=self.containment.total_oom_kills(),
            protocol_version=gen.protocol_version if serving and gen is not None else None,
            # The backend the current generation runs in, else the last one launched.
            sandbox=gen.sandbox if gen is not None and gen.sandbox is not None else self.sandbox,
            call_cpu_seconds=totals.cpu_seconds,
            call_memory_peak_bytes=totals.memory_peak_bytes,
            egress_connections=totals.egress_connections,
            egress_bytes=totals.egress_bytes,
            shared_calls=totals.shared_calls,
            sandbox_denials=self._denials.total,
        )

    # -- close --------------------------------------------------------------- #
    async def aclose(self) -> None:
        """Stop every generation and wait for each to be down (bounded); the host's calls are cancelled first."""
        self.closing = True
        for task in list(self._probes.values()):
            task.cancel()
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
        self._accounting.close()
        await self.containment.sweep()
        await self._denials.aclose()


def _json(value: object) -> bytes | None:
    return None if value is None else msgspec.json.encode(value)


__all__ = ["PROBE_FLOOR", "Generations"]
