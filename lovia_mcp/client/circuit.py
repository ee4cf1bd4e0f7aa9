"""The restart circuit: the agent's, because only the agent sees every kind of restart.

A restart is every start after the connection's first: each attempt to
start a fresh server generation in a worker, whether it then serves (the
worker says ``Started``) or dies before its handshake, fails to exec or
passes its open timeout (the worker says ``Ended`` of a generation it never
said ``Started`` of), and each fresh worker after one was lost (which no
worker can report). All count alike, so a server that dies at every start
is stopped as one that keeps crashing mid-call, and one that keeps killing
its worker likewise. Past ``limit`` restarts in ``window`` seconds a request
that would need a restart fails fast (``circuit_open``) and nothing is
started until the oldest restart has left the window.

The open's own start (the connection's first generation in its first
worker) is not a restart: a connection starts at most ``limit`` + 1 server
processes in any ``window``.

The worker keeps no window of its own: it starts when asked and says so.
Caveat: a request sent while a start is failing (the two crossing on the
pipe) may start one more; sequential calls never do, and calls waiting on
the same start share it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from lovia_mcp_worker.wire.messages import Failure


class RestartCircuit:
    """Restarts in a sliding window, whether the server needs one, and why the last generation ended.

    ``clock`` is injectable so the window can be tested without waiting.
    """

    def __init__(self, limit: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._times: collections.deque[float] = collections.deque()
        # The serving generation ended (or a start failed): the next request
        # starts a fresh one, if the circuit allows.
        self.needs_restart = False
        # Restarts over the connection's life (stats), and the reason of the
        # latest: a reason shows only once its restart has happened.
        self.restarts = 0
        self.last_restart_reason: str | None = None
        self._last_end: str | None = None

    def ended(self, reason: str | None) -> None:
        """The serving generation (or the worker) ended, or a start failed; ``reason`` is why, if known."""
        self.needs_restart = True
        if reason is not None:
            self._last_end = reason

    def restarted(self) -> None:
        """A restart was attempted: a fresh generation or worker was started, whether or not it serves.

        A start that then fails is told with :meth:`ended` after this.
        """
        self._times.append(self._clock())
        self.restarts += 1
        self.last_restart_reason = self._last_end
        self.needs_restart = False

    def serving(self) -> None:
        """A generation serves (the first one, or a standby promoted): nothing to restart."""
        self.needs_restart = False

    def tripped(self) -> bool:
        """Whether requests fail fast now: the server needs a restart and ``limit`` restarts fall in the window."""
        if not self.needs_restart:
            return False
        now = self._clock()
        return sum(1 for t in self._times if now - t <= self.window) >= self.limit

    def check(self, name: str) -> Failure | None:
        """``circuit_open`` if ``limit`` restarts fall in the window, else ``None``."""
        now = self._clock()
        times = self._times
        while times and now - times[0] > self.window:
            times.popleft()
        if len(times) < self.limit:
            return None
        wait = self.window - (now - times[0])
        return Failure(
            id=0,
            kind="circuit_open",
            message=f"server {name!r} restarted {len(times)} times in {self.window:g} s "
            f"(last: {self._last_end}); failing fast",
            hint=f"Fix the server; calls are tried again in {wait:.0f} s.",
        )


__all__ = ["RestartCircuit"]
