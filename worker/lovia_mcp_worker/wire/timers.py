"""Many keyed due times on one loop timer: the worker's call deadlines and the agent's stuck-worker backstop.

Both sides time every call in flight, and most calls end long before they
are due. :class:`TimerHeap` keeps one loop timer, armed for the earliest
entry; an entry due after it (calls with one timeout, in the order sent)
costs a heap push and no timer. An entry that ends early is only forgotten
(:meth:`TimerHeap.forget`): its heap slot goes when the timer meets it, or
in a sweep once such slots outnumber the live entries twice over (plus
:data:`SWEEP_SLACK`), so the heap stays bounded however many calls end
before they are due.

Standard library only: the agent imports this package.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from typing import Final

# Forgotten entries tolerated beyond twice the live ones before they are
# swept: a sweep walks the heap once, so it runs about once per that many
# entries added.
SWEEP_SLACK: Final = 64


class TimerHeap:
    """Due times by key (loop time), each with its callback (called with the key), on one timer for the earliest.

    ``slack``: every entry's callback runs this long after its due time
    (:meth:`due` still gives the due time itself).
    """

    __slots__ = ("_heap", "_live", "_slack", "_timer")

    def __init__(self, *, slack: float = 0.0) -> None:
        self._slack = slack
        # Each live key's (due time, callback); the heap holds (due time, key),
        # and a slot whose key is gone or due at another time is stale.
        self._live: dict[int, tuple[float, Callable[[int], object]]] = {}
        self._heap: list[tuple[float, int]] = []
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        """Live entries (added, neither forgotten nor fired)."""
        return len(self._live)

    def add(self, key: int, when: float, fire: Callable[[int], object]) -> None:
        """Call ``fire(key)`` at loop time ``when`` (plus the slack) unless ``key`` is forgotten first."""
        self._live[key] = (when, fire)
        heap = self._heap
        if len(heap) > 2 * len(self._live) + SWEEP_SLACK:
            live = self._live
            heap[:] = [slot for slot in heap if (found := live.get(slot[1])) is not None and found[0] == slot[0]]
            heapq.heapify(heap)
        heapq.heappush(heap, (when, key))
        if self._timer is None or when + self._slack < self._timer.when():
            self._arm(asyncio.get_running_loop())

    def forget(self, key: int) -> None:
        """``key`` will not fire (its slot in the heap goes later)."""
        self._live.pop(key, None)

    def due(self, key: int) -> float | None:
        """When ``key`` is due (loop time); ``None``: not live."""
        found = self._live.get(key)
        return None if found is None else found[0]

    def stop(self) -> None:
        """Stop the timer (its owner is closing); an entry added after arms it again."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _stale(self, slot: tuple[float, int]) -> bool:
        found = self._live.get(slot[1])
        return found is None or found[0] != slot[0]

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        heap = self._heap
        while heap and self._stale(heap[0]):
            heapq.heappop(heap)
        if heap:
            self._timer = loop.call_at(heap[0][0] + self._slack, self._fire_due)

    def _fire_due(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        heap, now = self._heap, loop.time()
        try:
            while heap and heap[0][0] + self._slack <= now:
                slot = heapq.heappop(heap)
                if self._stale(slot):
                    continue
                key = slot[1]
                _, fire = self._live.pop(key)
                fire(key)
        finally:
            self._arm(loop)  # a callback that raised leaves the rest due at once


__all__ = ["SWEEP_SLACK", "TimerHeap"]
