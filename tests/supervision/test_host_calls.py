"""The host's books of the calls in flight: each call's entries go when it ends, however it ends.

Pure logic over a host with no server (a call then fails at once: no Open
was sent): no process is started.
"""

from __future__ import annotations

import asyncio

import pytest
from lovia_mcp_worker.session.host import Host
from lovia_mcp_worker.wire.messages import CallTool, Cancel, Failure, WorkerMessage
from lovia_mcp_worker.wire.timers import SWEEP_SLACK

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def _host() -> tuple[Host, list[WorkerMessage]]:
    sent: list[WorkerMessage] = []
    return Host(sent.append, subreaper=False), sent


def test_a_call_that_ends_leaves_no_task_and_no_deadline_behind() -> None:
    async def main() -> None:
        host, sent = _host()
        host.handle(CallTool(id=1, name="t", arguments=b"{}", timeout=60.0))
        task = host._calls.tasks[1]  # the books under test
        await task
        assert [type(m) for m in sent] == [Failure]  # answered: no server
        assert not host._calls.tasks and not host._deadlines._timers

    asyncio.run(main())


def test_a_call_cancelled_before_its_task_ran_is_forgotten_and_not_answered() -> None:
    # A Cancel read in the same chunk as its CallTool: the task never runs,
    # so the coroutine that forgets a call as it ends never does.
    async def main() -> None:
        host, sent = _host()
        host.handle(CallTool(id=1, name="t", arguments=b"{}", timeout=60.0))
        task = host._calls.tasks[1]  # the books under test
        host.handle(Cancel(id=1))
        assert not host._calls.tasks and not host._deadlines._timers
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sent == []  # the agent abandoned it

    asyncio.run(main())


def test_answered_calls_deadlines_are_swept_so_the_heap_stays_bounded() -> None:
    async def main() -> int:
        host, sent = _host()
        for rid in range(1, 2001):
            host.handle(CallTool(id=rid, name="t", arguments=b"{}", timeout=60.0))
            await host._calls.tasks[rid]  # it fails at once: nothing stays in flight
        assert len(sent) == 2000
        return len(host._deadlines._timers._heap)  # the books under test

    left = asyncio.run(main())
    print(f"deadline entries left after 2,000 answered calls: {left}")
    assert left <= SWEEP_SLACK + 1


def test_a_cancel_that_asks_for_an_answer_is_answered_as_cancelled_even_before_its_task_ran() -> None:
    # A traced caller asks whether its cancel was the timeout: one far from
    # the deadline is answered "cancelled" at once, so the caller waits one
    # round trip for the word, not its bound.
    async def main() -> None:
        host, sent = _host()
        host.handle(CallTool(id=1, name="t", arguments=b"{}", timeout=60.0))
        task = host._calls.tasks[1]  # the books under test
        host.handle(Cancel(id=1, answer=True))
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [(type(m), getattr(m, "kind", None)) for m in sent] == [(Failure, "cancelled")]
        assert not host._calls.tasks and not host._deadlines._timers

    asyncio.run(main())
