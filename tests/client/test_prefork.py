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
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from helpers import raw, run, script_json
from lovia_mcp_worker.containment import cgroup_layout
from lovia_mcp_worker.forkserver.server import MAX_IDLE, MIN_IDLE, OPEN_WAIT

from lovia_mcp.client import forkserver as _forkserver_mod

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
        forkserver = _forkserver_mod.process_forkserver
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
        assert _forkserver_mod.helper_pids() == {forkserver.pid, *pool}

    run(main())


def _catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signum - 1)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["SIGKILL", "SIGTERM"])
def test_an_idle_worker_that_is_killed_or_terminated_is_replaced_and_the_next_open_still_works(ending: str) -> None:
    async def main() -> None:
        server = raw("process")
        async with server.session():
            pass
        forkserver = _forkserver_mod.process_forkserver
        idle = await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT)
        assert idle is not None
        if ending == "SIGKILL":
            psutil.Process(idle).kill()
        else:
            # An idle worker installs the serving SIGTERM handler ahead of its
            # request; until it has an agent, SIGTERM must still end it.
            deadline = asyncio.get_running_loop().time() + IDLE_WAIT
            while not _catches(idle, signal.SIGTERM):  # its set-up is done (polled: no hook to wait on)
                assert asyncio.get_running_loop().time() < deadline, "the idle worker never installed its handler"
                await asyncio.sleep(0.01)
            psutil.Process(idle).terminate()
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(idle).wait(IDLE_WAIT)
            assert not psutil.pid_exists(idle) or psutil.Process(idle).status() == psutil.STATUS_ZOMBIE
        async with server.session() as conn:
            assert conn.worker_pid not in (None, idle)
            assert str(await conn.call_tool("echo", {"text": "hi"})) == "hi"

    run(main())


