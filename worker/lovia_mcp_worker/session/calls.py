"""The calls in flight: each request's task and the generation each call runs on.

The host (:mod:`.host`) registers a request's task as it dispatches it, and
the task's own coroutine forgets it as it ends; a call's deadline is kept
beside it (:mod:`.deadline`), a cancelled call's server gets its cancel
grace from its generations (:meth:`.generations.Generations.probe`).
"""

from __future__ import annotations

import asyncio
import inspect

from .generation import Generation


class Calls:
    """Requests being served (tasks by id) and the generation each call reached."""

    def __init__(self) -> None:
        self.tasks: dict[int, asyncio.Task[None]] = {}
        # Which generation each call runs on, once it reached one.
        self.on: dict[int, Generation] = {}

    def cancel(self, rid: int, task: asyncio.Task[None]) -> bool:
        """Cancel request ``rid``'s task; whether it had not run yet (then it is forgotten now).

        A task cancelled before it ran never runs its coroutine, which is
        what forgets a request as it ends (not a done callback: that is one
        more callback scheduled, and one more loop handle, per call).
        """
        task.cancel()
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            self.tasks.pop(rid, None)
            return True
        return False


__all__ = ["Calls"]
