"""The worker's start is off the open's path: the forkserver forks the next worker ahead of its request.

Whenever it has nothing else to do, the forkserver forks an *idle* worker
and announces its pid; the next open is served by that process (so the
open's worker pid is the announced one) and a fresh idle worker replaces it.
Both go with the agent: an idle worker exits when the forkserver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import raw, run

from lovia_mcp.client import channel as _channel
from lovia_mcp_worker.process import MAX_IDLE, MIN_IDLE

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
        # They wait as the forkserver's children, helpers of this agent, not a connection's.
        pool = forkserver.idle_pids()
        assert idle in pool and 1 <= len(pool) <= MAX_IDLE
        assert all(psutil.Process(pid).ppid() == forkserver.pid for pid in pool)
        assert _channel.helper_pids() == {forkserver.pid, *pool}

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


@pytest.mark.timeout(90)
def test_a_burst_of_opens_grows_the_idle_pool_to_serve_the_next_burst_and_every_idle_worker_goes_with_the_agent() -> None:
    """Five opens at once find the pool short; the pool grows (bounded), and the next burst forks nothing on request."""
    async def main() -> None:
        server = raw("process")
        async with server.session():
            pass
        forkserver = _channel._forkserver
        for _ in range(2):  # each request that finds the pool empty grows it by one
            assert await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT, count=MIN_IDLE) is not None
            async with contextlib.AsyncExitStack() as stack:
                await asyncio.gather(*(stack.enter_async_context(server.session()) for _ in range(MAX_IDLE)))
        assert await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT, count=MAX_IDLE) is not None
        pool = forkserver.idle_pids()
        assert len(pool) == MAX_IDLE
        async with contextlib.AsyncExitStack() as stack:
            conns = await asyncio.gather(*(stack.enter_async_context(server.session()) for _ in range(MAX_IDLE)))
            # Every open of the burst was served by a worker that was waiting.
            assert {c.worker_pid for c in conns} == set(pool)
        assert await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT, count=MAX_IDLE) is not None
        assert len(forkserver.idle_pids()) == MAX_IDLE  # bounded: never more

    run(main())


@pytest.mark.timeout(60)
def test_every_idle_worker_exits_with_the_agent_process() -> None:
    """An agent that exits (without closing anything) leaves none of its idle workers behind."""
    code = (
        "import asyncio, json, sys\n"
        "sys.path.insert(0, %r)\n"
        "from helpers import raw\n"
        "from lovia_mcp.client import channel\n"
        "async def main():\n"
        "    server = raw('process')\n"
        "    async with server.session():\n"
        "        pass\n"
        "    assert await asyncio.to_thread(channel._forkserver.idle_pid, %r, count=%d) is not None\n"
        "    async with contextlib.AsyncExitStack() as stack:\n"
        "        await asyncio.gather(*(stack.enter_async_context(server.session()) for _ in range(3)))\n"
        "    assert await asyncio.to_thread(channel._forkserver.idle_pid, %r, count=%d) is not None\n"
        "    print(json.dumps(sorted(channel.helper_pids())), flush=True)\n"
        "import contextlib\n"
        "asyncio.run(main())\n"
    ) % (str(Path(__file__).parent), IDLE_WAIT, MIN_IDLE, IDLE_WAIT, MIN_IDLE + 1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    helpers = json.loads(out.stdout)
    assert len(helpers) >= MIN_IDLE + 2  # the forkserver and a grown pool
    for pid in helpers:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(IDLE_WAIT)  # each exits once the agent has (bounded)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
