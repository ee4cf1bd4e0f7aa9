"""Supervision: nothing outlives its connection (DESIGN.md, failure semantics).

Closing a connection ends every process of the server's tree, grandchildren
and orphans included; an agent killed with SIGKILL takes its workers, their
servers and the servers' grandchildren with it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import PY, SERVERS, pid_alive, raw_args, run

from lovia_mcp import MCPServerStdio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process supervision is Linux-only")

AGENT_PROC = str(SERVERS / "agent_proc.py")
# The agent reports its pids after starting a worker, a server and three
# sleepers: seconds when the forkserver is cold.
REPORT_WAIT = 15.0
# DESIGN.md: the worker sees its pipe close and kills the tree "within about a second".
AGENT_DEATH_CLEANUP = 2.0


def _alive_after(pids: list[int], seconds: float) -> tuple[list[int], float]:
    """Wait up to ``seconds`` for ``pids`` to exit; return (still alive, time taken)."""
    started = time.monotonic()
    deadline = started + seconds
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    while True:
        alive = [p.pid for p in procs if pid_alive(p.pid)]
        left = deadline - time.monotonic()
        if not alive or left <= 0:
            return alive, time.monotonic() - started
        psutil.wait_procs([p for p in procs if p.pid in alive], timeout=min(0.02, left))


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_closing_a_connection_ends_the_server_its_grandchildren_and_its_orphans(isolation: str) -> None:
    async def main() -> tuple[list[int], int | None]:
        server = MCPServerStdio(command=PY, args=raw_args(), name="raw", isolation=isolation)  # type: ignore[arg-type]
        conn = await server.open()
        try:
            server_pid = json.loads(str(await conn.call_tool("pid")))["pid"]
            children = json.loads(str(await conn.call_tool("spawn", {"n": 2})))
            orphans = json.loads(str(await conn.call_tool("spawn", {"n": 2, "orphan": True})))
            tree = [server_pid, *children, *orphans]
            assert all(pid_alive(p) for p in tree)
            # The orphans' parent is gone: they now belong to the worker
            # (a subreaper), or to pytest in isolation="none".
            assert all(psutil.Process(p).ppid() != server_pid for p in orphans)
            worker = conn.worker_pid
        finally:
            await conn.close()
        return tree, worker

    tree, worker = run(main())
    # close() waits for the worker's tree kill, so this is a formality.
    alive, took = _alive_after(tree + ([worker] if worker else []), 1.0)
    assert alive == [], alive
    assert took < 0.5, took


@pytest.mark.timeout(30)
def test_agent_killed_with_sigkill_takes_worker_server_and_grandchildren_within_two_seconds() -> None:
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
        alive, took = _alive_after(pids, AGENT_DEATH_CLEANUP)
        assert alive == [], f"still alive {took:.2f} s after SIGKILL: {alive}"
        print(f"agent SIGKILL: worker, server and grandchildren gone in {took:.3f} s")
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(5)
        for stream in (agent.stdin, agent.stdout, agent.stderr):
            if stream is not None:
                stream.close()
