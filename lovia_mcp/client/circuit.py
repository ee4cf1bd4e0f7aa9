"""The restart circuit: the agent's, because only the agent sees every kind of restart.

A restart is a fresh server generation in a worker (the worker reports it
with ``Started``) or a fresh worker after one was lost (which no worker can
report). Both count alike, so a server that keeps killing its worker is
stopped as one that keeps crashing. Past ``limit`` restarts in ``window``
seconds a request that would need a restart fails fast (``circuit_open``)
until the window has passed.

The worker keeps no window of its own: it restarts when asked and says so.
Caveat: requests sent before the agent heard that a generation ended (its
``Ended`` crossing the pipe) may start one restart past the limit; the next
request is refused.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from lovia_mcp_worker.wire.messages import Failure


class RestartCircuit:
    """Restarts in a sliding window, whether the server needs one, and why the last generation ended."""

    def __init__(self, limit: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._times: collections.deque[float] = collections.deque()
        # The serving generation ended: the next request starts a fresh one.
        self.needs_restart = False
        # Restarts over the connection's life (stats), and the reason of the
        # latest: a reason shows only once its restart has happened.
        self.restarts = 0
        self.last_restart_reason: str | None = None
        self._last_end: str | None = None

    def ended(self, reason: str | None) -> None:
        """The serving generation (or the worker) ended; ``reason`` is why, if known."""
        self.needs_restart = True
        if reason is not None:
            self._last_end = reason

    def restarted(self) -> None:
        """A fresh generation or worker serves now."""
        self._times.append(self._clock())
        self.restarts += 1
        self.last_restart_reason = self._last_end
        self.needs_restart = False

    def serving(self) -> None:
        """A generation serves (the first one, or a standby promoted): nothing to restart."""
        self.needs_restart = False

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
