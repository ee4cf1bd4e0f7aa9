"""Closes handed off the run's critical path: started at once, finished in the background.

A run's end used to wait for every server's death: the worker's SIGTERM to
the group, its bounded wait, its own exit, the agent's join. For five
servers that was most of a whole run (issue 19: 250-330 ms of a 323 ms
run). The plugin's ``aclose`` now only *starts* each close (the ``Close``
frame is sent, the connection refuses new requests) and hands the rest to
a task registered here; the worker still kills its tree exactly as before,
and the agent still joins it.

Who waits for everything: :func:`wait_closed` (``MCP.aclose()`` and
``close_spares()`` call it), ``MCPConnection.close()`` (its own close), and
the loop's end: ``asyncio.run`` cancels the tasks left when its main
coroutine returns and waits for them, and a close cancelled that way
finishes its work before it ends (:meth:`ClientCore._finish_close`). An
agent that dies without any of that leaves nothing either: each worker sees
its pipe close and kills its tree.

Nothing is lost: a call still in flight when the run closes gets its answer
or its ``closed`` error when the close completes, as before.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger("lovia_mcp")

# Closes under way, by loop (a loop's closes run on that loop only).
_closing: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Task[None]]] = weakref.WeakKeyDictionary()


def hand_off(close: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """Run ``close`` in a task of its own, known to :func:`wait_closed` until it ends."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(close, name="lovia-mcp-close")
    tasks = _closing.setdefault(loop, set())
    tasks.add(task)
    task.add_done_callback(_done)
    return task


def _done(task: asyncio.Task[None]) -> None:
    tasks = _closing.get(task.get_loop())
    if tasks is not None:
        tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("a background close failed", exc_info=task.exception())


def pending() -> int:
    """Closes still under way on the running loop."""
    return len(_closing.get(asyncio.get_running_loop(), ()))


async def wait_closed() -> None:
    """Return once every close handed off on the running loop has finished (every worker joined)."""
    loop = asyncio.get_running_loop()
    while tasks := list(_closing.get(loop, ())):
        # Shielded: a caller cancelled here leaves the closes running, not half-done.
        await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))


__all__ = ["hand_off", "pending", "wait_closed"]
