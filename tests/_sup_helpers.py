"""Helpers shared by the supervision tests (tests/test_sup_*.py)."""

from __future__ import annotations

import asyncio
import time

from conftest import pid_alive

# Poll period while waiting, against a deadline, for processes to exit.
POLL = 0.01


async def alive_after(pids: list[int], within: float) -> tuple[list[int], float]:
    """Wait up to ``within`` seconds for ``pids`` to exit (zombies count as gone).

    Returns the pids still alive and the time taken. Async, so that a server
    hosted in this event loop (``isolation="none"``) is torn down meanwhile.
    """
    started = time.monotonic()
    deadline = started + within
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive, time.monotonic() - started
        await asyncio.sleep(POLL)


def alive_after_sync(pids: list[int], within: float) -> tuple[list[int], float]:
    """:func:`alive_after` outside an event loop."""
    return asyncio.run(alive_after(pids, within))
