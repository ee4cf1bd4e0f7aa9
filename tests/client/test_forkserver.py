"""lovia-mcp's own forkserver (lovia_mcp_worker.forkserver.server), through real agent processes.

A worker never re-imports the agent's ``__main__`` (an unguarded script's
top level runs once, however many workers start), the forkserver goes
with the agent, even one killed with SIGKILL, and it cleans up after a
worker killed with SIGKILL under each enforcement path.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import POLL, PY, RAW_SERVER, alive_after_sync, end_process, pid_alive
from lovia_mcp_worker.forkserver.server import MAX_IDLE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

# An agent process reports once its workers run: seconds on a loaded machine.
REPORT_WAIT = 15.0
# The forkserver hears a worker's death at once (SIGCHLD) and kills what it
# left in one pass; its cgroups go once those are reaped: milliseconds, with
# a loaded machine's margin.
LEFTOVERS_GONE = 3.0


def _agent_script(tmp_path: Path, body: str) -> str:
    script = tmp_path / "agent.py"
    script.write_text(
        "import asyncio, json, sys\n"
        "from lovia_mcp import MCPServerStdio\n"
        "from lovia_mcp.client.forkserver import helper_pids\n"
        f"open({str(tmp_path / 'imports.log')!r}, 'a').write('imported\\n')  # unguarded\n"
        "async def main():\n"
        f"    server = MCPServerStdio(command={PY!r}, args=[{RAW_SERVER!r}], name='raw')\n"
        f"{body}"
        "asyncio.run(main())\n"
    )
    return str(script)


@pytest.mark.timeout(30)
def test_an_unguarded_agent_script_runs_once_however_many_workers_start(tmp_path: Path) -> None:
    script = _agent_script(
        tmp_path,
        "    conns = [await server.open() for _ in range(3)]\n"
        "    print(json.dumps([c.worker_pid for c in conns]), flush=True)\n"
        "    assert str(await conns[0].call_tool('echo', {'text': 'hi'})) == 'hi'\n"
        "    for c in conns:\n"
        "        await c.close()\n",
    )
    done = subprocess.run([PY, script], capture_output=True, text=True, timeout=25)
    assert done.returncode == 0, done.stderr
    workers = json.loads(done.stdout.splitlines()[-1])
    assert len(set(workers)) == 3
    assert (tmp_path / "imports.log").read_text() == "imported\n"


@pytest.mark.timeout(30)
def test_the_forkserver_goes_with_an_agent_killed_by_sigkill(tmp_path: Path) -> None:
    script = _agent_script(
        tmp_path,
        "    conn = await server.open()\n"
        "    print(json.dumps({'forkserver': sorted(helper_pids()), 'worker': conn.worker_pid}), flush=True)\n"
        "    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)\n",
    )
    agent = subprocess.Popen([PY, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert agent.stdout is not None
        ready, _, _ = select.select([agent.stdout], [], [], REPORT_WAIT)
        assert ready, "the agent process did not report its pids"
        report = json.loads(agent.stdout.readline())
        # The forkserver, and the idle workers it forked ahead of the next opens
        # (MIN_IDLE of them, more when opens found the pool empty, as on a loaded machine).
        helpers = report["forkserver"]
        assert 1 <= len(helpers) <= 1 + MAX_IDLE and not set(helpers) & {agent.pid, report["worker"]}
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(5)
        alive, took = alive_after_sync([*helpers, report["worker"]], 2.0)
        assert alive == [], f"still alive {took:.2f} s after the agent's SIGKILL: {alive}"
    finally:
        end_process(agent)


@pytest.mark.timeout(30)
def test_a_workers_exit_status_reaches_the_agent_through_the_forkserver() -> None:
    # The worker is the forkserver's child: the agent learns how it ended
    # from the status socket, not from waitpid.
    import asyncio

    from lovia_mcp_worker.wire.framing import frame_cap
    from lovia_mcp_worker.wire.messages import Close, Closed

    from lovia_mcp.client.worker_link import ProcessChannel

    async def main() -> None:
        loop = asyncio.get_running_loop()
        killed = ProcessChannel(frame_cap(0))
        why: asyncio.Future[str] = loop.create_future()
        await killed.start(lambda m: None, why.set_result)
        await killed.started()  # the pid comes while Open would be on its way
        assert killed.pid is not None
        os.kill(killed.pid, signal.SIGKILL)
        assert await asyncio.wait_for(why, 10) == "the worker process was killed by SIGKILL"
        await asyncio.wait_for(killed.wait_lost(), 1)
        await killed.aclose()

        closed = ProcessChannel(frame_cap(0))
        replied: asyncio.Future[object] = loop.create_future()
        await closed.start(lambda m: replied.set_result(m) if isinstance(m, Closed) else None, lambda w: None)
        await closed.started()
        closed.send(Close(id=1))
        assert await asyncio.wait_for(replied, 10) == Closed(id=1)
        await closed.aclose()
        assert closed._proc is not None and closed._proc.exitcode == 0  # noqa: SLF001

    asyncio.run(main())


def _cgroups_of(worker: int) -> list[str]:
    """The generation cgroups named for ``worker`` that exist now (none without a cgroup layout)."""
    from lovia_mcp_worker.containment import cgroup

    where = cgroup.layout()
    mark = f"{cgroup.PREFIX}{worker}."
    return (
        []
        if where is None
        else [
            os.path.join(parent, name)
            for parent in where.parents
            for name in os.listdir(parent)
            if name.startswith(mark)
        ]
    )


@pytest.mark.timeout(40)
def test_the_forkserver_kills_what_a_sigkilled_worker_left_and_removes_its_cgroups(
    tmp_path: Path, enforcement: str
) -> None:
    # Under the watch (no cgroup) only the forkserver's SIGKILL of its
    # adopted children ends the dead worker's grandchildren, orphans and
    # setsid escapee; under a cgroup per generation the cgroup kill does it
    # too, and only the forkserver removes the emptied cgroups: nothing else
    # would until the next worker starts (its sweep). So the agent runs in a
    # process of its own whose pool is full before the kill: no worker is
    # forked after it. With either step removed from the forkserver's _reap, the
    # enforcement path that has no other remedy fails here.
    from lovia_mcp_worker.forkserver.server import MIN_IDLE

    script = _agent_script(
        tmp_path,
        "    from lovia_mcp.client.forkserver import process_forkserver\n"
        "    conn = await server.open()\n"
        "    spawned = json.loads(str(await conn.call_tool('spawn', {'n': 2})))\n"
        "    spawned += json.loads(str(await conn.call_tool('spawn', {'n': 1, 'orphan': True})))\n"
        "    spawned.append(json.loads(str(await conn.call_tool('escape')))['pid'])\n"
        "    # The pool is full: no worker is forked after this.\n"
        f"    assert await asyncio.to_thread(process_forkserver.idle_pid, {REPORT_WAIT}, count={MIN_IDLE})\n"
        "    report = {'worker': conn.worker_pid, 'tree': [conn.server_pid, *spawned],\n"
        "              'idle': process_forkserver.idle_pids()}\n"
        "    print(json.dumps(report), flush=True)\n"
        "    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)\n"
        "    await conn.close()\n",
    )
    agent = subprocess.Popen([PY, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert agent.stdout is not None and agent.stdin is not None
        ready, _, _ = select.select([agent.stdout], [], [], REPORT_WAIT)
        assert ready, "the agent process did not report its pids"
        line = agent.stdout.readline()
        assert line, agent.stderr.read().decode() if agent.stderr else ""
        report = json.loads(line)
        worker, tree = report["worker"], report["tree"]
        assert len(tree) == 5 and all(pid_alive(p) for p in tree), report
        cgroups = _cgroups_of(worker)
        assert bool(cgroups) == (enforcement == "cgroup"), cgroups
        if enforcement == "cgroup":
            # An idle worker sweeps the empty cgroups of dead workers just
            # before it makes its own, ahead of its open: once every idle
            # worker's is there, no sweep can follow the kill.
            started = time.monotonic()
            while not all(_cgroups_of(p) for p in report["idle"]) and time.monotonic() < started + REPORT_WAIT:
                time.sleep(POLL)
            assert all(_cgroups_of(p) for p in report["idle"]), report["idle"]
        os.kill(worker, signal.SIGKILL)
        alive, took = alive_after_sync(tree, LEFTOVERS_GONE)
        assert alive == [], f"[{enforcement}] still alive {took:.2f} s after the worker's SIGKILL: {alive}"
        started = time.monotonic()
        while _cgroups_of(worker) and time.monotonic() < started + LEFTOVERS_GONE:
            time.sleep(POLL)
        left = _cgroups_of(worker)
        print(
            f"[{enforcement}] a SIGKILLed worker's tree gone in {took:.3f} s, "
            f"its {len(cgroups)} cgroups {time.monotonic() - started:.3f} s after that"
        )
        assert left == [], f"[{enforcement}] the dead worker's cgroups are still there: {left}"
        agent.stdin.close()
        assert agent.wait(REPORT_WAIT) == 0, agent.stderr.read().decode() if agent.stderr else ""
    finally:
        end_process(agent)


@pytest.mark.timeout(60)
def test_the_forkserver_keeps_as_many_idle_workers_as_the_agent_asks_ending_the_newest_over_it(
    tmp_path: Path,
) -> None:
    # What `lovia-mcp serve` asks once every server is open and none opens
    # another (one idle worker). The agent opens nothing here, so the pool
    # grows to four only if asked, and shrinks to one only if the others end.
    script = _agent_script(
        tmp_path,
        "    from lovia_mcp.client.forkserver import keep_idle, process_forkserver\n"
        "    process_forkserver.ensure_running()\n"
        "    keep_idle(4)\n"
        f"    assert await asyncio.to_thread(process_forkserver.idle_pid, {REPORT_WAIT}, count=4)\n"
        "    four = process_forkserver.idle_pids()\n"
        "    assert keep_idle(1)\n"
        f"    one = await asyncio.to_thread(process_forkserver.idle_pids_at_most, 1, {REPORT_WAIT})\n"
        "    print(json.dumps({'four': four, 'one': one}), flush=True)\n"
        "    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)\n",
    )
    agent = subprocess.Popen([PY, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert agent.stdout is not None and agent.stdin is not None
        ready, _, _ = select.select([agent.stdout], [], [], 2 * REPORT_WAIT)
        assert ready, "the agent process did not report its idle workers"
        line = agent.stdout.readline()
        assert line, agent.stderr.read().decode() if agent.stderr else ""
        report = json.loads(line)
        four, one = report["four"], report["one"]
        assert len(four) == 4 and one == four[:1], report
        # The ended ones exit (their pool socket closed) and are reaped.
        alive, took = alive_after_sync(four[1:], LEFTOVERS_GONE)
        assert alive == [], f"idle workers over the count still alive {took:.2f} s after: {alive}"
    finally:
        end_process(agent)
