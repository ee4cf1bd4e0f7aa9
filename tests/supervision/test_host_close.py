"""A host closes once, however often it is asked: the agent's Close and the worker's end both ask.

Pure logic over a host with no server (its sweep counted): no process is started.
"""

from __future__ import annotations

import asyncio

import pytest
from lovia_mcp_worker.session.host import Host

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


class TwoCloses:
    """A host with no server whose sweep waits at ``gate`` and is counted, and two closes started on it."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.sweeps: list[int] = []
        self.host = Host(lambda msg: None, subreaper=False)

        async def sweep() -> None:
            await self.gate.wait()
            self.sweeps.append(1)

        self.host.generations.containment.sweep = sweep  # type: ignore[method-assign]
        self.first = asyncio.ensure_future(self.host.aclose())
        self.second = asyncio.ensure_future(self.host.aclose())


def test_a_second_close_waits_for_the_first_and_does_not_sweep_again() -> None:
    async def main() -> list[int]:
        two = TwoCloses()
        await asyncio.sleep(0)
        assert not two.second.done()  # it waits for the first, which waits at the gate
        two.gate.set()
        await asyncio.gather(two.first, two.second)
        await two.host.aclose()
        return two.sweeps

    assert asyncio.run(main()) == [1]


def test_a_close_cancelled_before_its_end_is_done_again_by_the_next_caller() -> None:
    async def main() -> list[int]:
        two = TwoCloses()
        await asyncio.sleep(0)
        two.first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await two.first
        two.gate.set()
        await two.second
        return two.sweeps

    assert asyncio.run(main()) == [1]
