"""Progress of running calls: MCP ``notifications/progress``, coalesced for the agent.

Each ``tools/call`` carries a ``progressToken`` (stdio: :mod:`..transport.jsonrpc`;
HTTP: the SDK's progress callback in :mod:`..transport.http`). Every notification for
it reaches one :class:`ProgressForwarder`, which sends the agent a
:class:`~lovia_mcp_worker.wire.messages.Progress` at once when none went out in
the last :data:`PROGRESS_INTERVAL`, and otherwise keeps only the latest value
for the end of that interval. A server flooding progress thus costs the agent
at most one frame per interval per call, and the value it shows is never
older than one interval. :meth:`ProgressForwarder.close` sends what is still
held, so the last progress before the answer is never lost. A relay
(``lovia-mcp serve``, a proxy whose client asked for each update) uses an
interval of 0: every update goes on as it came.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any, Final

from ..wire.messages import Progress

# At most one progress update per call this often: ten a second is as fast
# as a log or a terminal line is read, while a server sending thousands a
# second costs the agent ten small frames.
PROGRESS_INTERVAL: Final = 0.1


class ProgressForwarder:
    """One call's progress: leading-edge sends, the latest value held in between."""

    def __init__(
        self,
        emit: Callable[[Progress], None],
        request_id: int,
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        later: Callable[[float, Callable[[], None]], Any] | None = None,
    ) -> None:
        self._emit = emit
        self._id = request_id
        self._interval = interval
        self._clock = clock
        self._later = later if later is not None else asyncio.get_running_loop().call_later
        self._last_sent = -math.inf
        self._held: Progress | None = None
        self._timer: Any = None
        self._closed = False
        self.received = 0
        self.sent = 0

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self._closed:
            return
        self.received += 1
        update = Progress(id=self._id, progress=progress, total=total, message=message)
        now = self._clock()
        if self._timer is None and now - self._last_sent >= self._interval:
            self._send(update, now)
            return
        self._held = update
        if self._timer is None:
            self._timer = self._later(max(0.0, self._last_sent + self._interval - now), self._flush)

    def _send(self, update: Progress, now: float) -> None:
        self._last_sent = now
        self.sent += 1
        self._emit(update)

    def _flush(self) -> None:
        self._timer = None
        held, self._held = self._held, None
        if held is not None and not self._closed:
            self._send(held, self._clock())

    def close(self) -> None:
        """The call ended: send what is held (before the answer), then nothing more."""
        if self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, None
        if held is not None:
            self._send(held, self._clock())
        self._closed = True


__all__ = ["PROGRESS_INTERVAL", "ProgressForwarder"]
