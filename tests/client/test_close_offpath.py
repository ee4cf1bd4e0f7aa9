"""A run's end does not wait for a server's death; everything else still does (issue 19).

The plugin's ``aclose`` starts each per-run connection's close and returns;
the worker kills its tree as before. ``MCP.aclose()``, ``close_spares()``
and the event loop's end wait until every worker and server is gone, and a
call in flight at the close gets its clear ``closed`` error.

The server here is ``raw_server.py --linger``: at stdin's EOF it ignores
SIGTERM and blocks, so each close spends the worker's whole TERM grace on it
(half a second): a run's end that waited for it could not be quick.
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from helpers import drive, pid_alive, pid_of, raw, run
from lovia.testing import call
from lovia_mcp_worker.containment.proctree import TERM_GRACE

from lovia_mcp import MCP, MCPError, close_spares
from lovia_mcp.client import closing

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

# The plugin's close only sends a Close frame per connection: well under a
# millisecond each when idle. Half the TERM grace still tells "started"
# from "waited for the server's death" on a loaded machine.
RUN_CLOSE_WITHIN = TERM_GRACE / 2


class PidsSeen:
    """A plugin around ``MCP`` that records the worker and server pids of each run, and times its close."""

    def __init__(self, plugin: MCP) -> None:
        self.plugin = plugin
        self.name = plugin.name
        self.pids: list[int] = []
        self.close_took = 0.0

    async def setup(self, ctx: object) -> object:
        import dataclasses

        instance = await self.plugin.setup(ctx)  # type: ignore[arg-type]
        for conn in self.plugin.connections():
            self.pids += [p for p in (conn.worker_pid, await pid_of(conn)) if p is not None]
        inner = instance.aclose

        async def aclose() -> None:
            t0 = time.monotonic()
            await inner()
            self.close_took = time.monotonic() - t0

        return dataclasses.replace(instance, aclose=aclose)


def lingering(n: int, **options: object) -> MCP:
    return MCP(*(raw("process", "--linger", name=f"s{i}", **options) for i in range(n)))


@pytest.mark.timeout(60)
@pytest.mark.timing
def test_a_runs_end_returns_before_its_servers_die_and_mcp_aclose_waits_until_they_are_gone() -> None:
    async def main() -> None:
        plugin = PidsSeen(lingering(3))
        await drive(plugin, call("s0__echo", {"text": "hi"}))
        print(f"run's close of 3 servers slow to die: {plugin.close_took * 1000:.2f} ms (TERM grace {TERM_GRACE} s)")
        assert plugin.close_took < RUN_CLOSE_WITHIN
        assert closing.pending() == 3
        assert len(plugin.pids) == 6
        t0 = time.monotonic()
        await plugin.plugin.aclose()
        print(f"MCP.aclose() waited {(time.monotonic() - t0) * 1000:.0f} ms for them")
        assert closing.pending() == 0
        assert [p for p in plugin.pids if pid_alive(p)] == []

    run(main())


@pytest.mark.timeout(60)
def test_the_event_loops_end_waits_for_the_closes_a_run_started() -> None:
    plugin = PidsSeen(lingering(2))

    async def main() -> None:
        await drive(plugin, call("s0__echo", {"text": "hi"}))
        assert closing.pending() == 2

    run(main())  # asyncio.run cancels the close tasks left; each finishes its close first
    assert len(plugin.pids) == 4
    assert [p for p in plugin.pids if pid_alive(p)] == []


@pytest.mark.timeout(60)
def test_close_spares_waits_for_the_closes_a_run_started() -> None:
    async def main() -> None:
        plugin = PidsSeen(lingering(2))
        await drive(plugin, call("s0__echo", {"text": "hi"}))
        assert closing.pending() == 2
        await close_spares()
        assert closing.pending() == 0
        assert [p for p in plugin.pids if pid_alive(p)] == []

    run(main())


@pytest.mark.timeout(60)
@pytest.mark.timing
def test_a_call_in_flight_when_the_run_closes_gets_a_closed_error_and_nothing_is_left() -> None:
    async def main() -> None:
        plugin = MCP(raw("process"))
        instance = await plugin.setup(None)  # type: ignore[arg-type]
        (conn,) = plugin.connections()
        pids = [conn.worker_pid, await pid_of(conn)]
        hang = next(t for t in instance.tools if t.name == "raw__hang")
        in_flight = asyncio.ensure_future(hang.invoke({}, None))
        while not conn.core.in_flight:
            await asyncio.sleep(0)
        t0 = time.monotonic()
        await instance.aclose()
        took = time.monotonic() - t0
        print(f"run's close with a call in flight: {took * 1000:.2f} ms")
        assert took < RUN_CLOSE_WITHIN
        with pytest.raises(MCPError) as info:
            await in_flight
        assert info.value.kind == "closed"
        await plugin.aclose()
        assert [p for p in pids if p is not None and pid_alive(p)] == []

    run(main())