@pytest.mark.timeout(90)
def test_a_burst_of_opens_grows_the_idle_pool_to_serve_the_next_burst_and_every_idle_worker_goes_with_the_agent() -> (
    None
):
    """Five opens at once find the pool short; the pool grows (bounded), and the next burst forks nothing on request."""

    async def main() -> None:
        server = raw("process")
        async with server.session():
            pass
        forkserver = _forkserver_mod.process_forkserver
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
        "from lovia_mcp.client import forkserver as channel\n"
        "async def main():\n"
        "    server = raw('process')\n"
        "    async with server.session():\n"
        "        pass\n"
        "    assert await asyncio.to_thread(channel.process_forkserver.idle_pid, %r, count=%d) is not None\n"
        "    async with contextlib.AsyncExitStack() as stack:\n"
        "        await asyncio.gather(*(stack.enter_async_context(server.session()) for _ in range(3)))\n"
        "    assert await asyncio.to_thread(channel.process_forkserver.idle_pid, %r, count=%d) is not None\n"
        "    print(json.dumps(sorted(channel.helper_pids())), flush=True)\n"
        "import contextlib\n"
        "asyncio.run(main())\n"
    ) % (str(Path(__file__).parents[1]), IDLE_WAIT, MIN_IDLE, IDLE_WAIT, MIN_IDLE + 1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    helpers = json.loads(out.stdout)
    assert len(helpers) >= MIN_IDLE + 2  # the forkserver and a grown pool
    for pid in helpers:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(IDLE_WAIT)  # each exits once the agent has (bounded)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _with_a_full_pool(tmp_path: Path, body: str) -> dict[str, object]:
    """Run ``body`` in a fresh agent process whose pool is full and never grew; what it printed (JSON).

    In scope for ``body`` (the rest of ``main()``): ``fs`` (the forkserver),
    ``pool`` (its idle workers' pids, ``MIN_IDLE`` of them), ``gates`` (one
    FIFO per idle worker, for ``gated_server.py``), ``held_at(gates)`` (the
    gates' writers, once every server holds its gate), ``release(writers)``,
    ``PY``, ``SERVERS``, ``MCPServerStdio``, ``close_spares``,
    ``warm_spares`` and ``WAIT``.
    """
    code = (
        "import asyncio, contextlib, json, os, sys, time\n"
        "sys.path.insert(0, %r)\n"
        "from helpers import PY, SERVERS, raw\n"
        "from lovia_mcp import MCPServerStdio, close_spares, warm_spares\n"
        "from lovia_mcp.client import forkserver as channel\n"
        "WAIT = %r\n"
        "async def held_at(gates):\n"
        "    # Each open returns once its server holds the gate's other end.\n"
        "    return await asyncio.gather(*(asyncio.to_thread(open, gate, 'w') for gate in gates))\n"
        "def release(writers):\n"
        "    for w in writers:\n"
        "        w.write('go\\n')\n"
        "        w.close()\n"
        "async def main():\n"
        "    async with raw('process').session():\n"
        "        pass\n"
        "    fs = channel.process_forkserver\n"
        "    assert await asyncio.to_thread(fs.idle_pid, WAIT, count=%d) is not None\n"
        "    pool = fs.idle_pids()\n"
        "    gates = [os.path.join(%r, f'gate{i}') for i in range(len(pool))]\n"
        "    for gate in gates:\n"
        "        os.mkfifo(gate)\n"
    ) % (str(Path(__file__).parents[1]), IDLE_WAIT, MIN_IDLE, str(tmp_path))
    code += body + "asyncio.run(main())\n"
    return script_json(code)


@pytest.mark.timeout(60)
def test_an_emptied_pool_is_refilled_once_the_opens_it_served_have_answered_not_during_them(tmp_path: Path) -> None:
    """The replacement's fork and set-up would compete for the CPU with the open it follows: it waits for its answer.

    A fresh agent (its pool never grew) opens as many servers as it has idle
    workers, each held at a gate before it answers: while they wait, the
    pool stays empty; once they answer, it is refilled.
    """
    seen = _with_a_full_pool(
        tmp_path,
        (
            "    async with contextlib.AsyncExitStack() as stack:\n"
            "        opens = [asyncio.ensure_future(stack.enter_async_context(MCPServerStdio(\n"
            "            command=PY, args=[str(SERVERS / 'gated_server.py'), gate], isolation='process',\n"
            "            name=f'gated{i}').session())) for i, gate in enumerate(gates)]\n"
            "        writers = await held_at(gates)\n"
            "        held = fs.idle_pids()\n"
            "        release(writers)\n"
            "        conns = await asyncio.gather(*opens)\n"
            "        refill = await asyncio.to_thread(fs.idle_pid, WAIT)\n"
            "        print(json.dumps({'pool': sorted(pool), 'served': sorted(c.worker_pid for c in conns),\n"
            "                          'held': held, 'refill': refill}), flush=True)\n"
        ),
    )
    pool = seen["pool"]
    assert isinstance(pool, list) and len(pool) == MIN_IDLE
    assert seen["served"] == pool  # every open took a waiting worker
    assert seen["held"] == []  # nothing forked while those opens were on their way
    assert seen["refill"] is not None and seen["refill"] not in pool


@pytest.mark.timeout(60)
def test_a_pool_emptied_by_warm_spares_is_refilled_beside_their_opens(tmp_path: Path) -> None:
    """Nobody waits for a spare's open: the forkserver refills its pool at once, not after those opens answer.

    Otherwise the replacements would be forked just as the spares are ready,
    that is, in the next run. The spares' servers are held at a gate; the
    pool is refilled while they wait, before the forkserver's fallback for
    opens that do not answer (OPEN_WAIT after the request) could have.
    """
    seen = _with_a_full_pool(
        tmp_path,
        (
            "    spared = [MCPServerStdio(command=PY, args=[str(SERVERS / 'gated_server.py'), gate], isolation='process',\n"
            "                             name=f'gated{i}', spares=1) for i, gate in enumerate(gates)]\n"
            "    asked = time.monotonic()\n"
            "    warming = asyncio.ensure_future(warm_spares(*spared))\n"
            "    writers = await held_at(gates)\n"
            "    refill = await asyncio.to_thread(fs.idle_pid, WAIT)\n"
            "    waited = time.monotonic() - asked\n"
            "    release(writers)\n"
            "    await warming\n"
            "    await close_spares(*spared)\n"
            "    print(json.dumps({'pool': sorted(pool), 'refill': refill, 'waited': waited}), flush=True)\n"
        ),
    )
    pool = seen["pool"]
    assert isinstance(pool, list) and len(pool) == MIN_IDLE
    assert seen["refill"] is not None and seen["refill"] not in pool
    # Seen (the spares' servers at their gates) before the fallback could fork it.
    waited = seen["waited"]
    assert isinstance(waited, float) and waited < OPEN_WAIT


_HELD_RUN = (
    "    from lovia import Agent, Runner, tool\n"
    "    from lovia.testing import ScriptedProvider, call, text\n"
    "    from lovia_mcp import MCP\n"
    "    held, go = asyncio.Event(), asyncio.Event()\n"
    "    @tool\n"
    "    async def hold() -> str:\n"
    '        """Hold the run in its tool call."""\n'
    "        held.set()\n"
    "        await go.wait()\n"
    "        return 'ok'\n"
    "    plugin = MCP(*(raw('process', name=f's{i}') for i in range(len(pool))))\n"
    "    agent = Agent(name='a', model=ScriptedProvider([call('hold', {}), text('done')]), tools=[hold],\n"
    "                  plugins=[plugin])\n"
    "    asked = time.monotonic()\n"
    "    running = asyncio.ensure_future(Runner.run(agent, 'go'))\n"
)


@pytest.mark.timeout(60)
def test_a_pool_emptied_by_a_runs_opens_is_not_refilled_while_the_run_goes_on(tmp_path: Path) -> None:
    """The refills' forks and the idle workers' set-up would compete with the run for the CPU: they wait for its end.

    A run opens as many servers as the pool has idle workers, then holds in
    a tool call. The opens have answered, but the pool stays empty until the
    forkserver's fallback (``OPEN_WAIT`` after the last request) refills it.
    """
    seen = _with_a_full_pool(
        tmp_path,
        _HELD_RUN
        + (
            "    await held.wait()\n"
            "    refill = await asyncio.to_thread(fs.idle_pid, WAIT)\n"
            "    waited = time.monotonic() - asked\n"
            "    go.set()\n"
            "    result = await running\n"
            "    await plugin.aclose()\n"
            "    print(json.dumps({'pool': sorted(pool), 'refill': refill, 'waited': waited, 'output': result.output}),\n"
            "          flush=True)\n"
        ),
    )
    assert seen["output"] == "done"
    assert seen["refill"] is not None and seen["refill"] not in seen["pool"]
    # Not before the fallback: every request was made after `asked`.
    waited = seen["waited"]
    assert isinstance(waited, float) and waited >= OPEN_WAIT


@pytest.mark.timeout(60)
def test_a_pool_emptied_by_a_runs_opens_is_refilled_once_the_run_has_ended(tmp_path: Path) -> None:
    """The run's end tells the forkserver (``E``): the pool is refilled then, before its fallback could."""
    seen = _with_a_full_pool(
        tmp_path,
        _HELD_RUN
        + (
            "    await held.wait()\n"
            "    go.set()\n"
            "    result = await running\n"
            "    ended = time.monotonic() - asked\n"
            "    refill = await asyncio.to_thread(fs.idle_pid, WAIT)\n"
            "    refilled = time.monotonic() - asked\n"
            "    await plugin.aclose()\n"
            "    print(json.dumps({'pool': sorted(pool), 'refill': refill, 'ended': ended, 'refilled': refilled}),\n"
            "          flush=True)\n"
        ),
    )
    assert seen["refill"] is not None and seen["refill"] not in seen["pool"]
    ended, refilled = seen["ended"], seen["refilled"]
    assert isinstance(ended, float) and isinstance(refilled, float)
    print(f"the run took {ended:.2f} s, the refill came {refilled:.2f} s after the requests")
    if ended > OPEN_WAIT / 2:
        pytest.skip(f"the run took {ended:.2f} s: too close to the fallback ({OPEN_WAIT} s) to tell them apart")
    # The fallback comes OPEN_WAIT after the opens' requests (all after `asked`).
    assert refilled < OPEN_WAIT


def _premade(pid: int) -> list[str]:
    """The generation cgroups named for worker ``pid``, every hierarchy."""
    where = cgroup_layout.layout()
    assert where is not None
    mark = f"{cgroup_layout.PREFIX}{pid}."
    return sorted(os.path.join(p, n) for p in where.parents for n in os.listdir(p) if n.startswith(mark))


async def _until(what: Callable[[], bool], why: str) -> None:
    """Poll ``what`` (a state another process changes, with no event to wait on) until true, bounded."""
    deadline = asyncio.get_running_loop().time() + IDLE_WAIT
    while not what():
        assert asyncio.get_running_loop().time() < deadline, why
        await asyncio.sleep(0.01)


@pytest.mark.timeout(60)
def test_an_idle_worker_makes_its_first_generations_cgroup_the_open_uses_it_and_a_killed_ones_is_removed() -> None:
    """The cgroup's mkdirs are off the open's path; none outlives the worker that made it."""
    if cgroup_layout.layout() is None:
        pytest.skip("no cgroup this process may make (an ordinary user, or a read-only mount)")

    async def main() -> None:
        server = raw("process")
        async with server.session():
            pass
        forkserver = _forkserver_mod.process_forkserver
        assert await asyncio.to_thread(forkserver.idle_pid, IDLE_WAIT, count=MIN_IDLE) is not None
        first, second = forkserver.idle_pids()[:2]
        for pid in (first, second):
            await _until(lambda pid=pid: bool(_premade(pid)), f"idle worker {pid} made no cgroup")  # type: ignore[misc]
        made = _premade(first)
        assert all(path.endswith(".1") for path in made), made  # generation 1's
        async with server.session() as conn:
            assert conn.worker_pid == first  # taken straight from the pool
            server_pid = (await conn.stats()).server_pid
            assert server_pid is not None
            with open(f"/proc/{server_pid}/cgroup", encoding="ascii") as f:
                where = f.read()
            assert all(os.path.basename(path) in where for path in made), (made, where)
            assert (await conn.stats()).enforcement == "cgroup"
        psutil.Process(second).kill()
        await _until(lambda: not _premade(second), "the killed idle worker's cgroup was left")
        print(f"idle worker {first}: {len(made)} cgroup directories made ahead, taken by its open")

    run(main())
