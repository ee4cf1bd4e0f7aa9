"""A server's tool list as the agent knows it: re-listing after ``tools/list_changed``.

A server that changes its tools sends ``notifications/tools/list_changed``;
the host then re-lists (paginated, through the generation's session) and
sends the agent :class:`~lovia_mcp_worker.wire.messages.ToolsChanged`. The agent
is told only of lists that differ from the last one it got (an ``Opened``,
a ``Tools`` reply or a ``ToolsChanged``), so a restart that lists the same
tools says nothing.

Ordering: the notification is seen in the order the server wrote it, so a
call the server answered *after* notifying waits (:meth:`Listing.settled`,
bounded by :data:`RELIST_WAIT`) until the new list has been sent: the caller
of that call already sees it. Notifications that arrive while a listing is
under way are coalesced into one more listing after it (the list being read
may predate them).

In MCP 2026-07-28 the change comes on the generation's
``subscriptions/listen`` stream (the transports hold one) and is handled
alike. A listing also expires there (the server's ``ttlMs``): a standby
taking over re-lists an expired one first (:meth:`Listing.freshen`).

Non-goals: ``prompts``/``resources`` list changes (lovia-mcp offers neither).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Final

from ..transport.protocol import TransportSession
from ..wire.mcpjson import ToolSpec
from ..wire.messages import ToolsChanged, WorkerMessage
from .generation import Generation, State

# A re-listing after list_changed, and how long a call's result waits for it.
# tools/list answers in milliseconds; a server that notifies and then never
# answers must not hold results back for long (the listing is then dropped).
RELIST_WAIT: Final = 5.0


def stale(session: TransportSession) -> bool:
    """Whether ``session``'s last listing has outlived its ``ttlMs`` (never, without one)."""
    ttl = session.listing_ttl
    return ttl is not None and time.monotonic() - session.listed_at >= ttl


class Listing:
    """Re-lists a generation's tools when the server says they changed; tells the agent of new lists."""

    def __init__(
        self,
        emit: Callable[[WorkerMessage], None],
        log: Callable[[int, str], None],
        current: Callable[[], Generation | None],
    ) -> None:
        self._emit = emit
        self._log = log
        self._current = current
        # The list the agent has now; None until the first is sent.
        self.known: list[ToolSpec] | None = None
        self._tasks: dict[Generation, asyncio.Task[None]] = {}
        self._again: set[Generation] = set()

    def sent(self, tools: list[ToolSpec]) -> None:
        """The agent was handed ``tools`` (an ``Opened`` or ``Tools`` reply)."""
        self.known = list(tools)

    def announce(self, tools: list[ToolSpec]) -> None:
        """Tell the agent of ``tools`` if they differ from what it has."""
        if self.known is None or tools == self.known:
            return
        self.known = list(tools)
        self._emit(ToolsChanged(tools=list(tools)))

    def changed(self, gen: Generation) -> None:
        """``gen``'s server sent ``tools/list_changed``: re-list it (one listing at a time)."""
        task = self._tasks.get(gen)
        if task is not None and not task.done():
            self._again.add(gen)
            return
        task = asyncio.ensure_future(self._relist(gen))
        self._tasks[gen] = task
        task.add_done_callback(functools.partial(self._finished, gen))

    def _finished(self, gen: Generation, task: asyncio.Future[None]) -> None:
        # Only this task's entry: a re-listing started in the turn between
        # this task's end and its callback must stay tracked (settled() waits on it).
        if self._tasks.get(gen) is task:
            del self._tasks[gen]
        self._again.discard(gen)

    def relisting(self, gen: Generation) -> bool:
        """Whether a re-listing of ``gen`` is under way (:meth:`settled` would wait for it)."""
        task = self._tasks.get(gen)
        return task is not None and not task.done()

    async def settled(self, gen: Generation) -> None:
        """Wait (bounded) for a re-listing of ``gen`` under way to be sent."""
        task = self._tasks.get(gen)
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), RELIST_WAIT)

    async def freshen(self, gen: Generation) -> None:
        """Re-list ``gen`` (a standby taking over) if its listing's ``ttlMs`` has passed; a failure keeps the old list."""
        session = gen.session
        if session is None or not stale(session):
            return
        try:
            tools = await asyncio.wait_for(session.list_tools(), RELIST_WAIT)
        except (asyncio.TimeoutError, Exception) as exc:  # noqa: BLE001 - the standby still serves with its old list
            self._log(logging.WARNING, f"re-listing an expired listing failed ({exc!r}); the old list stays")
            return
        gen.tools = tools
        if gen is self._current():
            self.announce(tools)

    async def _relist(self, gen: Generation) -> None:
        while gen.state in (State.READY, State.DRAINING) and gen.session is not None:
            self._again.discard(gen)
            try:
                tools = await asyncio.wait_for(gen.session.list_tools(), RELIST_WAIT)
            except asyncio.TimeoutError:
                self._log(
                    logging.WARNING,
                    f"re-listing the tools after tools/list_changed: no answer within {RELIST_WAIT:g} s; the old list stays",
                )
                return
            except Exception as exc:  # noqa: BLE001 - a failed re-listing keeps the old list; the calls go on
                self._log(
                    logging.WARNING, f"re-listing the tools after tools/list_changed failed ({exc}); the old list stays"
                )
                return
            gen.tools = tools
            if gen is self._current():
                self.announce(tools)
            if gen not in self._again:
                return


__all__ = ["RELIST_WAIT", "Listing", "stale"]
