"""Supervision: nothing outlives its connection (docs/failures.md).

Closing a connection ends every process of the server's tree, grandchildren
and orphans included; an agent killed with SIGKILL takes its workers, their
servers and the servers' grandchildren with it. The grandchild tests run
under both enforcement paths (the ``enforcement`` fixture): a cgroup per
generation, whose kill reaches every member, and the watch, which finds
them by parentage alone. (A worker killed with SIGKILL leaves its tree to
the forkserver: tests/client/test_forkserver.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers import ISOLATIONS, PY, SERVERS, alive_after_sync, end_process, pid_alive, raw_args, run

from lovia_mcp import MCPError, MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

AGENT_PROC = str(SERVERS / "agent_proc.py")
SUP_SERVER = str(SERVERS / "sup_server.py")
# The agent reports its pids after starting a worker, a server and three
# sleepers: seconds when the forkserver is cold.
REPORT_WAIT = 15.0
# docs/failures.md: the worker sees its pipe close and kills the tree within about a second.
AGENT_DEATH_CLEANUP = 2.0


def _describe(pid: int) -> str:
    try:
        p = psutil.Process(pid)
        return f"{pid} {p.status()} ppid={p.ppid()} pgid={os.getpgid(pid)} {' '.join(p.cmdline())[:80]}"
    except (psutil.Error, OSError) as exc:
        return f"{pid} {exc!r}"


@ISOLATIONS
@pytest.mark.timing
def test_closing_a_connection_ends_the_server_its_grandchildren_and_its_orphans(
    isolation: str, enforcement: str
) -> None:
    async def main() -> tuple[list[int], int | None]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation)  # type: ignore[arg-type]
        conn = await server.open()
        try:
            server_pid = json.loads(str(await conn.call_tool("pid")))["pid"]
            children = json.loads(str(await conn.call_tool("spawn", {"n": 2})))
            orphans = json.loads(str(await conn.call_tool("spawn", {"n": 2, "orphan": True})))
            tree = [server_pid, *children, *orphans]
            assert all(pid_alive(p) for p in tree)
            assert (await conn.stats()).enforcement == enforcement
            # The orphans' parent is gone: they now belong to the worker
            # (a subreaper), or to pytest in isolation="none".
            assert all(psutil.Process(p).ppid() != server_pid for p in orphans)
            worker = conn.worker_pid
        finally:
            await conn.close()
        return tree, worker

    tree, worker = run(main())
    # close() waits for the worker's tree kill, so this is a formality.
    alive, took = alive_after_sync(tree + ([worker] if worker else []), 1.0)
    assert alive == [], alive
    assert took < 0.5, took


@pytest.mark.timeout(30)
def test_agent_killed_with_sigkill_takes_worker_server_and_grandchildren_within_two_seconds(enforcement: str) -> None:
    agent = subprocess.Popen([PY, AGENT_PROC], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert agent.stdout is not None
        ready, _, _ = select.select([agent.stdout], [], [], REPORT_WAIT)
        assert ready, "the agent process did not report its pids"
        line = agent.stdout.readline()
        assert line, agent.stderr.read().decode() if agent.stderr else ""
        report = json.loads(line)
        pids = [report["worker"], report["server"], *report["grandchildren"]]
        assert len(pids) == 5 and all(pid_alive(p) for p in pids), report
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(5)
        alive, took = alive_after_sync(pids, AGENT_DEATH_CLEANUP)
        assert alive == [], f"still alive {took:.2f} s after SIGKILL: {alive}"
        print(f"[{enforcement}] agent SIGKILL: worker, server and grandchildren gone in {took:.3f} s")
    finally:
        end_process(agent)


@ISOLATIONS
@pytest.mark.timing
def test_closing_with_a_call_in_flight_fails_the_call_and_still_ends_the_tree(isolation: str) -> None:
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation)  # type: ignore[arg-type]
        conn = await server.open()
        server_pid = json.loads(str(await conn.call_tool("pid")))["pid"]
        children = json.loads(str(await conn.call_tool("spawn", {"n": 1, "orphan": True})))
        in_flight = asyncio.ensure_future(conn.call_tool("hang"))  # ignores SIGTERM too
        while not conn.core.in_flight:  # noqa: SLF001 - close once the call is in flight
            await asyncio.sleep(0)
        started = time.monotonic()
        await conn.close()
        took = time.monotonic() - started
        with pytest.raises(MCPError) as info:
            await asyncio.wait_for(in_flight, 1.0)
        assert info.value.kind == "closed" and info.value.tool_name == "hang"
        alive = [p for p in [server_pid, *children] if pid_alive(p)]
        assert alive == [], (server_pid, children, took, [_describe(p) for p in alive])
        # SIGTERM, TERM_GRACE (0.5 s), SIGKILL: bounded well below CLOSE_WAIT.
        assert took < 2.0, took

    run(main())


def test_orphans_that_exit_are_reaped_by_the_worker_while_the_connection_lives() -> None:
    # The worker is a subreaper: orphans become its children, and their exit
    # must not leave zombies piling up for the connection's lifetime.
    async def main() -> None:
        server = MCPServerStdio(command=PY, args=[SUP_SERVER], name="sup")
        async with server.session() as conn:
            worker = conn.worker_pid
            assert worker is not None
            assert str(await conn.call_tool("orphans", {"n": 20})) == "done"
            deadline = time.monotonic() + 3.0
            while True:
                zombies = [p.pid for p in psutil.Process(worker).children() if _is_zombie(p)]
                if not zombies or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert zombies == [], f"{len(zombies)} zombies left in the worker"
            assert str(await conn.call_tool("echo", {"text": "ok"})) == "ok"

    run(main())


def _is_zombie(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.timing
def test_an_agent_that_exits_without_closing_its_connection_exits_promptly_and_leaves_nothing() -> None:
    # multiprocess joins the children it started at interpreter exit; a worker
    # only ends when its pipe closes, so a tracked worker would hang the exit.
    script = (
        "import asyncio, json, sys\n"
        "from lovia_mcp import MCPServerStdio\n"
        "async def main():\n"
        f"    conn = await MCPServerStdio(command={PY!r}, args={raw_args()!r}).open()\n"
        "    print(json.dumps([conn.worker_pid, conn.server_pid]), flush=True)\n"
        "asyncio.run(main())\n"
    )
    started = time.monotonic()
    done = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=20)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    worker, server = json.loads(done.stdout.splitlines()[-1])
    assert elapsed < 10, elapsed
    alive, _ = alive_after_sync([worker, server], 2.0)
    assert alive == []
