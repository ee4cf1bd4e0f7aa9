"""The standby generation: one more server kept READY beside the current one.

A persistent connection whose config has ``spares`` asks for it
(``ServerSpec.standby``). The host starts it once a current generation
serves; when the current one ends (a crash, a limit, a timeout kill) the
next request promotes the standby instead of waiting for a fresh start
(:meth:`~lovia_mcp_worker.session.generations.Generations.live`, which counts it as a
restart), and a new standby starts.

Caveats: a standby that fails to start is not retried until the next
restart (a server that cannot start must not be started over and over
beside a working one). Its tree is not in ``stats()`` figures, which are
the current generation's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .generation import Generation


class Standby:
    """At most one standby generation, and its start while it is under way."""

    def __init__(self, start: Callable[[], Awaitable[Generation]], log: Callable[[int, str], None]) -> None:
        self.gen: Generation | None = None
        self._task: asyncio.Future[Generation] | None = None
        self._start = start
        self._log = log

    def soon(self) -> None:
        """Start one in the background, unless one is ready or starting."""
        if self.gen is not None or self._task is not None:
            return
        self._task = asyncio.ensure_future(self._start())
        self._task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Generation]) -> None:
        self._task = None
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._log(logging.WARNING, f"a standby server could not start: {exc}")
            return
        self.gen = task.result()

    def serving(self) -> Generation | None:
        """The standby, if it is still serving (one that died while waiting is not)."""
        gen = self.gen
        return gen if gen is not None and gen.serving else None

    def take(self) -> None:
        self.gen = None

    def forget(self, gen: Generation) -> bool:
        """Drop ``gen`` if it is the standby (it ended); whether it was."""
        if self.gen is gen:
            self.gen = None
            return True
        return False

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


__all__ = ["Standby"]
