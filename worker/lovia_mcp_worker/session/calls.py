"""The calls in flight: each one's task, deadline and generation, and what a cancel means.

The worker owns every call's deadline (``CallTool.timeout``, seconds from
receipt). At the deadline the call is cancelled here, the spec's
``on_timeout`` applied, and the agent answered with a ``timeout`` failure.
A ``Cancel`` from the agent is the timeout when it arrives at the deadline
(:data:`CANCEL_SLACK`): lovia's own ``wait_for`` fires then, with the same
timeout, and only this side knows when the call arrived.

After a plain cancel (or a timeout under ``on_timeout="cancel"``) the server
gets its cancel grace: a ping must be answered within ``kill_grace``
(:meth:`Calls.probe`). A server still blocked in the cancelled call (a
single-threaded server that ignores ``notifications/cancelled``) is
retired, and the next call goes to a fresh server instead of queueing behind
it; requests that arrive during the probe wait for its verdict.

Caveat: a multi-threaded server that answers pings while the cancelled work
goes on is kept (it still serves).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
from collections.abc import Callable
from typing import Final

from ..wire import failures
from ..wire.failures import HostError
from ..wire.messages import CANCEL_SLACK
from .generation import Generation

# The least time a server gets to answer the ping after a cancel: a
# kill_grace of 0 must not take a healthy server's ping round trip on a
# loaded machine for a wedge.
PROBE_FLOOR: Final = 0.2

# Answered calls' deadline entries tolerated beyond twice the timed calls in
# flight before they are swept: a sweep walks the heap once, so it runs
# about once per that many calls.
SWEEP_SLACK: Final = 64

Retire = Callable[[Generation, float, HostError], None]


class Calls:
    """Requests being served (tasks by id), the calls' generations and deadlines, and the probes.

    Deadlines are held in a heap with one timer, armed for the earliest: a
    call due after it (calls with one timeout, in the order received) costs
    a heap push and no timer. Answered calls' entries are dropped as the
    timer meets them, or swept once they outnumber the timed calls in flight.
    """

    def __init__(
        self, retire: Retire, log_wedged: Callable[[Generation, str], None], on_deadline: Callable[[int], None]
    ) -> None:
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # Which generation each call runs on, once it reached one.
        self.on: dict[int, Generation] = {}
        self._retire = retire
        self._log_wedged = log_wedged
        self._on_deadline = on_deadline
        # Each timed call's deadline (loop time); the same as (deadline, id)
        # in a heap, and the one timer for the earliest.
        self._deadlines: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []
        self._timer: asyncio.TimerHandle | None = None
        # Calls this side timed out: they answer with a timeout failure.
        self.expired: set[int] = set()
        self._probes: dict[Generation, asyncio.Task[None]] = {}

    def add(self, rid: int, task: asyncio.Task[None], timeout: float | None) -> None:
        """Track request ``rid``'s task; its coroutine calls :meth:`forget` as it ends.

        Not a done callback: that is one more callback scheduled, and one
        more loop handle, per call. A task cancelled before it ran never
        runs its coroutine: :meth:`cancel` forgets it then.
        """
        self.tasks[rid] = task
        if timeout is not None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            self._deadlines[rid] = deadline
            heap = self._heap
            if len(heap) > 2 * len(self._deadlines) + SWEEP_SLACK:
                heap[:] = [entry for entry in heap if self._deadlines.get(entry[1]) == entry[0]]
                heapq.heapify(heap)
            heapq.heappush(heap, (deadline, rid))
            if self._timer is None or deadline + CANCEL_SLACK < self._timer.when():
                self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        heap = self._heap
        while heap and self._deadlines.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # answered
        if heap:
            # The caller's own timer, if it has one, fires first and reports
            # its own timeout error; this side's answers the callers without one.
            self._timer = loop.call_at(heap[0][0] + CANCEL_SLACK, self._expire_due)

    def _expire_due(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        heap, now = self._heap, loop.time()
        try:
            while heap and heap[0][0] + CANCEL_SLACK <= now:
                deadline, rid = heapq.heappop(heap)
                if self._deadlines.get(rid) == deadline:
                    self._on_deadline(rid)
        finally:
            self._arm(loop)  # a callback that raised leaves the rest due at once

    def forget(self, rid: int) -> None:
        """Request ``rid`` has ended (called by its coroutine as it ends)."""
        self.tasks.pop(rid, None)
        self.expired.discard(rid)
        self._deadlines.pop(rid, None)

    def cancel(self, rid: int, task: asyncio.Task[None]) -> None:
        """Cancel request ``rid``'s task; one that had not run yet is forgotten now (see :meth:`add`)."""
        task.cancel()
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            self.forget(rid)

    def due(self, rid: int) -> bool:
        """Whether call ``rid`` is at (or within :data:`CANCEL_SLACK` of) its deadline."""
        found = self._deadlines.get(rid)
        return found is not None and asyncio.get_running_loop().time() >= found - CANCEL_SLACK

    def expire(self, rid: int) -> Generation | None:
        """Cancel call ``rid`` as timed out; the generation it ran on (``None``: it reached none)."""
        task = self.tasks.get(rid)
        if task is None or task.done():
            return None
        self.expired.add(rid)
        self.cancel(rid, task)
        return self.on.get(rid)

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
                self._log_wedged(gen, reason.text)
                # New calls go to a fresh server now; calls still running on
                # this one (a busy, not wedged, server) get one more grace.
                self._retire(gen, wait, reason)
        except Exception:  # noqa: BLE001 - an error answer is an answer; a generation that ended is replaced anyway
            pass

    def probing(self, gen: Generation) -> bool:
        return gen in self._probes

    async def settled(self, gen: Generation) -> None:
        """Wait for a probe of ``gen`` under way (bounded by the probe's own wait)."""
        task = self._probes.get(gen)
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    def stop(self) -> None:
        """Cancel the probes under way and the deadline timer (the host is closing: it cancels the calls)."""
        for task in list(self._probes.values()):
            task.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


__all__ = ["PROBE_FLOOR", "SWEEP_SLACK", "Calls"]
