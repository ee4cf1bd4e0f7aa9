"""A host closes once, however often it is asked: the agent's Close and the worker's end both ask.

Pure logic over a host with no server (its sweep counted): no process is started.
"""

from __future__ import annotations

import asyncio

import pytest

from lovia_mcp_worker.session.host import Host

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def counted_host(gate: asyncio.Event | None = None) -> tuple[Host, list[int]]:
    host = Host(lambda msg: None, subreaper=False)
    sweeps: list[int] = []

    async def sweep() -> None:
        if gate is not None:
            await gate.wait()
        sweeps.append(1)

    host.containment.sweep = sweep  # type: ignore[method-assign]
    return host, sweeps


def test_a_second_close_waits_for_the_first_and_does_not_sweep_again() -> None:
    async def main() -> list[int]:
        gate = asyncio.Event()
        host, sweeps = counted_host(gate)
        first = asyncio.ensure_future(host.aclose())
        second = asyncio.ensure_future(host.aclose())
        await asyncio.sleep(0)
        assert not second.done()  # it waits for the first, which waits at the gate
        gate.set()
        await asyncio.gather(first, second)
        await host.aclose()
        return sweeps

    assert asyncio.run(main()) == [1]


def test_a_close_cancelled_before_its_end_is_done_again_by_the_next_caller() -> None:
    async def main() -> list[int]:
        gate = asyncio.Event()
        host, sweeps = counted_host(gate)
        first = asyncio.ensure_future(host.aclose())
        second = asyncio.ensure_future(host.aclose())
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        gate.set()
        await second
        return sweeps

    assert asyncio.run(main()) == [1]
