"""The timer heap both sides time their calls with (the worker's deadlines, the agent's backstop).

Pure logic on a real event loop: the deadline and backstop tests drive it
through real workers; what they cannot reach is a callback that raises.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lovia_mcp_worker.wire.timers import TimerHeap

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_an_entry_due_with_one_whose_callback_raises_still_fires() -> None:
    # A bug in one call's timeout (a retire that raises) must not leave the
    # other calls due at that moment without theirs.
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        raised: list[str] = []
        loop.set_exception_handler(lambda _loop, context: raised.append(repr(context.get("exception"))))
        heap = TimerHeap()
        fired = asyncio.Event()

        def broken(_key: int) -> Any:
            raise RuntimeError("a bug in one call's timeout")

        now = loop.time()
        heap.add(1, now, broken)
        heap.add(2, now, lambda _key: fired.set())
        await asyncio.wait_for(fired.wait(), 5.0)
        heap.stop()
        return raised

    raised = asyncio.run(main())
    assert raised == ['RuntimeError("a bug in one call\'s timeout")']
