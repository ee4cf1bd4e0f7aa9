"""The worker's start is off the open's path: the forkserver forks the next worker ahead of its request.

Whenever it has nothing else to do, the forkserver forks an *idle* worker
and announces its pid; the next open is served by that process (so the
open's worker pid is the announced one) and a fresh idle worker replaces it.
Both go with the agent: an idle worker exits when the forkserver does.
"""

from __future__ import annotations

import asyncio
import sys

import psutil
import pytest
from helpers import raw, run

from lovia_mcp.client import channel as _channel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process isolation is tested on Linux")

# The forkserver forks its idle worker when it has nothing else to do:
# milliseconds after an open when idle; the margin is for a loaded 2-core box.
IDLE_WAIT = 10.0


@pytest.mark.timeout(60)
def test_an_open_is_served_by_the_idle_worker_and_a_fresh_one_replaces_it() -> None:
    async def main() -> None:
        server = raw("process")
        async with server.session():
            pass  # the forkserver is up
        forkserver = _channel._forkserver
        served = []
        idle = await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT)
        for _ in range(3):
            assert idle is not None
            async with server.session() as conn:
                assert conn.worker_pid == idle
                served.append(idle)
                idle = await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT)
                assert idle is not None and idle != conn.worker_pid
        assert len(set(served)) == 3
        # It waits as the forkserver's child, a helper of this agent, not a connection's.
        assert psutil.Process(idle).ppid() == forkserver.pid
        assert _channel.helper_pids() == {forkserver.pid, idle}

    run(main())


@pytest.mark.timeout(60)
def test_a_killed_idle_worker_is_replaced_and_the_next_open_still_works() -> None:
    async def main() -> None:
        server = raw("process")
        async with server.session():
            pass
        forkserver = _channel._forkserver
        idle = await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT)
        assert idle is not None
        psutil.Process(idle).kill()
        async with server.session() as conn:
            assert conn.worker_pid not in (None, idle)
            assert str(await conn.call_tool("echo", {"text": "hi"})) == "hi"

    run(main())
